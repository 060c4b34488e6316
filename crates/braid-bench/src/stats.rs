//! The measures of DESIGN.md ("Measures"), as pure functions over timestamps.
//!
//! Nothing here reads a clock or talks to a server, so every definition — what a TTFT,
//! an ITL, a TPOT, a stall and goodput are, and which percentile method is used — is
//! pinned down by unit tests on hand-made timestamp lists, and can be re-applied to a
//! saved report.
//!
//! Percentiles use the **nearest-rank** method: p(q) of n sorted values is the value at
//! rank ⌈q/100 · n⌉ (1-based). Every reported percentile is therefore a latency that was
//! actually observed, never an interpolation between two.
//!
//! A token is a stream chunk that carried one (see `client`); when a server packs
//! several tokens into one chunk, ITLs are gaps between chunks (what a reader sees) while
//! TPOT divides by the server's own token count from the usage chunk.

use crate::record::RequestRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Nearest-rank percentile of an ascending slice; `None` when empty.
/// `q` is in percent (0..=100); q = 0 gives the minimum.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // Subtract a hair so that an exact product (e.g. 99 * 100 / 100) is not pushed up a
    // rank by floating-point noise.
    let rank = ((q * n as f64 / 100.0) - 1e-9).ceil().max(1.0) as usize;
    Some(sorted[rank.min(n) - 1])
}

/// Distribution of one measure. Never a mean alone: the mean rides along with the
/// percentiles only for comparison with tools that print it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Looks a field up by name (`p50`, `p99`, `max`, ...), for tables and comparisons.
    pub fn get(&self, stat: &str) -> Option<f64> {
        match stat {
            "mean" => Some(self.mean),
            "min" => Some(self.min),
            "p50" => Some(self.p50),
            "p90" => Some(self.p90),
            "p99" => Some(self.p99),
            "max" => Some(self.max),
            _ => None,
        }
    }
}

/// Summary of unsorted values; `None` when there are none.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let p = |q| percentile(&v, q).expect("non-empty");
    Some(Summary {
        n: v.len(),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        min: v[0],
        p50: p(50.0),
        p90: p(90.0),
        p99: p(99.0),
        max: v[v.len() - 1],
    })
}

/// Every gap between consecutive token arrivals of one stream.
pub fn itls(token_times: &[f64]) -> Vec<f64> {
    token_times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// TPOT = (e2e − TTFT) / (tokens − 1); undefined for fewer than two tokens.
pub fn tpot(e2e: f64, ttft: f64, tokens: u64) -> Option<f64> {
    (tokens >= 2).then(|| (e2e - ttft) / (tokens - 1) as f64)
}

/// Number of ITLs strictly above the stall threshold.
pub fn count_stalls(itls: &[f64], threshold: f64) -> usize {
    itls.iter().filter(|&&g| g > threshold).count()
}

/// The measures of one request that produced at least one token. Times in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMetrics {
    /// Send → first token chunk.
    pub ttft: f64,
    /// Send → last token chunk.
    pub e2e: f64,
    pub itls: Vec<f64>,
    pub tpot: Option<f64>,
    pub tokens: u64,
    pub stalls: usize,
    /// This request's own ITL p99 (what `--slo-itl-p99-ms` is checked against).
    pub itl_p99: Option<f64>,
}

/// Measures of one stream from its token arrival times (seconds since send). `tokens`
/// is the server's count when known, else the number of arrivals. `None` if no token
/// arrived.
pub fn request_metrics(
    token_times: &[f64],
    tokens: Option<u64>,
    stall_threshold: f64,
) -> Option<RequestMetrics> {
    let (&ttft, &e2e) = (token_times.first()?, token_times.last()?);
    let gaps = itls(token_times);
    let tokens = tokens.unwrap_or(token_times.len() as u64);
    let mut sorted = gaps.clone();
    sorted.sort_by(f64::total_cmp);
    Some(RequestMetrics {
        ttft,
        e2e,
        tpot: tpot(e2e, ttft, tokens),
        tokens,
        stalls: count_stalls(&gaps, stall_threshold),
        itl_p99: percentile(&sorted, 99.0),
        itls: gaps,
    })
}

/// Service-level objectives a request must meet to count towards goodput. An SLO that
/// is not given is not checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
}

/// Whether one successful request met every given SLO. A stream with a single token has
/// no ITL and so cannot miss the ITL objective.
pub fn meets_slo(m: &RequestMetrics, slo: &Slo) -> bool {
    let ttft_ok = slo.ttft_ms.is_none_or(|lim| m.ttft * 1e3 <= lim);
    let itl_ok = match (slo.itl_p99_ms, m.itl_p99) {
        (Some(lim), Some(p99)) => p99 * 1e3 <= lim,
        _ => true,
    };
    ttft_ok && itl_ok
}

/// Requests per second that met every SLO.
pub fn goodput(good_requests: usize, wall_s: f64) -> f64 {
    rate(good_requests as f64, wall_s)
}

fn rate(count: f64, wall_s: f64) -> f64 {
    if wall_s > 0.0 {
        count / wall_s
    } else {
        0.0
    }
}

/// Everything reported for a set of requests. Latencies in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub requests: usize,
    pub succeeded: usize,
    pub failed: usize,
    /// Failures by HTTP status (`"429"`, `"500"`) or kind (`incomplete`, `transport`, `deadline`).
    pub failures: BTreeMap<String, usize>,
    /// 429 answers, counted apart from other failures: the server said "overloaded".
    pub rate_limited: usize,
    /// Tokens received from all streams, failed ones included.
    pub output_tokens: u64,
    pub wall_time_s: f64,
    /// Output tokens per second of wall time, all streams together.
    pub throughput_tok_s: f64,
    /// Successful requests per second.
    pub request_rate_req_s: f64,
    /// Successful requests meeting every SLO.
    pub slo_met: usize,
    /// Requests per second meeting every SLO.
    pub goodput_req_s: f64,
    pub ttft_ms: Option<Summary>,
    /// All ITLs of all successful streams pooled.
    pub itl_ms: Option<Summary>,
    pub tpot_ms: Option<Summary>,
    pub e2e_ms: Option<Summary>,
    /// ITLs above the stall threshold, summed over successful streams.
    pub stalls: usize,
    /// The longest ITL of any successful stream.
    pub worst_gap_ms: Option<f64>,
}

impl Aggregate {
    /// Looks up `<measure>.<stat>` (e.g. `itl_ms.p99`) or a scalar (`throughput_tok_s`).
    pub fn metric(&self, name: &str) -> Option<f64> {
        if let Some((measure, stat)) = name.split_once('.') {
            let s = match measure {
                "ttft_ms" => self.ttft_ms,
                "itl_ms" => self.itl_ms,
                "tpot_ms" => self.tpot_ms,
                "e2e_ms" => self.e2e_ms,
                _ => None,
            }?;
            return s.get(stat);
        }
        match name {
            "throughput_tok_s" => Some(self.throughput_tok_s),
            "request_rate_req_s" => Some(self.request_rate_req_s),
            "goodput_req_s" => Some(self.goodput_req_s),
            "stalls" => Some(self.stalls as f64),
            "worst_gap_ms" => self.worst_gap_ms,
            "failed" => Some(self.failed as f64),
            "rate_limited" => Some(self.rate_limited as f64),
            _ => None,
        }
    }
}

/// Wall time spanned by a set of requests: first send to last end.
pub fn span_s<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> f64 {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for r in records {
        lo = lo.min(r.sent_s);
        hi = hi.max(r.finished_at_s());
    }
    if hi > lo {
        hi - lo
    } else {
        0.0
    }
}

/// Aggregates requests over a wall time (normally [`span_s`] of the same records, or the
/// measured duration of the whole run). Latency percentiles cover successful requests.
pub fn aggregate<'a>(
    records: impl IntoIterator<Item = &'a RequestRecord>,
    wall_s: f64,
    stall_threshold_s: f64,
    slo: &Slo,
) -> Aggregate {
    let (mut ttft, mut itl, mut tpot_v, mut e2e) = (vec![], vec![], vec![], vec![]);
    let mut failures = BTreeMap::new();
    let (mut requests, mut succeeded, mut slo_met, mut stalls) = (0, 0, 0, 0);
    let mut output_tokens = 0;
    for r in records {
        requests += 1;
        output_tokens += r.output_tokens();
        if let Some(key) = r.failure_key() {
            *failures.entry(key).or_insert(0) += 1;
            continue;
        }
        succeeded += 1;
        let Some(m) = request_metrics(
            &r.token_times_s,
            r.usage_completion_tokens,
            stall_threshold_s,
        ) else {
            // A successful stream without tokens meets no TTFT objective.
            if slo.ttft_ms.is_none() && slo.itl_p99_ms.is_none() {
                slo_met += 1;
            }
            continue;
        };
        slo_met += usize::from(meets_slo(&m, slo));
        stalls += m.stalls;
        ttft.push(m.ttft * 1e3);
        e2e.push(m.e2e * 1e3);
        tpot_v.extend(m.tpot.map(|t| t * 1e3));
        itl.extend(m.itls.iter().map(|g| g * 1e3));
    }
    let itl_ms = summarize(&itl);
    Aggregate {
        requests,
        succeeded,
        failed: requests - succeeded,
        rate_limited: failures.get("429").copied().unwrap_or(0),
        failures,
        output_tokens,
        wall_time_s: wall_s,
        throughput_tok_s: rate(output_tokens as f64, wall_s),
        request_rate_req_s: rate(succeeded as f64, wall_s),
        slo_met,
        goodput_req_s: goodput(slo_met, wall_s),
        ttft_ms: summarize(&ttft),
        worst_gap_ms: itl_ms.map(|s| s.max),
        itl_ms,
        tpot_ms: summarize(&tpot_v),
        e2e_ms: summarize(&e2e),
        stalls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Outcome;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 90.0), Some(90.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        // Four values: p50 is rank 2 (no interpolation), p99 is rank 4.
        let v = [10.0, 20.0, 30.0, 40.0];
        assert_eq!(percentile(&v, 50.0), Some(20.0));
        assert_eq!(percentile(&v, 51.0), Some(30.0));
        assert_eq!(percentile(&v, 99.0), Some(40.0));
        assert_eq!(percentile(&v, 25.0), Some(10.0));
        // Seven values: p90 → rank ceil(6.3) = 7.
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
        assert_eq!(percentile(&v, 90.0), Some(7.0));
        assert_eq!(percentile(&v, 50.0), Some(4.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
    }

    #[test]
    fn summary_sorts_and_keeps_mean_beside_percentiles() {
        let s = summarize(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (s.n, s.min, s.p50, s.p90, s.p99, s.max),
            (5, 1.0, 3.0, 5.0, 5.0, 5.0)
        );
        assert!(close(s.mean, 3.0));
        assert!(summarize(&[]).is_none());
        assert_eq!(s.get("p90"), Some(5.0));
    }

    #[test]
    fn ttft_itl_tpot_stalls_from_timestamps() {
        // First token at 200 ms, then 20 ms gaps with one 400 ms gap.
        let t = [0.200, 0.220, 0.240, 0.640, 0.660, 0.680];
        let m = request_metrics(&t, None, 0.250).unwrap();
        assert!(close(m.ttft, 0.200));
        assert!(close(m.e2e, 0.680));
        assert_eq!(m.itls.len(), 5);
        assert!(close(m.itls[2], 0.400));
        assert_eq!(m.stalls, 1);
        assert_eq!(m.tokens, 6);
        // (0.680 − 0.200) / 5
        assert!(close(m.tpot.unwrap(), 0.096));
        assert!(close(m.itl_p99.unwrap(), 0.400));
    }

    #[test]
    fn tpot_uses_the_servers_token_count() {
        // Two chunks, but the usage chunk says 5 tokens: TPOT is per token, not per chunk.
        let m = request_metrics(&[0.1, 0.5], Some(5), 0.25).unwrap();
        assert!(close(m.tpot.unwrap(), 0.1));
        assert_eq!(m.itls.len(), 1);
        assert_eq!(m.stalls, 1);
        assert_eq!(tpot(1.0, 0.5, 1), None);
        assert!(request_metrics(&[], Some(3), 0.25).is_none());
    }

    #[test]
    fn stall_is_strictly_above_threshold() {
        assert_eq!(count_stalls(&[0.25, 0.2501, 0.1, 1.0], 0.25), 2);
        assert_eq!(count_stalls(&[], 0.25), 0);
    }

    fn rec(
        id: usize,
        sent: f64,
        times: &[f64],
        outcome: Outcome,
        status: Option<u16>,
    ) -> RequestRecord {
        RequestRecord {
            id,
            group: "g".into(),
            prompt_tokens: 8,
            max_tokens: 4,
            sent_s: sent,
            token_times_s: times.to_vec(),
            end_s: times.last().copied().unwrap_or(0.01),
            usage_completion_tokens: None,
            usage_prompt_tokens: None,
            status,
            outcome,
            error: None,
        }
    }

    #[test]
    fn slo_checks_ttft_and_per_request_itl_p99() {
        // Binary-exact times: TTFT 125 ms, both ITLs 62.5 ms.
        let m = request_metrics(&[0.125, 0.1875, 0.25], None, 0.25).unwrap();
        let slo = |t, i| Slo {
            ttft_ms: t,
            itl_p99_ms: i,
        };
        assert!(meets_slo(&m, &slo(None, None)));
        assert!(meets_slo(&m, &slo(Some(125.0), Some(62.5))));
        assert!(!meets_slo(&m, &slo(Some(124.0), None)));
        assert!(!meets_slo(&m, &slo(None, Some(62.0))));
        let single = request_metrics(&[0.1], None, 0.25).unwrap();
        assert!(meets_slo(&single, &slo(None, Some(1.0))));
    }

    #[test]
    fn aggregate_counts_goodput_failures_and_throughput() {
        let recs = vec![
            // Fast: meets a 300 ms TTFT / 100 ms ITL p99 SLO.
            rec(0, 0.0, &[0.2, 0.25, 0.3, 0.35], Outcome::Ok, Some(200)),
            // Slow first token.
            rec(1, 0.0, &[0.5, 0.55, 0.6, 0.65], Outcome::Ok, Some(200)),
            // Stalled stream.
            rec(2, 1.0, &[0.1, 0.5, 0.55, 0.6], Outcome::Ok, Some(200)),
            rec(3, 1.0, &[], Outcome::HttpError, Some(429)),
            rec(4, 1.5, &[], Outcome::HttpError, Some(500)),
            // Cut short: its two tokens still count towards throughput.
            rec(5, 1.5, &[0.1, 0.2], Outcome::Incomplete, Some(200)),
        ];
        let wall = span_s(&recs);
        // First send at 0.0, last end at 1.5 + 0.2.
        assert!(close(wall, 1.7));
        let slo = Slo {
            ttft_ms: Some(300.0),
            itl_p99_ms: Some(100.0),
        };
        let a = aggregate(&recs, 2.0, 0.25, &slo);
        assert_eq!((a.requests, a.succeeded, a.failed), (6, 3, 3));
        assert_eq!(a.rate_limited, 1);
        assert_eq!(a.failures.get("429"), Some(&1));
        assert_eq!(a.failures.get("500"), Some(&1));
        assert_eq!(a.failures.get("incomplete"), Some(&1));
        assert_eq!(a.output_tokens, 14);
        assert!(close(a.throughput_tok_s, 7.0));
        assert_eq!(a.slo_met, 1);
        assert!(close(a.goodput_req_s, 0.5));
        assert!(close(a.request_rate_req_s, 1.5));
        assert_eq!(a.stalls, 1);
        assert!(close(a.worst_gap_ms.unwrap(), 400.0));
        let ttft = a.ttft_ms.unwrap();
        assert_eq!(ttft.n, 3);
        assert!(close(ttft.p50, 200.0) && close(ttft.max, 500.0));
        assert_eq!(a.itl_ms.unwrap().n, 9);
        assert!(close(a.metric("ttft_ms.max").unwrap(), 500.0));
        assert_eq!(a.metric("stalls"), Some(1.0));
        // Without SLOs every successful request counts.
        let a = aggregate(&recs, 2.0, 0.25, &Slo::default());
        assert_eq!(a.slo_met, 3);
    }
}
