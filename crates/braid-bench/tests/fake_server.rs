//! The benchmark against a fake server with scripted delays and failures.
//!
//! Tolerances only go one way where a slow machine could push them: a measured TTFT is
//! at least the scripted delay; the scripted stall is far above the threshold and the
//! scripted normal gaps far below it.

mod common;

use braid_bench::client::Client;
use braid_bench::prompts::Prompt;
use braid_bench::record::Outcome;
use braid_bench::stats::request_metrics;
use braid_bench::{BenchArgs, Report};
use clap::Parser;
use common::{drawn, start, start_caching, Behavior, BLUE, GREEN, ORANGE};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

async fn bench(args: &[&str]) -> anyhow::Result<()> {
    let mut v = vec!["bench"];
    v.extend_from_slice(args);
    braid_bench::run(Cli::try_parse_from(v)?.bench).await
}

/// Each group's name and successful requests, in the report's order.
fn succeeded_by_group(r: &Report) -> Vec<(&str, usize)> {
    r.groups
        .iter()
        .map(|g| (g.name.as_str(), g.aggregate.succeeded))
        .collect()
}

fn read_report(path: &std::path::Path) -> Report {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Runs `bench SCENARIO --url URL --out DIR ARGS...`, which must succeed; returns the
/// report it wrote and DIR, a new temporary folder.
async fn bench_report(scenario: &str, url: &str, args: &[&str]) -> (Report, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap().to_string();
    let mut v = vec![scenario, "--url", url, "--out", &out];
    v.extend_from_slice(args);
    bench(&v).await.unwrap();
    (
        read_report(&dir.path().join(format!("{scenario}.json"))),
        dir,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_measures_scripted_ttft_itl_and_one_stall() {
    let script = vec![Behavior::Stream {
        first_ms: 200,
        gap_ms: 10,
        long_gap: Some((5, 700)),
        done: true,
    }];
    let (url, fake) = start(script).await;
    let client = Client::new(&url, Some("sekrit".into())).unwrap();
    assert_eq!(client.resolve_model(None).await, "fake-model");
    assert_eq!(client.resolve_model(Some("mine")).await, "mine");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let prompt = Prompt::Tokens((1000..1024).collect());
    let t = client.complete("fake-model", &prompt, 10, deadline).await;

    assert_eq!(t.outcome, Outcome::Ok, "{:?}", t.error);
    assert_eq!(t.status, Some(200));
    assert_eq!(t.token_times_s.len(), 10);
    assert_eq!(t.usage_completion_tokens, Some(10));
    assert_eq!(t.usage_prompt_tokens, Some(24));
    let m = request_metrics(&t.token_times_s, t.usage_completion_tokens, 0.250).unwrap();
    assert!(m.ttft >= 0.200, "TTFT {}", m.ttft);
    assert_eq!(m.itls.len(), 9);
    assert_eq!(m.stalls, 1, "ITLs {:?}", m.itls);
    assert!(
        m.itls[4] > 0.250,
        "the stall is the gap before token 5: {:?}",
        m.itls
    );
    assert!(m.e2e >= 0.200 + 0.700);
    assert!(t.end_s >= m.e2e);

    let (body, auth) = fake.received.lock().unwrap()[0].clone();
    assert_eq!(auth.as_deref(), Some("Bearer sekrit"));
    assert_eq!(body["prompt"].as_array().unwrap().len(), 24);
    assert_eq!(
        (body["stream"].clone(), body["ignore_eos"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(body["stream_options"]["include_usage"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_counts_failures_by_status_and_writes_outputs() {
    let script = vec![
        Behavior::quick(),
        Behavior::Status(429),
        Behavior::quick(),
        Behavior::Status(500),
        Behavior::Stream {
            first_ms: 5,
            gap_ms: 5,
            long_gap: None,
            done: false,
        },
        Behavior::quick(),
    ];
    let (url, fake) = start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    bench(&[
        "scaling",
        "--url",
        &url,
        "--concurrency",
        "2",
        "--requests-per-level",
        "6",
        "--prompt-tokens",
        "8",
        "--max-tokens",
        "3",
        "--warmup",
        "0",
        "--out",
        out,
        "--label",
        "fake",
        "--api-key",
        "sekrit",
        "--seed",
        "5",
    ])
    .await
    .unwrap();

    let json = std::fs::read_to_string(dir.path().join("scaling.json")).unwrap();
    assert!(!json.contains("sekrit"), "the API key must not be saved");
    let r: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (r.scenario.as_str(), r.label.as_deref(), r.model.as_str()),
        ("scaling", Some("fake"), "fake-model")
    );
    assert_eq!(r.requests.len(), 6);
    let a = &r.overall;
    assert_eq!(
        (a.requests, a.succeeded, a.failed, a.rate_limited),
        (6, 3, 3, 1)
    );
    assert_eq!(a.failures.get("429"), Some(&1));
    assert_eq!(a.failures.get("500"), Some(&1));
    assert_eq!(a.failures.get("incomplete"), Some(&1));
    // Three complete streams of 3 tokens, plus the 3 of the stream that lost its [DONE].
    assert_eq!(a.output_tokens, 12);
    assert_eq!(r.groups.len(), 1);
    assert_eq!(
        (r.groups[0].name.as_str(), r.groups[0].concurrency),
        ("c=2", Some(2))
    );
    assert!(r
        .requests
        .iter()
        .any(|q| q.status == Some(429) && q.outcome == Outcome::HttpError));
    assert!(r.params["common"]["seed"] == 5 && r.params["concurrency"][0] == 2);

    let bodies = fake.bodies();
    assert_eq!(bodies.len(), 6);
    let mut prompts: Vec<String> = bodies.iter().map(|b| b["prompt"].to_string()).collect();
    assert!(bodies
        .iter()
        .all(|b| b["prompt"].as_array().unwrap().len() == 8));
    prompts.sort();
    prompts.dedup();
    assert_eq!(prompts.len(), 6, "every request gets its own prompt");

    let svg = std::fs::read_to_string(dir.path().join("scaling.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(drawn(&svg, "circle", BLUE), 1, "one throughput point");

    // The same report compared with itself: every ratio is 1 or undefined.
    let j = dir.path().join("scaling.json");
    bench(&[
        "compare",
        j.to_str().unwrap(),
        j.to_str().unwrap(),
        "--json",
    ])
    .await
    .unwrap();
    let c = braid_bench::compare::compare(&r, &r);
    assert!(c
        .rows
        .iter()
        .all(|row| row.ratio.is_none_or(|x| (x - 1.0).abs() < 1e-12)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interference_pairs_long_prompts_with_decoder_gaps() {
    let (url, fake) = start(vec![Behavior::Stream {
        first_ms: 10,
        gap_ms: 20,
        long_gap: None,
        done: true,
    }])
    .await;
    let (r, dir) = bench_report(
        "interference",
        &url,
        &[
            "--decoders",
            "2",
            "--decode-tokens",
            "8",
            "--prompt-tokens",
            "4",
            "--long-prompt-tokens",
            "50",
            "--long-prompts",
            "2",
            "--long-max-tokens",
            "2",
            "--first-at-secs",
            "0.02",
            "--interval-secs",
            "0.05",
            "--warmup",
            "1",
        ],
    )
    .await;
    let dec = r.group("decoder").unwrap().aggregate.clone();
    let long = r.group("long").unwrap().aggregate.clone();
    assert_eq!(
        (dec.requests, dec.succeeded, long.requests, long.succeeded),
        (2, 2, 2, 2)
    );
    assert_eq!(dec.itl_ms.unwrap().n, 2 * 7);
    assert!(long.ttft_ms.unwrap().p50 >= 10.0);
    let detail = r.interference.as_ref().unwrap();
    assert_eq!(detail.long_prompts.len(), 2);
    assert!(detail.long_prompts[1].arrival_s >= 0.07 - 1e-3);
    // The warm-up request plus 4 measured ones; long prompts are 50 tokens.
    let lens: Vec<usize> = fake
        .bodies()
        .iter()
        .map(|b| b["prompt"].as_array().unwrap().len())
        .collect();
    assert_eq!(lens.len(), 5);
    assert_eq!(lens.iter().filter(|&&l| l == 50).count(), 2);
    let svg = std::fs::read_to_string(dir.path().join("interference.svg")).unwrap();
    // Token ticks and first-token dots, each colour once more in the legend.
    assert_eq!(drawn(&svg, "polyline", BLUE), 2 * 8 + 1);
    assert_eq!(drawn(&svg, "polyline", ORANGE), 2 * 2 + 1);
    assert_eq!(drawn(&svg, "circle", GREEN), 2 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisson_sends_the_planned_mix_of_word_prompts() {
    let (url, fake) = start(vec![Behavior::quick()]).await;
    let (r, dir) = bench_report(
        "poisson",
        &url,
        &[
            "--rate",
            "40",
            "--num-requests",
            "6",
            "--prompt-mix",
            "4:0.5,9:0.5",
            "--max-tokens",
            "3",
            "--prompt-kind",
            "words",
            "--warmup",
            "0",
            "--slo-ttft-ms",
            "60000",
        ],
    )
    .await;
    assert_eq!(
        (r.overall.requests, r.overall.succeeded, r.overall.slo_met),
        (6, 6, 6)
    );
    assert!(r.overall.goodput_req_s > 0.0);
    let names: Vec<&str> = r.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["prompt=4", "prompt=9"]);
    assert_eq!(
        r.groups.iter().map(|g| g.aggregate.requests).sum::<usize>(),
        6
    );
    for b in fake.bodies() {
        let words = b["prompt"]
            .as_str()
            .expect("word prompts are strings")
            .split(' ')
            .count();
        assert!(words == 4 || words == 9);
    }
    let svg = std::fs::read_to_string(dir.path().join("poisson.svg")).unwrap();
    assert_eq!(drawn(&svg, "polyline", BLUE), 1, "TTFT CDF");
    assert_eq!(drawn(&svg, "polyline", ORANGE), 1, "ITL CDF");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_cache_times_cold_warm_and_shared_prompts_and_reads_the_counters() {
    // 0.5 ms per token the fake's cache does not hold: 100 ms for a cold 200-token prompt.
    let (url, fake) = start_caching(vec![Behavior::Prefill { us_per_token: 500 }]).await;
    let (r, dir) = bench_report(
        "prefix-cache",
        &url,
        &[
            "--prompts",
            "3",
            "--prompt-tokens",
            "200",
            "--shared-prompts",
            "3",
            "--prefix-tokens",
            "160",
            "--suffix-tokens",
            "8",
            "--max-tokens",
            "2",
        ],
    )
    .await;
    assert_eq!(
        succeeded_by_group(&r),
        [("cold", 3), ("warm", 3), ("shared-first", 1), ("shared", 2)]
    );
    let p50 = |g: &str| r.group(g).unwrap().aggregate.ttft_ms.unwrap().p50;
    assert!(p50("cold") >= 100.0 && p50("shared-first") >= 84.0);
    let detail = r.prefix_cache.as_ref().unwrap();
    // Ratios of the groups' p50s (give or take the last bit the JSON round trip loses).
    let near = |x: Option<f64>, y: f64| (x.unwrap() - y).abs() < 1e-9 * y;
    assert!(near(detail.warm_speedup, p50("cold") / p50("warm")));
    assert!(near(
        detail.shared_prefix_speedup,
        p50("cold") / p50("shared")
    ));
    assert!(detail.warm_speedup.unwrap() > 1.0);
    // The fake reuses whole 16-token blocks and never a prompt's last token: 192 of each
    // repeated 200, and the 160 of the prefix. The warm-up came before the first reading.
    let counts: Vec<(&str, u64, u64)> = detail
        .counters
        .iter()
        .map(|c| (c.group.as_str(), c.hits, c.queries))
        .collect();
    assert_eq!(
        counts,
        [
            ("cold", 0, 600),
            ("warm", 576, 600),
            ("shared-first", 0, 168),
            ("shared", 320, 336)
        ]
    );
    // After the warm-up: the cold prompts, the same again, then one prefix, own suffixes.
    let bodies: Vec<Vec<serde_json::Value>> = fake.bodies()[1..]
        .iter()
        .map(|b| b["prompt"].as_array().unwrap().clone())
        .collect();
    assert_eq!(bodies.len(), 9);
    assert_eq!(bodies[0..3], bodies[3..6]);
    assert_ne!(bodies[0], bodies[1]);
    assert!(bodies[6..]
        .iter()
        .all(|p| p.len() == 168 && p[..160] == bodies[6][..160]));
    assert!(bodies[7][160..] != bodies[8][160..]);
    assert!(dir.path().join("prefix-cache.svg").exists());
    let table = braid_bench::report::summary_table(&r);
    assert!(
        table.contains("cold p50 ÷ p50") && table.contains("576"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_cache_runs_on_a_server_without_metrics() {
    let (url, fake) = start(vec![Behavior::quick()]).await;
    let (r, _dir) = bench_report(
        "prefix-cache",
        &url,
        &[
            "--prompts",
            "2",
            "--prompt-tokens",
            "30",
            "--shared-prompts",
            "0",
            "--prompt-kind",
            "words",
            "--warmup",
            "0",
        ],
    )
    .await;
    let names: Vec<&str> = r.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["cold", "warm"]);
    assert_eq!((r.overall.succeeded, r.planned_requests), (4, 4));
    let detail = r.prefix_cache.as_ref().unwrap();
    assert!(detail.counters.is_empty() && detail.warm_speedup.is_some());
    assert_eq!(detail.shared_prefix_speedup, None);
    let bodies = fake.bodies();
    assert_eq!(bodies[0]["prompt"], bodies[2]["prompt"]);
    assert!(braid_bench::report::summary_table(&r).contains("no braid_prefix_cache_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_duration_bounds_a_hung_server() {
    let (url, _fake) = start(vec![Behavior::Stream {
        first_ms: 30_000,
        gap_ms: 10,
        long_gap: None,
        done: true,
    }])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let res = bench(&[
        "scaling",
        "--url",
        &url,
        "--concurrency",
        "2",
        "--requests-per-level",
        "4",
        "--warmup",
        "0",
        "--max-duration-secs",
        "0.5",
        "--out",
        dir.path().to_str().unwrap(),
    ])
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    let err = res.expect_err("no request can succeed");
    assert!(err.to_string().contains("no request succeeded"), "{err}");
    let r = read_report(&dir.path().join("scaling.json"));
    assert!(r.deadline_reached);
    assert_eq!(r.overall.failures.get("deadline"), Some(&2));
    assert_eq!(r.planned_requests, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_is_a_transport_failure() {
    // Bind and drop a listener to get a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Client::new(&format!("http://127.0.0.1:{port}"), None).unwrap();
    assert_eq!(client.resolve_model(None).await, "default");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let t = client
        .complete("m", &Prompt::Text("hi".into()), 2, deadline)
        .await;
    assert_eq!(t.outcome, Outcome::Transport);
    assert!(t.error.is_some() && t.status.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculative_sends_each_request_to_both_servers_side_by_side() {
    let (url, fake) = start(vec![Behavior::quick()]).await;
    let (base_url, base) = start(vec![Behavior::quick()]).await;
    let (r, _dir) = bench_report(
        "speculative",
        &url,
        &[
            "--baseline-url",
            &base_url,
            "--edits",
            "3",
            "--random-requests",
            "2",
            "--random-concurrency",
            "2",
            "--max-tokens",
            "4",
            "--random-max-tokens",
            "3",
        ],
    )
    .await;
    assert_eq!(
        succeeded_by_group(&r),
        [
            ("edit", 3),
            ("edit (baseline)", 3),
            ("edit+prediction", 3),
            ("edit+prediction (baseline)", 3),
            ("random c=1", 2),
            ("random c=1 (baseline)", 2),
            ("random c=2", 4),
            ("random c=2 (baseline)", 4)
        ]
    );
    // The warm-up went to the measured server only; then both got the same requests.
    let (ours, theirs) = (fake.bodies(), base.bodies());
    assert_eq!(ours.len(), 1 + theirs.len());
    let strip = |b: &serde_json::Value| {
        let mut b = b.clone();
        b.as_object_mut().unwrap().remove("model");
        b
    };
    let mut a: Vec<String> = ours[1..].iter().map(|b| strip(b).to_string()).collect();
    let mut b: Vec<String> = theirs.iter().map(|b| strip(b).to_string()).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    // Edits: a conversation whose earlier turn did one such edit; the prediction is the text.
    let edits: Vec<&serde_json::Value> = theirs
        .iter()
        .filter(|b| b.get("messages").is_some())
        .collect();
    assert_eq!(edits.len(), 6);
    assert!(edits
        .iter()
        .all(|b| b["messages"].as_array().unwrap().len() == 3 && b["temperature"] == 0));
    let predicted: Vec<_> = edits
        .iter()
        .filter(|b| b.get("prediction").is_some())
        .collect();
    assert_eq!(predicted.len(), 3);
    let text = predicted[0]["prediction"]["content"].as_str().unwrap();
    assert!(predicted[0]["messages"][2]["content"]
        .as_str()
        .unwrap()
        .ends_with(text));
    // Random text is sampled, each prompt with a seed of its own.
    let random: Vec<_> = theirs
        .iter()
        .filter(|b| b.get("prompt").is_some())
        .collect();
    assert_eq!(random.len(), 6);
    assert!(random
        .iter()
        .all(|b| b["temperature"] == 1.0 && b["seed"].is_u64()));
}
