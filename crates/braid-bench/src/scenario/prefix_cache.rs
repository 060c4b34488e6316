//! What a prefix cache saves: the same long prompts read cold, then again, then long
//! prompts that share a prefix and differ only in a short suffix.
//!
//! Requests go one at a time, greedy and a few tokens long, so each TTFT is the time to
//! read that prompt (or the part of it the server could not reuse) with nothing else
//! running. Every cold prompt is sent before any is repeated, so a server that keeps
//! only its last prompt (one slot's worth) shows no gain. The first shared-prefix
//! prompt is the one that brings the prefix to the server: it is reported on its own
//! (`shared-first`), and the speed-up is that of the rest (`shared`).
//!
//! A server that exposes `braid_prefix_cache_hits_total` and
//! `braid_prefix_cache_queries_total` at `/metrics` (braid does) has their rise during
//! each group recorded; any other server is measured all the same.

use super::Ctx;
use crate::args::PrefixCacheArgs;
use crate::record::RequestRecord;
use crate::report::{CacheCounters, PrefixCacheDetail, Report, COLD, SHARED, SHARED_FIRST, WARM};

/// Prompt index of the shared prefix; its prompts' own suffixes follow it. Far from the
/// indices of the cold prompts (0..prompts) and of the warm-up.
const PREFIX_INDEX: u64 = 1 << 40;
const HITS: &str = "braid_prefix_cache_hits_total";
const QUERIES: &str = "braid_prefix_cache_queries_total";

pub async fn run(args: &PrefixCacheArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.prompts > 0, "--prompts must be > 0");
    anyhow::ensure!(
        args.prompt_tokens > 0 && args.max_tokens > 0,
        "--prompt-tokens and --max-tokens must be > 0"
    );
    anyhow::ensure!(
        args.shared_prompts == 0 || (args.prefix_tokens > 0 && args.suffix_tokens > 0),
        "--prefix-tokens and --suffix-tokens must be > 0"
    );
    let planned = 2 * args.prompts + args.shared_prompts;
    let ctx = Ctx::setup(&args.common, "prefix-cache", planned).await?;
    let mut records: Vec<RequestRecord> = vec![];
    let mut counters = vec![];
    let mut before = read_counters(&ctx).await;
    for group in [COLD, WARM, SHARED_FIRST, SHARED] {
        let range = match group {
            COLD | WARM => 0..args.prompts,
            SHARED_FIRST => 0..args.shared_prompts.min(1),
            _ => args.shared_prompts.min(1)..args.shared_prompts,
        };
        if range.is_empty() {
            continue;
        }
        for k in range {
            if ctx.expired() {
                break;
            }
            let (prompt, len) = match group {
                COLD | WARM => (
                    ctx.prompts.prompt(k as u64, args.prompt_tokens),
                    args.prompt_tokens,
                ),
                _ => {
                    let own = PREFIX_INDEX + 1 + k as u64;
                    let p = ctx.prompts.with_prefix(
                        PREFIX_INDEX,
                        args.prefix_tokens,
                        own,
                        args.suffix_tokens,
                    );
                    (p, args.prefix_tokens + args.suffix_tokens)
                }
            };
            let id = records.len();
            records.push(ctx.send(id, group, &prompt, len, args.max_tokens).await);
        }
        let after = read_counters(&ctx).await;
        if let (Some(b), Some(a)) = (before, after) {
            counters.push(CacheCounters {
                group: group.to_string(),
                hits: a.0.saturating_sub(b.0),
                queries: a.1.saturating_sub(b.1),
            });
        }
        before = after;
    }
    let groups = [COLD, WARM, SHARED_FIRST, SHARED]
        .into_iter()
        .filter_map(|name| {
            let of: Vec<_> = records.iter().filter(|r| r.group == name).collect();
            (!of.is_empty()).then(|| ctx.group(&args.common, name.to_string(), &of))
        })
        .collect();
    let params = serde_json::to_value(args)?;
    let mut report = ctx.finish(&args.common, "prefix-cache", params, records, groups, None);
    report.prefix_cache = Some(PrefixCacheDetail {
        warm_speedup: report.ttft_p50_ratio(COLD, WARM),
        shared_prefix_speedup: report.ttft_p50_ratio(COLD, SHARED),
        counters,
    });
    Ok(report)
}

/// The server's (hits, queries) counters, when its `/metrics` has both; never waits
/// past the run's deadline.
async fn read_counters(ctx: &Ctx) -> Option<(u64, u64)> {
    let text = tokio::time::timeout_at(ctx.deadline, ctx.client.metrics())
        .await
        .ok()??;
    Some((counter(&text, HITS)?, counter(&text, QUERIES)?))
}

/// The value of counter `name` in Prometheus text, summed over its label sets; `None`
/// when no sample has that name.
pub fn counter(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `name value`, or `name{labels} value`; not a longer name that starts with it.
        let rest = match rest.strip_prefix('{') {
            Some(labelled) => match labelled.split_once('}') {
                Some((_, after)) => after,
                None => continue,
            },
            None if rest.starts_with([' ', '\t']) => rest,
            None => continue,
        };
        let Some(value) = rest.split_whitespace().next() else {
            continue;
        };
        if let Ok(v) = value.parse::<f64>() {
            if v.is_finite() && v >= 0.0 {
                found = Some(found.unwrap_or(0) + v.round() as u64);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counters_from_prometheus_text() {
        let text = "# HELP braid_prefix_cache_hits_total Tokens reused.\n\
                    # TYPE braid_prefix_cache_hits_total counter\n\
                    braid_prefix_cache_hits_total 48\n\
                    braid_prefix_cache_hits_total_extra 7\n\
                    braid_prefix_cache_queries_total{model=\"a\"} 60\n\
                    braid_prefix_cache_queries_total{model=\"b\"} 4e0\n";
        assert_eq!(counter(text, HITS), Some(48));
        assert_eq!(counter(text, QUERIES), Some(64));
        assert_eq!(counter(text, "braid_requests_total"), None);
        assert_eq!(counter("braid_prefix_cache_hits_total NaN\n", HITS), None);
    }
}
