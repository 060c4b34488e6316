//! Throughput and ITL against concurrency, in two panels over one x axis: the knee
//! where adding streams stops buying throughput and starts costing latency.

use super::{
    dashed, fmt_num, headroom, legend, no_data, swatch, text, Area, Panel, BLUE, GREY, ORANGE, RED,
};
use crate::report::Report;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub const SIZE: (u32, u32) = (900, 660);

pub fn draw(r: &Report, area: &Area) -> anyhow::Result<()> {
    let levels: Vec<_> = r
        .groups
        .iter()
        .filter(|g| g.concurrency.is_some())
        .collect();
    let names: Vec<String> = levels
        .iter()
        .map(|g| g.concurrency.map_or(g.name.clone(), |c| c.to_string()))
        .collect();
    // Level i sits at x = i; only whole x get a label.
    let x_fmt = |v: &f64| match names.get(v.round() as usize) {
        Some(name) if (v - v.round()).abs() < 1e-6 && *v > -0.5 => name.clone(),
        _ => String::new(),
    };
    let x = -0.5..levels.len().max(1) as f64 - 0.5;
    let at = |points: Vec<Option<f64>>| -> Vec<(f64, f64)> {
        points
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i as f64, v)))
            .collect()
    };
    let (top, bottom) = area.split_vertically(SIZE.1 as i32 / 2 - 20);

    let tput = at(levels
        .iter()
        .map(|g| Some(g.aggregate.throughput_tok_s))
        .collect());
    let max = tput.iter().map(|p| p.1).fold(0.0, f64::max);
    let panel = Panel {
        caption: "throughput".into(),
        x: x.clone(),
        y: 0.0..headroom(max),
        x_desc: "concurrency (requests in flight)",
        y_desc: "throughput (tok/s)",
        x_labels: levels.len().max(1),
        x_fmt: &x_fmt,
        y_labels: 6,
    };
    let mut chart = panel.draw(&top)?;
    chart.draw_series(LineSeries::new(tput.clone(), BLUE.stroke_width(2)))?;
    chart.draw_series(tput.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))?;
    let above = text(10.0, &BLUE).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(
        tput.iter().map(|&(x, v)| {
            EmptyElement::at((x, v)) + Text::new(fmt_num(v), (0, -6), above.clone())
        }),
    )?;
    if levels.is_empty() {
        no_data(&chart, &panel)?;
    }

    let p99 = at(levels
        .iter()
        .map(|g| g.aggregate.itl_ms.map(|s| s.p99))
        .collect());
    let p50 = at(levels
        .iter()
        .map(|g| g.aggregate.itl_ms.map(|s| s.p50))
        .collect());
    let max = p99.iter().map(|p| p.1).fold(r.stall_ms, f64::max);
    let panel = Panel {
        caption: "inter-token latency".into(),
        y: 0.0..headroom(max),
        y_desc: "ITL (ms)",
        ..panel
    };
    let mut chart = panel.draw(&bottom)?;
    let stall = (r.stall_ms, RED.stroke_width(1));
    dashed(&mut chart, (x.start, stall.0), (x.end, stall.0), stall.1)?
        .label(format!("stall: gap above {} ms", fmt_num(r.stall_ms)))
        .legend(swatch(stall.1));
    chart
        .draw_series(LineSeries::new(p99.clone(), ORANGE.stroke_width(2)))?
        .label("ITL p99")
        .legend(swatch(ORANGE.stroke_width(2)));
    chart.draw_series(p99.iter().map(|p| Circle::new(*p, 4, ORANGE.filled())))?;
    chart
        .draw_series(DashedLineSeries::new(
            p50.clone(),
            5,
            3,
            GREY.stroke_width(2),
        ))?
        .label("ITL p50")
        .legend(swatch(GREY.stroke_width(2)));
    chart.draw_series(p50.iter().map(|p| Circle::new(*p, 3, GREY.filled())))?;
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    if levels.is_empty() {
        no_data(&chart, &panel)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::render;
    use crate::chart::tests::{assert_well_formed, count};
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
        let svg = render(&report("scaling", "braid <test>", recs)).unwrap();
        assert_well_formed(&svg);
        assert_eq!(count(&svg, "circle", BLUE), 3, "throughput points");
        assert_eq!(count(&svg, "circle", ORANGE), 3, "ITL p99 points");
        assert_eq!(count(&svg, "circle", GREY), 3, "ITL p50 points");
        assert!(count(&svg, "polyline", RED) > 1, "dashed stall threshold");
        assert!(svg.contains("stall: gap above"));
        assert!(svg.contains("throughput (tok/s)") && svg.contains("concurrency"));
        assert!(svg.contains("braid &lt;test&gt;"));
    }
}
