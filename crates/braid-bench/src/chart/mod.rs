//! One picture per scenario, made to show its point at a glance.
//!
//! - scaling: throughput and ITL p99 against concurrency, in two panels sharing the x
//!   axis, so the knee where more streams stop paying is visible.
//! - interference: every stream on one timeline, a tick per token. A prefill that blocks
//!   decoding shows as one gap through all decoder rows, shaded red where it is a stall,
//!   lined up under the long prompt's arrival.
//! - poisson: CDFs of TTFT and ITL on log axes, with the SLOs and the stall threshold
//!   drawn in, so the share of requests that miss is read off directly.

mod cdf;
mod scaling;
mod timeline;

use crate::report::Report;
use crate::svg::{fmt_num, nice_ticks, Scale, Svg};

pub(crate) const BLUE: &str = "#1f77b4";
pub(crate) const ORANGE: &str = "#ff7f0e";
pub(crate) const GREEN: &str = "#2ca02c";
pub(crate) const RED: &str = "#d62728";
pub(crate) const GREY: &str = "#888888";
pub(crate) const LIGHT: &str = "#e5e5e5";

/// The chart of a report, as a complete SVG document.
pub fn render(r: &Report) -> String {
    match r.scenario.as_str() {
        "scaling" => scaling::chart(r),
        "interference" => timeline::chart(r),
        _ => cdf::chart(r),
    }
}

pub(crate) fn title(svg: &mut Svg, r: &Report, width: f64) {
    let label = r.label.as_deref().unwrap_or("(no label)");
    let t = format!("braid-bench {} — {label}", r.scenario);
    svg.text(width / 2.0, 22.0, &t, 15.0, "middle", "black", 0.0);
    let sub = format!("{} · model {} · {}", r.url, r.model, r.started_at);
    svg.text(width / 2.0, 38.0, &sub, 10.0, "middle", GREY, 0.0);
}

/// Plot area in pixels.
#[derive(Clone, Copy)]
pub(crate) struct Area {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// Draws a frame, horizontal grid lines and y tick labels for a linear y axis from 0.
/// The placeholder of a panel that has nothing to draw, centred at (x, y).
pub(crate) fn no_data(svg: &mut Svg, x: f64, y: f64) {
    svg.text(x, y, "no data", 14.0, "middle", GREY, 0.0);
}

pub(crate) fn y_axis(svg: &mut Svg, a: Area, max: f64, label: &str) -> Scale {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures::report;

    /// Checks that every element opened is closed in order (enough to catch a broken
    /// writer; the content is escaped by construction).
    pub(crate) fn assert_well_formed(svg: &str) {
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
    fn empty_reports_still_render() {
        for s in ["scaling", "interference", "poisson"] {
            let svg = render(&report(s, "x", vec![]));
            assert_well_formed(&svg);
            assert!(svg.contains("no data"), "{s}");
        }
    }
}
