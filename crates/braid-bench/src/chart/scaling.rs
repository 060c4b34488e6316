//! Throughput and ITL against concurrency, in two panels over one x axis: the knee
//! where adding streams stops buying throughput and starts costing latency.

use super::{no_data, title, y_axis, Area, BLUE, GREY, ORANGE, RED};
use crate::report::Report;
use crate::svg::{fmt_num, nice_max, Svg};

pub fn chart(r: &Report) -> String {
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
        no_data(&mut svg, width / 2.0, height / 2.0);
    }
    svg.finish()
}

#[cfg(test)]
mod tests {
    use crate::chart::render;
    use crate::chart::tests::assert_well_formed;
    use crate::fixtures::{record, report, times};
    use crate::record::Outcome;

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
}
