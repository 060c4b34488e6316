//! Speculative decoding's workloads: answers that copy, answers given their text in advance,
//! and text nothing can predict.
//!
//! - `edit`: chat requests asking for a paragraph, a function or a record back with one change
//!   (`edit_texts.rs`), one at a time, greedy, each answer as long as the model makes it. A
//!   server that drafts from the prompt writes these faster. A request repeats after
//!   `EDIT_TEXTS.len()`: its prompt is then in the prefix cache, on both servers alike.
//! - `edit+prediction`: the same requests with OpenAI's `prediction` set to the unchanged
//!   text.
//! - `random c=1` and `random c=16`: random-token prompts, `ignore_eos`, sampled at temperature
//!   1 with a seed per prompt, one at a time and sixteen at a time. Nothing predicts them
//!   (greedy text from a small model falls into loops, which drafting does predict): drafting
//!   must not make them slower.
//!
//! Run it against the same server with speculation on and off (`--speculative off`), side by
//! side, and compare the two reports (`braid bench compare`); the decode rate of a group is
//! 1000 / `tpot_ms`, its output rate with the prompt's time included `throughput_tok_s`.

use super::scaling::closed_loop;
use super::Ctx;
use crate::args::SpeculativeArgs;
use crate::edit_texts::EDIT_TEXTS;
use crate::record::RequestRecord;
use crate::report::Report;
use std::sync::Arc;

pub const EDIT: &str = "edit";
pub const EDIT_PREDICTED: &str = "edit+prediction";

pub async fn run(args: &SpeculativeArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        args.random_concurrency > 0 && args.max_tokens > 0 && args.random_max_tokens > 0,
        "--random-concurrency, --max-tokens and --random-max-tokens must be > 0"
    );
    let random_c = 2 * args.random_concurrency;
    let planned = 2 * args.edits + args.random_requests + random_c;
    let mut ctx = Ctx::setup(&args.common, "speculative", planned).await?;
    let mut records: Vec<RequestRecord> = vec![];
    for group in [EDIT, EDIT_PREDICTED] {
        for k in 0..args.edits {
            if ctx.expired() {
                break;
            }
            let edit = &EDIT_TEXTS[k % EDIT_TEXTS.len()];
            let prediction = (group == EDIT_PREDICTED).then_some(edit.text);
            let trace = ctx
                .client
                .chat(
                    &ctx.model,
                    &edit.messages(),
                    prediction,
                    args.max_tokens,
                    ctx.deadline,
                )
                .await;
            ctx.progress.inc(1);
            let prompt_tokens = trace.usage_prompt_tokens.unwrap_or(0) as usize;
            let id = records.len();
            records.push(trace.into_record(id, group, prompt_tokens, args.max_tokens, ctx.t0));
        }
    }
    ctx.client = ctx.client.clone().sampled(1.0);
    let ctx = Arc::new(ctx);
    let random = [
        ("random c=1".to_string(), 1, args.random_requests),
        (
            format!("random c={}", args.random_concurrency),
            args.random_concurrency,
            random_c,
        ),
    ];
    for (name, c, n) in &random {
        if ctx.expired() || *n == 0 {
            continue;
        }
        let first = records.len();
        let level = closed_loop(
            &ctx,
            *c,
            *n,
            first,
            name,
            args.random_prompt_tokens,
            args.random_max_tokens,
        )
        .await?;
        records.extend(level);
    }
    let names = [EDIT.to_string(), EDIT_PREDICTED.to_string()]
        .into_iter()
        .chain(random.iter().map(|r| r.0.clone()));
    let groups = names
        .filter_map(|name| {
            let of: Vec<_> = records.iter().filter(|r| r.group == name).collect();
            (!of.is_empty()).then(|| ctx.group(&args.common, name, &of))
        })
        .collect();
    let params = serde_json::to_value(args)?;
    Ok(ctx.finish(&args.common, "speculative", params, records, groups, None))
}
