//! Hand-made reports for tests of the parts that only read reports (charts, compare).

use crate::record::{Outcome, RequestRecord};
use crate::report::{Group, Report};
use crate::stats::{aggregate, span_s, Slo};

pub fn record(
    id: usize,
    group: &str,
    sent_s: f64,
    times: &[f64],
    outcome: Outcome,
) -> RequestRecord {
    RequestRecord {
        id,
        group: group.into(),
        prompt_tokens: 16,
        max_tokens: times.len(),
        sent_s,
        token_times_s: times.to_vec(),
        end_s: times.last().copied().unwrap_or(0.05),
        usage_completion_tokens: None,
        usage_prompt_tokens: None,
        status: Some(if outcome == Outcome::HttpError {
            429
        } else {
            200
        }),
        outcome,
        error: None,
    }
}

/// Evenly spaced token times: first at `ttft`, then every `gap`, `n` in all.
pub fn times(ttft: f64, gap: f64, n: usize) -> Vec<f64> {
    (0..n).map(|i| ttft + gap * i as f64).collect()
}

/// A report whose groups are the records' groups in order of first appearance.
pub fn report(scenario: &str, label: &str, requests: Vec<RequestRecord>) -> Report {
    let slo = Slo {
        ttft_ms: Some(500.0),
        itl_p99_ms: Some(100.0),
    };
    let mut names: Vec<String> = vec![];
    for r in &requests {
        if !names.contains(&r.group) {
            names.push(r.group.clone());
        }
    }
    let groups = names
        .into_iter()
        .map(|name| {
            let of: Vec<_> = requests.iter().filter(|r| r.group == name).collect();
            Group {
                concurrency: name.strip_prefix("c=").and_then(|c| c.parse().ok()),
                prompt_tokens: None,
                aggregate: aggregate(of.iter().copied(), span_s(of.iter().copied()), 0.25, &slo),
                name,
            }
        })
        .collect();
    let wall = span_s(&requests);
    Report {
        schema_version: 1,
        tool: "braid-bench test".into(),
        scenario: scenario.into(),
        label: Some(label.into()),
        url: "http://127.0.0.1:1".into(),
        model: "m".into(),
        started_at: "2025-01-01T00:00:00Z".into(),
        started_at_unix_s: 1.7e9,
        params: serde_json::json!({"common": {"seed": 0, "url": "x"}}),
        stall_ms: 250.0,
        slo,
        wall_time_s: wall,
        overall: aggregate(&requests, wall, 0.25, &slo),
        groups,
        interference: None,
        prefix_cache: None,
        planned_requests: requests.len(),
        deadline_reached: false,
        requests,
    }
}
