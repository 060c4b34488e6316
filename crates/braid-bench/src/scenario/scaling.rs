//! Concurrency sweep: how throughput and inter-token latency trade off as load grows.
//!
//! Each level is a closed loop of exactly C workers, each sending its next request the
//! moment its previous one ends, so C requests are in flight for the whole level (bar
//! the tail, when fewer than C remain). Levels run one after another and each is
//! aggregated over its own wall time: throughput at C=8 is not diluted by time spent at
//! C=1.

use super::Ctx;
use crate::args::ScalingArgs;
use crate::record::RequestRecord;
use crate::report::Report;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::task::JoinSet;

pub async fn run(args: &ScalingArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        !args.concurrency.is_empty() && args.concurrency.iter().all(|&c| c > 0),
        "--concurrency needs one or more levels, each > 0"
    );
    anyhow::ensure!(args.max_tokens > 0, "--max-tokens must be > 0");
    let planned: usize = args.concurrency.iter().map(|&c| args.requests_at(c)).sum();
    let ctx = Arc::new(Ctx::setup(&args.common, "scaling", planned).await?);
    let mut records = vec![];
    let mut groups = vec![];
    let mut next_id = 0;
    for &c in &args.concurrency {
        if ctx.expired() {
            break;
        }
        let n = args.requests_at(c);
        let name = format!("c={c}");
        let level = closed_loop(
            &ctx,
            c,
            n,
            next_id,
            &name,
            args.prompt_tokens,
            args.max_tokens,
        )
        .await?;
        next_id += n;
        let refs: Vec<&RequestRecord> = level.iter().collect();
        let mut group = ctx.group(&args.common, name, &refs);
        group.concurrency = Some(c);
        groups.push(group);
        records.extend(level);
    }
    let params = serde_json::to_value(args)?;
    Ok(ctx.finish(&args.common, "scaling", params, records, groups, None))
}

/// Sends `n` requests of `prompt_tokens` each, `max_tokens` long, with exactly `c` in flight;
/// ids `first_id..first_id + n`.
pub(super) async fn closed_loop(
    ctx: &Arc<Ctx>,
    c: usize,
    n: usize,
    first_id: usize,
    group: &str,
    prompt_tokens: usize,
    max_tokens: usize,
) -> anyhow::Result<Vec<RequestRecord>> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..c.min(n) {
        let (ctx, next, group) = (ctx.clone(), next.clone(), group.to_string());
        workers.spawn(async move {
            let mut out = vec![];
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || ctx.expired() {
                    return out;
                }
                out.push(
                    ctx.request(first_id + i, &group, prompt_tokens, max_tokens)
                        .await,
                );
            }
        });
    }
    let mut records = vec![];
    while let Some(done) = workers.join_next().await {
        records.extend(done?);
    }
    records.sort_by_key(|r| r.id);
    Ok(records)
}
