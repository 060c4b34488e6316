//! Open-loop load: requests arrive on their own schedule, as users do.
//!
//! Unlike the closed loop of `scaling`, a slow server does not slow the arrivals down,
//! so queueing shows up in TTFT and in goodput instead of being hidden. The schedule
//! (arrival times and prompt lengths) is drawn in full from the seed before the run, so
//! two servers get the same one.

use super::Ctx;
use crate::args::PoissonArgs;
use crate::prompts::{mix, PromptMix};
use crate::report::Report;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::sleep_until;

/// Default length of a Poisson run when neither duration nor count is given.
const DEFAULT_DURATION_S: f64 = 30.0;
/// No schedule is longer than this, whatever the rate and duration.
const MAX_REQUESTS: usize = 100_000;

/// One planned arrival.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// Seconds since the start of the run.
    pub at_s: f64,
    pub prompt_tokens: usize,
}

/// Arrivals of a Poisson process of `rate` per second (exponential gaps, the first one
/// included), until `duration_s` or `count` arrivals, whichever comes first.
pub fn schedule(
    seed: u64,
    rate: f64,
    duration_s: Option<f64>,
    count: Option<usize>,
    prompt_mix: &PromptMix,
) -> Vec<Arrival> {
    let duration = match (duration_s, count) {
        (None, None) => DEFAULT_DURATION_S,
        (d, _) => d.unwrap_or(f64::INFINITY),
    };
    let count = count.unwrap_or(MAX_REQUESTS).min(MAX_REQUESTS);
    let mut rng = StdRng::seed_from_u64(mix(seed, 0x9015_5011));
    let mut out = vec![];
    let mut t = 0.0;
    while out.len() < count {
        // 1 − U lies in (0, 1], so the logarithm is finite.
        t += -(1.0 - rng.random::<f64>()).ln() / rate;
        if t >= duration {
            break;
        }
        out.push(Arrival {
            at_s: t,
            prompt_tokens: prompt_mix.sample(&mut rng),
        });
    }
    out
}

pub async fn run(args: &PoissonArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        args.rate > 0.0 && args.rate.is_finite(),
        "--rate must be > 0"
    );
    anyhow::ensure!(
        args.duration_secs.is_none_or(|d| d > 0.0),
        "--duration-secs must be > 0"
    );
    anyhow::ensure!(args.max_tokens > 0, "--max-tokens must be > 0");
    let plan = schedule(
        args.common.seed,
        args.rate,
        args.duration_secs,
        args.num_requests,
        &args.prompt_mix,
    );
    let ctx = Arc::new(Ctx::setup(&args.common, "poisson", plan.len()).await?);
    let mut tasks = JoinSet::new();
    for (id, a) in plan.iter().enumerate() {
        sleep_until((ctx.t0 + Duration::from_secs_f64(a.at_s)).min(ctx.deadline)).await;
        if ctx.expired() {
            break;
        }
        let ctx = ctx.clone();
        let (group, p, m) = (
            group_name(a.prompt_tokens),
            a.prompt_tokens,
            args.max_tokens,
        );
        tasks.spawn(async move { ctx.request(id, &group, p, m).await });
    }
    let mut records = vec![];
    while let Some(done) = tasks.join_next().await {
        records.push(done?);
    }
    records.sort_by_key(|r| r.id);
    let mut lengths: Vec<usize> = args.prompt_mix.0.iter().map(|&(l, _)| l).collect();
    lengths.sort_unstable();
    lengths.dedup();
    let groups = lengths
        .into_iter()
        .map(|len| {
            let name = group_name(len);
            let of: Vec<_> = records.iter().filter(|r| r.group == name).collect();
            let mut g = ctx.group(&args.common, name, &of);
            g.prompt_tokens = Some(len);
            g
        })
        .collect();
    let params = serde_json::to_value(args)?;
    Ok(ctx.finish(&args.common, "poisson", params, records, groups, None))
}

fn group_name(prompt_tokens: usize) -> String {
    format!("prompt={prompt_tokens}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> PromptMix {
        "32:0.5,256:0.5".parse().unwrap()
    }

    #[test]
    fn schedule_is_seeded_increasing_and_bounded() {
        let a = schedule(1, 10.0, Some(100.0), None, &m());
        assert_eq!(a, schedule(1, 10.0, Some(100.0), None, &m()));
        assert_ne!(a, schedule(2, 10.0, Some(100.0), None, &m()));
        assert!(a.windows(2).all(|w| w[0].at_s < w[1].at_s));
        assert!(a.iter().all(|x| x.at_s < 100.0));
        // About rate × duration = 1000 arrivals.
        assert!((850..1150).contains(&a.len()), "{}", a.len());
        assert!(a
            .iter()
            .all(|x| x.prompt_tokens == 32 || x.prompt_tokens == 256));
    }

    #[test]
    fn count_and_duration_both_bound_the_schedule() {
        assert_eq!(schedule(1, 10.0, None, Some(7), &m()).len(), 7);
        assert!(schedule(1, 10.0, Some(0.5), Some(1000), &m()).len() < 30);
        let d = schedule(1, 1.0, None, None, &m());
        assert!(d.last().unwrap().at_s < DEFAULT_DURATION_S);
    }
}
