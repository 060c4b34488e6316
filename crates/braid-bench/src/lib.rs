//! braid-bench: a serving benchmark for any OpenAI-compatible `/v1/completions` server.
//!
//! It exists so that braid's claim — long prompts need not stall running streams — is
//! measured the same way on braid and on the servers it is compared with (llama.cpp's
//! llama-server, vLLM). It depends on nothing of braid's but the API's JSON shape, and
//! uses the measures of DESIGN.md ("Measures") by name and definition: TTFT, ITL, TPOT,
//! stall, throughput, goodput.
//!
//! The main binary exposes it as `braid bench <scaling|interference|poisson|prefix-cache|speculative|compare>`:
//! flatten [`BenchArgs`] into a subcommand and call [`run`].
//!
//! ```text
//! braid bench scaling      --url http://127.0.0.1:8080 --label braid --out results/braid
//! braid bench interference --url http://127.0.0.1:8081 --label llama.cpp --out results/llama
//! braid bench poisson      --rate 2 --duration-secs 60 --slo-ttft-ms 1000 --slo-itl-p99-ms 250
//! braid bench prefix-cache --prompts 8 --prompt-tokens 1000 --out results/braid
//! braid bench speculative  --url http://127.0.0.1:8080 --baseline-url http://127.0.0.1:8081
//! braid bench compare results/braid/scaling.json results/llama/scaling.json [--json]
//! ```

pub mod args;
pub mod chart;
pub mod client;
pub mod compare;
pub mod edit_texts;
#[cfg(test)]
mod fixtures;
pub mod progress;
pub mod prompts;
pub mod record;
pub mod report;
pub mod scenario;
pub mod stats;
pub mod step_feed;

pub use args::{BenchArgs, Scenario};
pub use report::Report;

use std::path::{Path, PathBuf};

/// Runs `braid bench ...`: a load scenario (prints the summary table to stdout, writes
/// `<scenario>.json` and `<scenario>.svg` under `--out`), or `compare`.
///
/// Failed requests are results, not errors; the run fails only on bad arguments, an
/// unwritable `--out`, or when not a single request succeeded.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let common = match &args.scenario {
        Scenario::Compare(c) => return compare::run(c),
        Scenario::Scaling(a) => &a.common,
        Scenario::Interference(a) => &a.common,
        Scenario::Poisson(a) => &a.common,
        Scenario::PrefixCache(a) => &a.common,
        Scenario::Speculative(a) => &a.common,
    };
    let report = scenario::execute(&args.scenario).await?;
    println!("{}", report::summary_table(&report));
    match &common.out {
        Some(dir) => {
            let (json, svg) = write_outputs(&report, dir)?;
            eprintln!(
                "braid-bench: wrote {} and {}",
                json.display(),
                svg.display()
            );
        }
        None => eprintln!("braid-bench: pass --out DIR to keep the JSON report and the chart"),
    }
    if report.overall.requests > 0 && report.overall.succeeded == 0 {
        let fails: Vec<String> = report
            .overall
            .failures
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let first = report.requests.iter().find_map(|r| r.error.clone());
        anyhow::bail!(
            "no request succeeded ({}); first error: {}",
            fails.join(", "),
            first.unwrap_or_default()
        );
    }
    Ok(())
}

/// Writes `<scenario>.json` and `<scenario>.svg` into `dir`, creating it.
fn write_outputs(report: &Report, dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join(format!("{}.json", report.scenario));
    let svg = dir.join(format!("{}.svg", report.scenario));
    std::fs::write(&json, serde_json::to_vec_pretty(report)?)?;
    std::fs::write(&svg, chart::render(report)?)?;
    Ok((json, svg))
}

// The main binary spawns the benchmark on its multi-threaded runtime, so `run`'s future
// must be Send; checked when the crate compiles rather than when a test runs.
const _: fn(BenchArgs) = |args| {
    fn assert_send<T: Send>(_: &T) {}
    assert_send(&run(args));
};
