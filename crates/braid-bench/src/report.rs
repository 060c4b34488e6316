//! The saved result of one run, and its human-readable summary.
//!
//! The JSON is the durable artefact: it holds the parameters, the label of the system
//! under test and every raw request record, so that `compare` (and anyone with a script)
//! can put two systems side by side later. The table printed to stdout is derived from
//! it and carries no information the JSON lacks.

use crate::record::RequestRecord;
use crate::stats::{Aggregate, Slo, Summary};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// Bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// The groups of the interference scenario: here, so that the scenario that fills them
/// and the chart that draws them both depend on the report and not on each other.
pub const DECODER: &str = "decoder";
pub const LONG: &str = "long";
/// The groups of the prefix-cache scenario, in the order it sends them.
pub const COLD: &str = "cold";
pub const WARM: &str = "warm";
pub const SHARED_FIRST: &str = "shared-first";
pub const SHARED: &str = "shared";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    /// `braid-bench <version>`.
    pub tool: String,
    pub scenario: String,
    pub label: Option<String>,
    pub url: String,
    pub model: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub started_at_unix_s: f64,
    /// Every option of the run, as parsed (the API key excluded).
    pub params: serde_json::Value,
    pub stall_ms: f64,
    pub slo: Slo,
    /// From the first request of the run to the end of the last.
    pub wall_time_s: f64,
    pub overall: Aggregate,
    /// Parts of the run reported on their own: one per concurrency level (scaling),
    /// decoders and long prompts (interference), one per prompt length (poisson).
    pub groups: Vec<Group>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<InterferenceDetail>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache: Option<PrefixCacheDetail>,
    /// Requests the scenario meant to send.
    pub planned_requests: usize,
    /// `--max-duration-secs` cut the run short: fewer requests were sent than planned,
    /// or some were still open at the deadline.
    pub deadline_reached: bool,
    /// Raw records, ordered by id.
    #[serde(default)]
    pub requests: Vec<RequestRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<usize>,
    pub aggregate: Aggregate,
}

impl Report {
    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// TTFT p50 of group `num` ÷ that of group `den`: how many times sooner `den`'s
    /// first tokens came. `None` when either has no TTFT or `den`'s is 0.
    pub fn ttft_p50_ratio(&self, num: &str, den: &str) -> Option<f64> {
        let p50 = |name| Some(self.group(name)?.aggregate.ttft_ms?.p50);
        let (a, b) = (p50(num)?, p50(den)?);
        (b > 0.0).then(|| a / b)
    }
}

/// What the prefix-cache scenario found beyond its groups' own figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefixCacheDetail {
    /// Cold TTFT p50 ÷ warm TTFT p50: how many times sooner a repeated prompt's first
    /// token came.
    pub warm_speedup: Option<f64>,
    /// Cold TTFT p50 ÷ TTFT p50 of prompts whose long prefix an earlier one had.
    pub shared_prefix_speedup: Option<f64>,
    /// How much the server's `braid_prefix_cache_hits_total` and
    /// `braid_prefix_cache_queries_total` rose during each group (tokens, for braid);
    /// empty when its `/metrics` has neither.
    #[serde(default)]
    pub counters: Vec<CacheCounters>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheCounters {
    pub group: String,
    pub hits: u64,
    pub queries: u64,
}

/// What each long prompt of the interference scenario did to the decoders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterferenceDetail {
    pub long_prompts: Vec<LongPromptImpact>,
    /// The server's step cost model against its steps' actual times (braid's step feed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_model: Option<crate::step_feed::PredictionAccuracy>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LongPromptImpact {
    pub id: usize,
    /// Seconds since the start of the run.
    pub arrival_s: f64,
    pub first_token_s: Option<f64>,
    pub ttft_ms: Option<f64>,
    /// Longest decoder ITL overlapping the window from arrival to first token (or end).
    pub decoder_worst_gap_ms: Option<f64>,
    /// Decoder stalls overlapping that window.
    pub decoder_stalls: usize,
}

/// Time since the Unix epoch, and the same instant as RFC 3339 UTC to the second.
pub fn now_utc() -> (f64, String) {
    let now = jiff::Timestamp::now();
    (now.as_duration().as_secs_f64(), format!("{now:.0}"))
}

pub fn read(path: &Path) -> anyhow::Result<Report> {
    let bytes =
        std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| anyhow::anyhow!("{} is not a braid-bench report: {e}", path.display()))
}

fn ms(s: Option<Summary>, f: fn(&Summary) -> f64) -> String {
    s.map(|s| format!("{:.1}", f(&s)))
        .unwrap_or_else(|| "-".into())
}

/// The table printed after a run: one row per group, then the whole run.
pub fn summary_table(r: &Report) -> String {
    let mut out = String::new();
    let label = r.label.as_deref().unwrap_or("(no label)");
    let _ = writeln!(
        out,
        "braid-bench {} — {label} — {} model {} — started {} — {:.1} s",
        r.scenario, r.url, r.model, r.started_at, r.wall_time_s
    );
    let slo = match (r.slo.ttft_ms, r.slo.itl_p99_ms) {
        (None, None) => "none (goodput = successful requests/s)".to_string(),
        (t, i) => format!(
            "TTFT ≤ {} ms, ITL p99 ≤ {} ms",
            t.map_or("-".into(), |v| v.to_string()),
            i.map_or("-".into(), |v| v.to_string())
        ),
    };
    let _ = writeln!(
        out,
        "stall = ITL > {} ms; SLO: {slo}; times in ms",
        r.stall_ms
    );
    let head = [
        "group",
        "ok/sent",
        "failed",
        "tok/s",
        "goodput/s",
        "TTFT p50",
        "TTFT p90",
        "TTFT p99",
        "TTFT max",
        "ITL p50",
        "ITL p90",
        "ITL p99",
        "ITL max",
        "TPOT p50",
        "TPOT p99",
        "e2e p50",
        "e2e p99",
        "stalls",
    ];
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    let groups = r.groups.iter().map(|g| (g.name.as_str(), &g.aggregate));
    for (name, a) in groups.chain(std::iter::once(("all", &r.overall))) {
        let failed = if a.failed == 0 {
            "0".to_string()
        } else {
            let parts: Vec<String> = a.failures.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            parts.join(" ")
        };
        rows.push(vec![
            name.to_string(),
            format!("{}/{}", a.succeeded, a.requests),
            failed,
            format!("{:.1}", a.throughput_tok_s),
            format!("{:.2}", a.goodput_req_s),
            ms(a.ttft_ms, |s| s.p50),
            ms(a.ttft_ms, |s| s.p90),
            ms(a.ttft_ms, |s| s.p99),
            ms(a.ttft_ms, |s| s.max),
            ms(a.itl_ms, |s| s.p50),
            ms(a.itl_ms, |s| s.p90),
            ms(a.itl_ms, |s| s.p99),
            ms(a.itl_ms, |s| s.max),
            ms(a.tpot_ms, |s| s.p50),
            ms(a.tpot_ms, |s| s.p99),
            ms(a.e2e_ms, |s| s.p50),
            ms(a.e2e_ms, |s| s.p99),
            a.stalls.to_string(),
        ]);
    }
    out.push_str(&align(&rows));
    if let Some(detail) = &r.interference {
        let _ = writeln!(out, "\nlong prompts (times since start, s; gaps in ms):");
        let mut rows = vec![vec![
            "id".to_string(),
            "arrived".into(),
            "first token".into(),
            "TTFT".into(),
            "worst decoder gap meanwhile".into(),
            "decoder stalls meanwhile".into(),
        ]];
        let opt = |v: Option<f64>, p: usize| v.map_or("-".into(), |v| format!("{v:.p$}"));
        for l in &detail.long_prompts {
            rows.push(vec![
                l.id.to_string(),
                format!("{:.2}", l.arrival_s),
                opt(l.first_token_s, 2),
                opt(l.ttft_ms, 1),
                opt(l.decoder_worst_gap_ms, 1),
                l.decoder_stalls.to_string(),
            ]);
        }
        out.push_str(&align(&rows));
        if let Some(cm) = &detail.cost_model {
            cost_model_table(&mut out, cm);
        }
    }
    if let Some(detail) = &r.prefix_cache {
        prefix_cache_table(&mut out, r, detail);
    }
    out
}

fn cost_model_table(out: &mut String, cm: &crate::step_feed::PredictionAccuracy) {
    let target = cm.target_ms.map_or("no latency target".to_string(), |t| {
        format!("target {t:.0} ms")
    });
    let _ = writeln!(
        out,
        "\nstep cost model, (actual - predicted) / predicted over {} steps ({target}; {} steps over it, longest {}):",
        cm.steps,
        cm.steps_over_target,
        cm.longest_step_ms.map_or("-".into(), |m| format!("{m:.1} ms")),
    );
    let mut rows = vec![["steps", "n", "min", "p50", "p90", "p99", "max"]
        .map(String::from)
        .to_vec()];
    for (name, s) in [
        ("all", &cm.all),
        ("with a prompt slice", &cm.with_prefill),
        ("decode only", &cm.decode_only),
    ] {
        let pct = |v: f64| format!("{:+.1}%", 100.0 * v);
        rows.push(match s {
            Some(s) => vec![
                name.to_string(),
                s.n.to_string(),
                pct(s.min),
                pct(s.p50),
                pct(s.p90),
                pct(s.p99),
                pct(s.max),
            ],
            None => vec![name.to_string(), "0".into()],
        });
    }
    out.push_str(&align(&rows));
}

fn prefix_cache_table(out: &mut String, r: &Report, detail: &PrefixCacheDetail) {
    let _ = writeln!(
        out,
        "\nprefix cache (TTFT in ms; hits and queries: the server's counters' rise):"
    );
    let mut rows = vec![vec![
        "group".to_string(),
        "ok/sent".into(),
        "TTFT p50".into(),
        "TTFT p90".into(),
        "TTFT max".into(),
        "cold p50 ÷ p50".into(),
        "cache hits".into(),
        "queries".into(),
    ]];
    for g in &r.groups {
        let a = &g.aggregate;
        let c = detail.counters.iter().find(|c| c.group == g.name);
        let count = |f: fn(&CacheCounters) -> u64| c.map_or("-".into(), |c| f(c).to_string());
        rows.push(vec![
            g.name.clone(),
            format!("{}/{}", a.succeeded, a.requests),
            ms(a.ttft_ms, |s| s.p50),
            ms(a.ttft_ms, |s| s.p90),
            ms(a.ttft_ms, |s| s.max),
            r.ttft_p50_ratio(COLD, &g.name)
                .map_or("-".into(), |x| format!("{x:.2}×")),
            count(|c| c.hits),
            count(|c| c.queries),
        ]);
    }
    out.push_str(&align(&rows));
    let x = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}×"));
    let _ = writeln!(
        out,
        "speed-up of TTFT p50 over cold: warm {}, shared prefix {}",
        x(detail.warm_speedup),
        x(detail.shared_prefix_speedup)
    );
    if detail.counters.is_empty() {
        let _ = writeln!(
            out,
            "(no braid_prefix_cache_* counters at the server's /metrics)"
        );
    }
}

/// Right-aligns columns (first column left-aligned).
pub fn align(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i == 0 {
                    format!("{s:<w$}", w = width[i])
                } else {
                    format!("{s:>w$}", w = width[i])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_rfc3339_utc_to_the_second() {
        let (unix_s, text) = now_utc();
        let parsed: jiff::Timestamp = text.parse().unwrap();
        assert!(text.ends_with('Z') && !text.contains('.'), "{text}");
        assert!((parsed.as_second() as f64 - unix_s).abs() < 1.0);
    }

    #[test]
    fn align_pads_columns() {
        let rows = vec![
            vec!["a".to_string(), "1".into()],
            vec!["long".to_string(), "100".into()],
        ];
        assert_eq!(align(&rows), "a       1\nlong  100\n");
    }
}
