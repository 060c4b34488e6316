//! One picture per scenario, made to show its point at a glance.
//!
//! - scaling: throughput and ITL p99 against concurrency, in two panels sharing the x
//!   axis, so the knee where more streams stop paying is visible.
//! - interference: every stream on one timeline, a tick per token. A prefill that blocks
//!   decoding shows as one gap through all decoder rows, shaded red where it is a stall,
//!   lined up under the long prompt's arrival.
//! - poisson: CDFs of TTFT and ITL on log axes, with the SLOs and the stall threshold
//!   drawn in, so the share of requests that miss is read off directly.

use crate::report::Report;
use crate::scenario::interference::{DECODER, LONG};
use crate::stats::itls;
use crate::svg::{fmt_num, nice_max, nice_ticks, Scale, Svg};

const BLUE: &str = "#1f77b4";
const ORANGE: &str = "#ff7f0e";
const GREEN: &str = "#2ca02c";
const RED: &str = "#d62728";
const GREY: &str = "#888888";
const LIGHT: &str = "#e5e5e5";

/// The chart of a report, as a complete SVG document.
pub fn render(r: &Report) -> String {
    match r.scenario.as_str() {
        "scaling" => scaling(r),
        "interference" => interference(r),
        _ => latency_cdfs(r),
    }
}

fn title(svg: &mut Svg, r: &Report, width: f64) {
    let label = r.label.as_deref().unwrap_or("(no label)");
    let t = format!("braid-bench {} — {label}", r.scenario);
    svg.text(width / 2.0, 22.0, &t, 15.0, "middle", "black", 0.0);
    let sub = format!("{} · model {} · {}", r.url, r.model, r.started_at);
    svg.text(width / 2.0, 38.0, &sub, 10.0, "middle", GREY, 0.0);
}

/// Plot area in pixels.
#[derive(Clone, Copy)]
struct Area {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

/// Draws a frame, horizontal grid lines and y tick labels for a linear y axis from 0.
fn y_axis(svg: &mut Svg, a: Area, max: f64, label: &str) -> Scale {
    let ys = Scale {
        d0: 0.0,
        d1: max,
        r0: a.y + a.h,
        r1: a.y,
        log: false,
    };
    for t in nice_ticks(0.0, max, 5) {
        let y = ys.map(t);
        svg.line("grid", (a.x, y), (a.x + a.w, y), LIGHT, 1.0, None);
        svg.text(a.x - 6.0, y + 4.0, &fmt_num(t), 11.0, "end", "black", 0.0);
    }
    svg.line(
        "axis",
        (a.x, a.y + a.h),
        (a.x + a.w, a.y + a.h),
        "black",
        1.0,
        None,
    );
    svg.line("axis", (a.x, a.y), (a.x, a.y + a.h), "black", 1.0, None);
    svg.text(
        a.x - 52.0,
        a.y + a.h / 2.0,
        label,
        12.0,
        "middle",
        "black",
        -90.0,
    );
    ys
}

fn scaling(r: &Report) -> String {
    let (width, height) = (900.0, 660.0);
    let mut svg = Svg::new(width, height);
    title(&mut svg, r, width);
    let levels: Vec<_> = r
        .groups
        .iter()
        .filter(|g| g.concurrency.is_some())
        .collect();
    let n = levels.len().max(1) as f64;
    let top = Area {
        x: 90.0,
        y: 60.0,
        w: 770.0,
        h: 240.0,
    };
    let bottom = Area {
        x: 90.0,
        y: 360.0,
        w: 770.0,
        h: 240.0,
    };
    let x_of = |i: usize| top.x + (i as f64 + 0.5) * top.w / n;

    let tput: Vec<f64> = levels
        .iter()
        .map(|g| g.aggregate.throughput_tok_s)
        .collect();
    let ys = y_axis(
        &mut svg,
        top,
        nice_max(tput.iter().copied().fold(0.0, f64::max)),
        "throughput (tok/s)",
    );
    let pts: Vec<(f64, f64)> = tput
        .iter()
        .enumerate()
        .map(|(i, v)| (x_of(i), ys.map(*v)))
        .collect();
    svg.polyline("series throughput", &pts, BLUE, 2.0, None);
    for (p, v) in pts.iter().zip(&tput) {
        svg.circle("point throughput", p.0, p.1, 4.0, BLUE);
        svg.text(p.0, p.1 - 8.0, &fmt_num(*v), 10.0, "middle", BLUE, 0.0);
    }

    let p99: Vec<Option<f64>> = levels
        .iter()
        .map(|g| g.aggregate.itl_ms.map(|s| s.p99))
        .collect();
    let p50: Vec<Option<f64>> = levels
        .iter()
        .map(|g| g.aggregate.itl_ms.map(|s| s.p50))
        .collect();
    let top_ms = p99.iter().flatten().copied().fold(r.stall_ms, f64::max);
    let ys = y_axis(&mut svg, bottom, nice_max(top_ms), "ITL (ms)");
    let series = |v: &[Option<f64>]| -> Vec<(f64, f64)> {
        v.iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (x_of(i), ys.map(v))))
            .collect()
    };
    let stall_y = ys.map(r.stall_ms);
    svg.line(
        "stall-threshold",
        (bottom.x, stall_y),
        (bottom.x + bottom.w, stall_y),
        RED,
        1.0,
        Some("6 4"),
    );
    svg.text(
        bottom.x + bottom.w - 4.0,
        stall_y - 4.0,
        &format!("stall > {} ms", fmt_num(r.stall_ms)),
        10.0,
        "end",
        RED,
        0.0,
    );
    let (s99, s50) = (series(&p99), series(&p50));
    svg.polyline("series itl-p99", &s99, ORANGE, 2.0, None);
    svg.polyline("series itl-p50", &s50, GREY, 1.5, Some("5 3"));
    for p in &s99 {
        svg.circle("point itl-p99", p.0, p.1, 4.0, ORANGE);
    }
    for p in &s50 {
        svg.circle("point itl-p50", p.0, p.1, 3.0, GREY);
    }
    svg.text(
        bottom.x + 8.0,
        bottom.y + 14.0,
        "ITL p99 (solid), p50 (dashed)",
        11.0,
        "start",
        ORANGE,
        0.0,
    );

    for (i, g) in levels.iter().enumerate() {
        let label = g.concurrency.map_or(g.name.clone(), |c| c.to_string());
        for a in [top, bottom] {
            svg.text(
                x_of(i),
                a.y + a.h + 16.0,
                &label,
                11.0,
                "middle",
                "black",
                0.0,
            );
        }
    }
    svg.text(
        top.x + top.w / 2.0,
        bottom.y + bottom.h + 36.0,
        "concurrency (requests in flight)",
        12.0,
        "middle",
        "black",
        0.0,
    );
    if levels.is_empty() {
        svg.text(
            width / 2.0,
            height / 2.0,
            "no data",
            14.0,
            "middle",
            GREY,
            0.0,
        );
    }
    svg.finish()
}

fn interference(r: &Report) -> String {
    let mut rows: Vec<_> = r.requests.iter().filter(|q| q.group == DECODER).collect();
    rows.extend(r.requests.iter().filter(|q| q.group == LONG));
    let row_h = (480.0 / rows.len().max(1) as f64).clamp(8.0, 22.0);
    let width = 1000.0;
    let plot = Area {
        x: 110.0,
        y: 60.0,
        w: 860.0,
        h: row_h * rows.len().max(1) as f64,
    };
    let height = plot.y + plot.h + 90.0;
    let mut svg = Svg::new(width, height);
    title(&mut svg, r, width);
    let t_max = rows.iter().map(|q| q.finished_at_s()).fold(0.0, f64::max);
    let t_max = if t_max > 0.0 { t_max } else { 1.0 };
    let xs = Scale {
        d0: 0.0,
        d1: t_max,
        r0: plot.x,
        r1: plot.x + plot.w,
        log: false,
    };
    for t in nice_ticks(0.0, t_max, 10) {
        let x = xs.map(t);
        svg.line("grid", (x, plot.y), (x, plot.y + plot.h), LIGHT, 1.0, None);
        svg.text(
            x,
            plot.y + plot.h + 16.0,
            &fmt_num(t),
            11.0,
            "middle",
            "black",
            0.0,
        );
    }
    svg.text(
        plot.x + plot.w / 2.0,
        plot.y + plot.h + 36.0,
        "time since start (s)",
        12.0,
        "middle",
        "black",
        0.0,
    );
    let stall_s = r.stall_ms / 1e3;

    // Long-prompt arrivals and first tokens, drawn through every row.
    for q in rows.iter().filter(|q| q.group == LONG) {
        let x = xs.map(q.sent_s);
        svg.line(
            "arrival-line",
            (x, plot.y),
            (x, plot.y + plot.h),
            ORANGE,
            1.0,
            Some("4 3"),
        );
        if let Some(t) = q.token_times_s.first() {
            let x = xs.map(q.sent_s + t);
            svg.line(
                "first-token-line",
                (x, plot.y),
                (x, plot.y + plot.h),
                GREEN,
                1.0,
                Some("2 3"),
            );
        }
    }
    for (i, q) in rows.iter().enumerate() {
        let y = plot.y + i as f64 * row_h;
        let mid = y + row_h / 2.0;
        let colour = if q.group == LONG { ORANGE } else { BLUE };
        let mut name = format!("{} {}", q.group, q.id);
        if !q.ok() {
            name.push_str(" ✗");
        }
        svg.text(
            plot.x - 6.0,
            mid + 4.0,
            &name,
            (row_h * 0.6).min(11.0),
            "end",
            if q.ok() { "black" } else { RED },
            0.0,
        );
        let abs: Vec<f64> = q.token_times_s.iter().map(|t| q.sent_s + t).collect();
        if q.group == DECODER {
            for (k, g) in itls(&abs).iter().enumerate() {
                if *g > stall_s {
                    let (a, b) = (xs.map(abs[k]), xs.map(abs[k + 1]));
                    svg.rect("stall", a, y + 1.0, b - a, row_h - 2.0, RED, 0.3);
                }
            }
        } else {
            let end = abs.first().copied().unwrap_or(q.finished_at_s());
            let (a, b) = (xs.map(q.sent_s), xs.map(end));
            svg.rect(
                "prefill",
                a,
                y + row_h * 0.3,
                b - a,
                row_h * 0.4,
                ORANGE,
                0.25,
            );
            svg.marker(
                "arrival",
                a,
                y + row_h * 0.45,
                (row_h * 0.25).min(5.0),
                ORANGE,
            );
            if let Some(first) = abs.first() {
                svg.circle(
                    "first-token",
                    xs.map(*first),
                    mid,
                    (row_h * 0.25).min(4.0),
                    GREEN,
                );
            }
        }
        for t in &abs {
            let x = xs.map(*t);
            svg.line(
                "token",
                (x, y + row_h * 0.2),
                (x, y + row_h * 0.8),
                colour,
                1.0,
                None,
            );
        }
    }
    svg.line(
        "axis",
        (plot.x, plot.y + plot.h),
        (plot.x + plot.w, plot.y + plot.h),
        "black",
        1.0,
        None,
    );
    let ly = plot.y + plot.h + 60.0;
    svg.text(
        plot.x,
        ly,
        "| token (decoder blue, long prompt orange)",
        11.0,
        "start",
        "black",
        0.0,
    );
    svg.rect("legend", plot.x + 280.0, ly - 10.0, 14.0, 12.0, RED, 0.3);
    svg.text(
        plot.x + 298.0,
        ly,
        &format!("stall (gap > {} ms)", fmt_num(r.stall_ms)),
        11.0,
        "start",
        "black",
        0.0,
    );
    svg.text(
        plot.x + 440.0,
        ly,
        "▼ long prompt arrives",
        11.0,
        "start",
        ORANGE,
        0.0,
    );
    svg.text(
        plot.x + 590.0,
        ly,
        "● its first token",
        11.0,
        "start",
        GREEN,
        0.0,
    );
    if rows.is_empty() {
        svg.text(
            width / 2.0,
            plot.y + 40.0,
            "no data",
            14.0,
            "middle",
            GREY,
            0.0,
        );
    }
    svg.finish()
}

fn latency_cdfs(r: &Report) -> String {
    let (width, height) = (960.0, 440.0);
    let mut svg = Svg::new(width, height);
    title(&mut svg, r, width);
    let ok: Vec<_> = r.requests.iter().filter(|q| q.ok()).collect();
    let ttft: Vec<f64> = ok
        .iter()
        .filter_map(|q| q.token_times_s.first().map(|t| t * 1e3))
        .collect();
    let itl: Vec<f64> = ok
        .iter()
        .flat_map(|q| itls(&q.token_times_s))
        .map(|g| g * 1e3)
        .collect();
    let left = Area {
        x: 80.0,
        y: 70.0,
        w: 360.0,
        h: 290.0,
    };
    let right = Area {
        x: 570.0,
        y: 70.0,
        w: 360.0,
        h: 290.0,
    };
    let slo_itl = r.slo.itl_p99_ms;
    cdf_panel(
        &mut svg,
        left,
        "TTFT",
        "ttft",
        &ttft,
        &[(r.slo.ttft_ms, "SLO")],
        BLUE,
    );
    cdf_panel(
        &mut svg,
        right,
        "ITL",
        "itl",
        &itl,
        &[(Some(r.stall_ms), "stall"), (slo_itl, "SLO p99")],
        ORANGE,
    );
    svg.finish()
}

/// An empirical CDF on a log10 x axis, with vertical marks at the given thresholds.
fn cdf_panel(
    svg: &mut Svg,
    a: Area,
    name: &str,
    class: &str,
    values: &[f64],
    marks: &[(Option<f64>, &str)],
    colour: &str,
) {
    let mut v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .map(|x| x.max(0.01))
        .collect();
    v.sort_by(f64::total_cmp);
    let ys = y_axis(svg, a, 1.0, "fraction of samples ≤ x");
    for q in [0.5, 0.9, 0.99] {
        let y = ys.map(q);
        svg.line("quantile", (a.x, y), (a.x + a.w, y), GREY, 0.8, Some("3 3"));
        svg.text(
            a.x + a.w + 4.0,
            y + 4.0,
            &format!("p{}", fmt_num(q * 100.0)),
            9.0,
            "start",
            GREY,
            0.0,
        );
    }
    svg.text(
        a.x + a.w / 2.0,
        a.y - 8.0,
        &format!("{name} CDF (n = {})", v.len()),
        13.0,
        "middle",
        "black",
        0.0,
    );
    svg.text(
        a.x + a.w / 2.0,
        a.y + a.h + 34.0,
        &format!("{name} (ms, log scale)"),
        12.0,
        "middle",
        "black",
        0.0,
    );
    if v.is_empty() {
        svg.text(
            a.x + a.w / 2.0,
            a.y + a.h / 2.0,
            "no data",
            14.0,
            "middle",
            GREY,
            0.0,
        );
        return;
    }
    let marks_max = marks.iter().filter_map(|m| m.0).fold(0.0, f64::max);
    let lo = 10f64.powf(v[0].log10().floor());
    let mut hi = 10f64.powf(v[v.len() - 1].max(marks_max).log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    let xs = Scale {
        d0: lo,
        d1: hi,
        r0: a.x,
        r1: a.x + a.w,
        log: true,
    };
    let mut decade = lo;
    while decade <= hi * 1.0001 {
        let x = xs.map(decade);
        svg.line("grid", (x, a.y), (x, a.y + a.h), LIGHT, 1.0, None);
        svg.text(
            x,
            a.y + a.h + 16.0,
            &fmt_num(decade),
            11.0,
            "middle",
            "black",
            0.0,
        );
        decade *= 10.0;
    }
    // Step function through at most ~2000 points.
    let n = v.len();
    let stride = n.div_ceil(2000).max(1);
    let mut pts = vec![(xs.map(v[0]), ys.map(0.0))];
    for i in (0..n).step_by(stride).chain(std::iter::once(n - 1)) {
        let x = xs.map(v[i]);
        pts.push((x, ys.map(i as f64 / n as f64)));
        pts.push((x, ys.map((i + 1) as f64 / n as f64)));
    }
    svg.polyline(&format!("cdf {class}"), &pts, colour, 2.0, None);
    for (m, label) in marks {
        if let Some(m) = m {
            let x = xs.map(*m);
            svg.line("threshold", (x, a.y), (x, a.y + a.h), RED, 1.0, Some("6 4"));
            svg.text(
                x + 3.0,
                a.y + 12.0,
                &format!("{label} {} ms", fmt_num(*m)),
                10.0,
                "start",
                RED,
                0.0,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{record, report, times};
    use crate::record::Outcome;

    /// Checks that every element opened is closed in order (enough to catch a broken
    /// writer; the content is escaped by construction).
    pub fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        let mut stack: Vec<String> = vec![];
        let mut rest = svg;
        while let Some(i) = rest.find('<') {
            let j = rest[i..].find('>').expect("unclosed tag") + i;
            let tag = &rest[i + 1..j];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_string());
            }
            rest = &rest[j + 1..];
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert_eq!(svg.matches('"').count() % 2, 0);
    }

    #[test]
    fn scaling_chart_has_a_point_per_level_in_both_panels() {
        let mut recs = vec![];
        for (i, c) in [1, 2, 4].iter().enumerate() {
            recs.push(record(
                i,
                &format!("c={c}"),
                i as f64,
                &times(0.1, 0.02 * *c as f64, 5),
                Outcome::Ok,
            ));
        }
        let svg = render(&report("scaling", "braid <test>", recs));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("class=\"point throughput\"").count(), 3);
        assert_eq!(svg.matches("class=\"point itl-p99\"").count(), 3);
        assert_eq!(svg.matches("class=\"stall-threshold\"").count(), 1);
        assert!(svg.contains("throughput (tok/s)") && svg.contains("concurrency"));
        assert!(svg.contains("braid &lt;test&gt;"));
    }

    #[test]
    fn interference_timeline_ticks_every_token_and_shades_stalls() {
        let mut stalled = times(0.1, 0.05, 10);
        for t in stalled.iter_mut().skip(5) {
            *t += 0.5; // one 550 ms gap
        }
        let recs = vec![
            record(0, DECODER, 0.0, &stalled, Outcome::Ok),
            record(1, DECODER, 0.0, &times(0.1, 0.05, 10), Outcome::Ok),
            record(2, LONG, 0.3, &times(0.4, 0.05, 3), Outcome::Ok),
            record(3, LONG, 0.9, &[], Outcome::HttpError),
        ];
        let svg = render(&report("interference", "x", recs));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("class=\"token\"").count(), 23);
        assert_eq!(svg.matches("class=\"stall\"").count(), 1);
        assert_eq!(svg.matches("class=\"arrival\"").count(), 2);
        assert_eq!(svg.matches("class=\"first-token\"").count(), 1);
        assert_eq!(svg.matches("class=\"arrival-line\"").count(), 2);
        assert!(svg.contains("long 3 ✗") && svg.contains("time since start (s)"));
    }

    #[test]
    fn poisson_chart_draws_two_cdfs_with_thresholds() {
        let recs = (0..30)
            .map(|i| {
                record(
                    i,
                    "prompt=32",
                    i as f64 * 0.1,
                    &times(0.05 + 0.01 * i as f64, 0.02, 8),
                    Outcome::Ok,
                )
            })
            .collect();
        let svg = render(&report("poisson", "x", recs));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("class=\"cdf ttft\"").count(), 1);
        assert_eq!(svg.matches("class=\"cdf itl\"").count(), 1);
        // TTFT SLO; stall and ITL SLO.
        assert_eq!(svg.matches("class=\"threshold\"").count(), 3);
        assert!(svg.contains("TTFT CDF (n = 30)") && svg.contains("ITL CDF (n = 210)"));
    }

    #[test]
    fn empty_reports_still_render() {
        for s in ["scaling", "interference", "poisson"] {
            let svg = render(&report(s, "x", vec![]));
            assert_well_formed(&svg);
            assert!(svg.contains("no data"), "{s}");
        }
    }
}
