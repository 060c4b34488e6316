//! Long prompts arriving while streams decode: the failure braid exists to avoid.
//!
//! A server that reads a whole long prompt in one step makes every running stream wait
//! for it; the symptom is one gap, at the same moment, in every decoder's token stream.
//! So the decoders and the long prompts are reported apart, and each long prompt is
//! paired with the worst decoder gap that overlapped its prefill (arrival to first
//! token): that pairing is the cause-and-effect the chart shows.

use super::Ctx;
use crate::args::InterferenceArgs;
use crate::record::RequestRecord;
use crate::report::{InterferenceDetail, LongPromptImpact, Report, DECODER, LONG};
use crate::step_feed::StepFeed;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::sleep_until;

pub async fn run(args: &InterferenceArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.decode_tokens > 0, "--decode-tokens must be > 0");
    anyhow::ensure!(
        args.interval_secs >= 0.0 && args.first_at_secs >= 0.0,
        "--interval-secs and --first-at-secs must be >= 0"
    );
    let planned = args.decoders + args.long_prompts;
    let ctx = Arc::new(Ctx::setup(&args.common, "interference", planned).await?);
    let feed = StepFeed::start(&ctx.client).await;
    let mut tasks = JoinSet::new();
    for id in 0..args.decoders {
        let ctx = ctx.clone();
        let (p, m) = (args.prompt_tokens, args.decode_tokens);
        tasks.spawn(async move { Some(ctx.request(id, DECODER, p, m).await) });
    }
    for k in 0..args.long_prompts {
        let ctx = ctx.clone();
        let at = args.first_at_secs + k as f64 * args.interval_secs;
        let (p, m) = (args.long_prompt_tokens, args.long_max_tokens);
        let id = args.decoders + k;
        tasks.spawn(async move {
            sleep_until((ctx.t0 + Duration::from_secs_f64(at)).min(ctx.deadline)).await;
            if ctx.expired() {
                return None;
            }
            Some(ctx.request(id, LONG, p, m).await)
        });
    }
    let mut records = vec![];
    while let Some(done) = tasks.join_next().await {
        records.extend(done?);
    }
    records.sort_by_key(|r| r.id);
    let of = |g: &str| records.iter().filter(|r| r.group == g).collect::<Vec<_>>();
    let groups = vec![
        ctx.group(&args.common, DECODER.into(), &of(DECODER)),
        ctx.group(&args.common, LONG.into(), &of(LONG)),
    ];
    let detail = InterferenceDetail {
        long_prompts: long_prompt_impacts(&records, args.common.stall_ms / 1e3),
        cost_model: feed.map(StepFeed::finish),
    };
    let params = serde_json::to_value(args)?;
    Ok(ctx.finish(
        &args.common,
        "interference",
        params,
        records,
        groups,
        Some(detail),
    ))
}

/// Pairs each long prompt with the decoder gaps that overlapped its prefill window
/// (arrival to first token, or to its end if no token came). Times in seconds.
pub fn long_prompt_impacts(records: &[RequestRecord], stall_s: f64) -> Vec<LongPromptImpact> {
    // Every decoder gap as an absolute [start, end] interval.
    let gaps: Vec<(f64, f64)> = records
        .iter()
        .filter(|r| r.group == DECODER)
        .flat_map(|r| {
            r.token_times_s
                .windows(2)
                .map(move |w| (r.sent_s + w[0], r.sent_s + w[1]))
        })
        .collect();
    records
        .iter()
        .filter(|r| r.group == LONG)
        .map(|r| {
            let first = r.token_times_s.first().map(|t| r.sent_s + t);
            let (start, end) = (r.sent_s, first.unwrap_or(r.finished_at_s()));
            let overlapping: Vec<f64> = gaps
                .iter()
                .filter(|(a, b)| *a < end && *b > start)
                .map(|(a, b)| b - a)
                .collect();
            LongPromptImpact {
                id: r.id,
                arrival_s: r.sent_s,
                first_token_s: first,
                ttft_ms: r.token_times_s.first().map(|t| t * 1e3),
                decoder_worst_gap_ms: overlapping
                    .iter()
                    .copied()
                    .reduce(f64::max)
                    .map(|g| g * 1e3),
                decoder_stalls: overlapping.iter().filter(|&&g| g > stall_s).count(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Outcome;

    fn rec(id: usize, group: &str, sent: f64, times: &[f64]) -> RequestRecord {
        RequestRecord {
            id,
            group: group.into(),
            prompt_tokens: 1,
            max_tokens: 1,
            sent_s: sent,
            token_times_s: times.to_vec(),
            end_s: times.last().copied().unwrap_or(0.5),
            usage_completion_tokens: None,
            usage_prompt_tokens: None,
            status: Some(200),
            outcome: Outcome::Ok,
            error: None,
        }
    }

    #[test]
    fn long_prompt_is_paired_with_the_decoder_gaps_during_its_prefill() {
        let recs = vec![
            // Decoder: steady 0.1 s gaps, then a 0.6 s gap from 1.1 to 1.7.
            rec(0, DECODER, 0.0, &[0.1, 0.2, 0.3, 1.1, 1.7, 1.8]),
            // Second decoder, sent later, same stall.
            rec(1, DECODER, 0.5, &[0.1, 0.6, 1.2, 1.3]),
            // Long prompt arrives at 1.0, first token at 1.75.
            rec(2, LONG, 1.0, &[0.75, 0.8]),
            // Long prompt that never got a token: window is its whole life.
            rec(3, LONG, 3.0, &[]),
        ];
        let im = long_prompt_impacts(&recs, 0.25);
        assert_eq!(im.len(), 2);
        assert_eq!(im[0].id, 2);
        assert!((im[0].first_token_s.unwrap() - 1.75).abs() < 1e-9);
        assert!((im[0].ttft_ms.unwrap() - 750.0).abs() < 1e-6);
        // Gaps overlapping [1.0, 1.75]: decoder 0's 0.8 (0.3→1.1), 0.6 (1.1→1.7) and
        // 0.1 (1.7→1.8); decoder 1's 0.5 (0.6→1.1), 0.6 (1.1→1.7) and 0.1 (1.7→1.8).
        assert!((im[0].decoder_worst_gap_ms.unwrap() - 800.0).abs() < 1e-6);
        assert_eq!(im[0].decoder_stalls, 4);
        assert_eq!(im[1].first_token_s, None);
        assert_eq!(im[1].decoder_worst_gap_ms, None);
        assert_eq!(im[1].decoder_stalls, 0);
    }
}
