//! Two systems side by side: ratios a/b of the same measures, group by group.
//!
//! DESIGN.md asks to compare two systems in one run; scripts run the same scenario
//! against braid and against llama.cpp, then call this. Ratios are a/b, so for
//! throughput and goodput above 1 means a is better, and for latencies and stalls below
//! 1 means a is better; the `better` column says which so no reader has to remember.

use crate::args::CompareArgs;
use crate::report::{align, Report};
use crate::stats::Aggregate;
use serde::Serialize;

/// Measures compared, and whether higher is better.
pub const METRICS: &[(&str, bool)] = &[
    ("throughput_tok_s", true),
    ("goodput_req_s", true),
    ("ttft_ms.p50", false),
    ("ttft_ms.p90", false),
    ("ttft_ms.p99", false),
    ("ttft_ms.max", false),
    ("itl_ms.p50", false),
    ("itl_ms.p90", false),
    ("itl_ms.p99", false),
    ("itl_ms.max", false),
    ("tpot_ms.p50", false),
    ("tpot_ms.p99", false),
    ("e2e_ms.p50", false),
    ("e2e_ms.p99", false),
    ("stalls", false),
    ("failed", false),
];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub group: String,
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// a / b; `None` when either is missing or b is 0.
    pub ratio: Option<f64>,
    /// "a", "b" or "=" (equal, or not comparable).
    pub better: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub a_label: String,
    pub b_label: String,
    pub scenario: String,
    /// Things that make the comparison unfair (different scenario or parameters).
    pub warnings: Vec<String>,
    pub rows: Vec<Row>,
}

fn label(r: &Report, fallback: &str) -> String {
    r.label.clone().unwrap_or_else(|| fallback.to_string())
}

/// Compares every measure of the whole run and of each group present in either report.
pub fn compare(a: &Report, b: &Report) -> Comparison {
    let mut warnings = vec![];
    if a.scenario != b.scenario {
        warnings.push(format!(
            "scenarios differ: {} vs {}",
            a.scenario, b.scenario
        ));
    }
    if strip_run_specific(&a.params) != strip_run_specific(&b.params) {
        warnings.push("parameters differ (see params in each report)".into());
    }
    if a.stall_ms != b.stall_ms || a.slo != b.slo {
        warnings.push("stall threshold or SLOs differ".into());
    }
    let mut names: Vec<&str> = vec!["overall"];
    for g in a.groups.iter().chain(&b.groups) {
        if !names.contains(&g.name.as_str()) {
            names.push(&g.name);
        }
    }
    let find = |r: &'_ Report, name: &str| -> Option<Aggregate> {
        if name == "overall" {
            Some(r.overall.clone())
        } else {
            r.group(name).map(|g| g.aggregate.clone())
        }
    };
    let mut rows = vec![];
    for name in names {
        let (ga, gb) = (find(a, name), find(b, name));
        for &(metric, higher_better) in METRICS {
            let va = ga.as_ref().and_then(|g| g.metric(metric));
            let vb = gb.as_ref().and_then(|g| g.metric(metric));
            let ratio = match (va, vb) {
                (Some(x), Some(y)) if y != 0.0 => Some(x / y),
                _ => None,
            };
            let better = match (va, vb) {
                (Some(x), Some(y)) if x != y => {
                    if (x > y) == higher_better {
                        "a"
                    } else {
                        "b"
                    }
                }
                _ => "=",
            };
            rows.push(Row {
                group: name.to_string(),
                metric: metric.to_string(),
                a: va,
                b: vb,
                ratio,
                better: better.to_string(),
            });
        }
    }
    Comparison {
        a_label: label(a, "a"),
        b_label: label(b, "b"),
        scenario: a.scenario.clone(),
        warnings,
        rows,
    }
}

/// Parameters that legitimately differ between the two runs of a comparison.
fn strip_run_specific(params: &serde_json::Value) -> serde_json::Value {
    let mut p = params.clone();
    if let Some(common) = p.get_mut("common").and_then(|c| c.as_object_mut()) {
        for k in ["url", "model", "label", "out", "api_key", "vocab_size"] {
            common.remove(k);
        }
    }
    p
}

/// The comparison as a table: group, metric, a, b, a/b, better.
pub fn format(c: &Comparison) -> String {
    let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let mut rows = vec![vec![
        "group".to_string(),
        "metric".into(),
        c.a_label.clone(),
        c.b_label.clone(),
        format!("{}/{}", c.a_label, c.b_label),
        "better".into(),
    ]];
    for r in &c.rows {
        rows.push(vec![
            r.group.clone(),
            r.metric.clone(),
            num(r.a),
            num(r.b),
            r.ratio.map_or("-".into(), |v| format!("{v:.3}")),
            match r.better.as_str() {
                "a" => c.a_label.clone(),
                "b" => c.b_label.clone(),
                _ => "=".into(),
            },
        ]);
    }
    let mut out = format!(
        "braid-bench compare ({}): {} (a) vs {} (b)\n",
        c.scenario, c.a_label, c.b_label
    );
    for w in &c.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push_str(&align(&rows));
    out
}

/// `braid bench compare A B [--json]`.
pub fn run(args: &CompareArgs) -> anyhow::Result<()> {
    let a = crate::report::read(&args.a)?;
    let b = crate::report::read(&args.b)?;
    let c = compare(&a, &b);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        print!("{}", format(&c));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{record, report, times};
    use crate::record::Outcome;

    fn run(ttft: f64, gap: f64, label: &str) -> Report {
        let recs = (0..4)
            .map(|i| record(i, "c=2", 0.0, &times(ttft, gap, 11), Outcome::Ok))
            .collect();
        report("scaling", label, recs)
    }

    #[test]
    fn ratios_are_a_over_b_and_say_who_is_better() {
        // a: same TTFT, gaps half as long → twice the throughput-ish, half the ITL.
        let (a, b) = (run(0.1, 0.01, "braid"), run(0.1, 0.02, "llama.cpp"));
        let c = compare(&a, &b);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let row = |g: &str, m: &str| {
            c.rows
                .iter()
                .find(|r| r.group == g && r.metric == m)
                .unwrap()
        };
        let itl = row("overall", "itl_ms.p50");
        assert!((itl.ratio.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(itl.better, "a");
        let ttft = row("c=2", "ttft_ms.p99");
        assert!((ttft.ratio.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(ttft.better, "=");
        let tput = row("c=2", "throughput_tok_s");
        assert!(tput.ratio.unwrap() > 1.0 && tput.better == "a");
        // Zero stalls on both sides: no ratio.
        assert_eq!(row("overall", "stalls").ratio, None);
        let text = format(&c);
        assert!(text.contains("braid/llama.cpp") && text.contains("itl_ms.p99"));
    }

    #[test]
    fn warns_about_unlike_runs_and_keeps_one_sided_groups() {
        let a = run(0.1, 0.01, "a");
        let mut b = report(
            "interference",
            "b",
            vec![record(0, "decoder", 0.0, &times(0.1, 0.01, 3), Outcome::Ok)],
        );
        b.params = serde_json::json!({"common": {"seed": 1}});
        let c = compare(&a, &b);
        assert_eq!(c.warnings.len(), 2);
        let dec = c.rows.iter().find(|r| r.group == "decoder").unwrap();
        assert_eq!((dec.a, dec.ratio), (None, None));
        assert!(c.rows.iter().any(|r| r.group == "c=2" && r.b.is_none()));
    }
}
