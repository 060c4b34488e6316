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
//! Compare a server with speculation on against the same build with `--speculative off` side by
//! side, in one run: `--baseline-url` sends each request to both, one after the other
//! (alternating which goes first), so the two see the same moment of a noisy machine, and each
//! record of a group has its twin in the `(baseline)` group, in the same order. The decode rate
//! of a group is 1000 / `tpot_ms`, its output rate with the prompt's time included
//! `throughput_tok_s`. In chat streams the first chunk carries only the role, so TTFT there is
//! the server's answer time, not the first token's.

use super::scaling::closed_loop;
use super::Ctx;
use crate::args::SpeculativeArgs;
use crate::client::Client;
use crate::edit_texts::EDIT_TEXTS;
use crate::record::RequestRecord;
use crate::report::Report;
use std::sync::Arc;

pub const EDIT: &str = "edit";
pub const EDIT_PREDICTED: &str = "edit+prediction";

/// Where request `k` goes, in order, each with whether it is the baseline: the first server
/// alternates from one request to the next.
fn order(k: usize, main: &Client, baseline: Option<&Client>) -> Vec<(Client, bool)> {
    let mut sides = vec![(main.clone(), false)];
    if let Some(b) = baseline {
        sides.push((b.clone(), true));
        if k % 2 == 1 {
            sides.reverse();
        }
    }
    sides
}

/// The name of `group`'s twin on the baseline server.
pub fn baseline(group: &str) -> String {
    format!("{group} (baseline)")
}

pub async fn run(args: &SpeculativeArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        args.random_concurrency > 0 && args.max_tokens > 0 && args.random_max_tokens > 0,
        "--random-concurrency, --max-tokens and --random-max-tokens must be > 0"
    );
    let random_c = 2 * args.random_concurrency;
    let servers = 1 + usize::from(args.baseline_url.is_some());
    let planned = servers * (2 * args.edits + args.random_requests + random_c);
    let mut ctx = Ctx::setup(&args.common, "speculative", planned).await?;
    let other = match &args.baseline_url {
        Some(url) => Some(Client::new(url, args.common.api_key.clone())?),
        None => None,
    };
    let name = |group: &str, base: bool| {
        if base {
            baseline(group)
        } else {
            group.to_string()
        }
    };
    let mut records: Vec<RequestRecord> = vec![];
    for group in [EDIT, EDIT_PREDICTED] {
        for k in 0..args.edits {
            let edit = &EDIT_TEXTS[k % EDIT_TEXTS.len()];
            let prediction = (group == EDIT_PREDICTED).then_some(edit.text);
            for (client, base) in order(k, &ctx.client, other.as_ref()) {
                if ctx.expired() {
                    break;
                }
                let trace = client
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
                let group = name(group, base);
                records.push(trace.into_record(id, &group, prompt_tokens, args.max_tokens, ctx.t0));
            }
        }
    }
    ctx.client = ctx.client.clone().sampled(1.0);
    let other = other.map(|o| o.sampled(1.0));
    let one = "random c=1".to_string();
    let first = records.len();
    for k in 0..args.random_requests {
        let prompt = ctx
            .prompts
            .prompt((first + k) as u64, args.random_prompt_tokens);
        for (client, base) in order(k, &ctx.client, other.as_ref()) {
            if ctx.expired() {
                break;
            }
            let trace = client
                .complete(&ctx.model, &prompt, args.random_max_tokens, ctx.deadline)
                .await;
            ctx.progress.inc(1);
            let id = records.len();
            let group = name(&one, base);
            records.push(trace.into_record(
                id,
                &group,
                args.random_prompt_tokens,
                args.random_max_tokens,
                ctx.t0,
            ));
        }
    }
    let many = format!("random c={}", args.random_concurrency);
    let first = records.len();
    let mut sides = vec![(ctx.client.clone(), false)];
    if let Some(o) = &other {
        sides.push((o.clone(), true));
    }
    for (client, base) in sides {
        if ctx.expired() || random_c == 0 {
            continue;
        }
        let side = Arc::new(Ctx {
            client,
            ..ctx.clone()
        });
        let level = closed_loop(
            &side,
            args.random_concurrency,
            random_c,
            first,
            &name(&many, base),
            args.random_prompt_tokens,
            args.random_max_tokens,
        )
        .await?;
        records.extend(level);
    }
    let mut names = vec![];
    for group in [EDIT, EDIT_PREDICTED, &one, &many] {
        names.push(group.to_string());
        names.push(baseline(group));
    }
    let groups = names
        .into_iter()
        .filter_map(|name| {
            let of: Vec<_> = records.iter().filter(|r| r.group == name).collect();
            (!of.is_empty()).then(|| ctx.group(&args.common, name, &of))
        })
        .collect();
    let params = serde_json::to_value(args)?;
    Ok(ctx.finish(&args.common, "speculative", params, records, groups, None))
}
