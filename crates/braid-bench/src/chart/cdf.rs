//! TTFT and ITL distributions as CDFs on log axes, with the SLOs and the stall
//! threshold drawn in, so the share of requests that miss is read off directly.
//!
//! The x axis is log10 of milliseconds on a linear plotters axis, labelled back in
//! milliseconds at whole decades.

use super::{dashed, fmt_num, no_data, text, Area, Panel, BLUE, GREY, ORANGE, RED};
use crate::report::Report;
use crate::stats::itls;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub const SIZE: (u32, u32) = (960, 440);

pub fn draw(r: &Report, area: &Area) -> anyhow::Result<()> {
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
    let (left, right) = area.split_horizontally(SIZE.0 as i32 / 2);
    cdf_panel(&left, "TTFT", &ttft, &[(r.slo.ttft_ms, "SLO")], BLUE)?;
    let itl_marks = [(Some(r.stall_ms), "stall"), (r.slo.itl_p99_ms, "SLO p99")];
    cdf_panel(&right, "ITL", &itl, &itl_marks, ORANGE)
}

/// An empirical CDF of `values` (ms), with vertical marks at the given thresholds.
fn cdf_panel(
    area: &Area,
    name: &str,
    values: &[f64],
    marks: &[(Option<f64>, &str)],
    colour: RGBColor,
) -> anyhow::Result<()> {
    let mut v: Vec<f64> = values
        .iter()
        .filter(|x| x.is_finite())
        .map(|x| x.max(0.01).log10())
        .collect();
    v.sort_by(f64::total_cmp);
    let marks: Vec<(f64, &str)> = marks
        .iter()
        .filter_map(|(m, label)| m.map(|m| (m, *label)))
        .collect();
    let (lo, hi) = match (v.first(), v.last()) {
        (Some(first), Some(last)) => {
            let top = marks.iter().map(|m| m.0.log10()).fold(*last, f64::max);
            let (lo, hi) = (first.floor(), top.ceil());
            (lo, if hi > lo { hi } else { lo + 1.0 })
        }
        _ => (0.0, 1.0),
    };
    let x_fmt = |d: &f64| fmt_num(10f64.powf(*d));
    let x_desc = format!("{name} (ms, log scale)");
    let panel = Panel {
        caption: format!("{name} CDF (n = {})", v.len()),
        x: lo..hi,
        y: 0.0..1.0,
        x_desc: &x_desc,
        y_desc: "fraction of samples ≤ x",
        x_labels: (hi - lo) as usize + 1,
        x_fmt: &x_fmt,
        y_labels: 6,
    };
    let mut chart = panel.draw(area)?;
    let at_right = Pos::new(HPos::Right, VPos::Bottom);
    for q in [0.5, 0.9, 0.99] {
        dashed(&mut chart, (lo, q), (hi, q), GREY.stroke_width(1))?;
        let label = format!("p{}", fmt_num(q * 100.0));
        let style = text(9.0, &GREY).pos(at_right);
        chart.draw_series([EmptyElement::at((hi, q)) + Text::new(label, (-2, -2), style)])?;
    }
    if v.is_empty() {
        return no_data(&chart, &panel);
    }
    // Step function through at most ~2000 points.
    let n = v.len();
    let stride = n.div_ceil(2000).max(1);
    let mut steps = vec![(v[0], 0.0)];
    for i in (0..n).step_by(stride).chain(std::iter::once(n - 1)) {
        steps.push((v[i], i as f64 / n as f64));
        steps.push((v[i], (i + 1) as f64 / n as f64));
    }
    chart.draw_series(LineSeries::new(steps, colour.stroke_width(2)))?;
    // Labels stacked one under the other, so that close thresholds stay legible.
    for (k, (m, label)) in marks.iter().enumerate() {
        let x = m.log10();
        dashed(&mut chart, (x, 0.0), (x, 1.0), RED.stroke_width(1))?;
        let label = format!("{label} {} ms", fmt_num(*m));
        let offset = (3, 4 + 13 * k as i32);
        let style = text(10.0, &RED).pos(Pos::new(HPos::Left, VPos::Top));
        chart.draw_series([EmptyElement::at((x, 1.0)) + Text::new(label, offset, style)])?;
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
        let svg = render(&report("poisson", "x", recs)).unwrap();
        assert_well_formed(&svg);
        assert_eq!(count(&svg, "polyline", BLUE), 1, "TTFT CDF");
        assert_eq!(count(&svg, "polyline", ORANGE), 1, "ITL CDF");
        // TTFT SLO; stall and ITL SLO.
        assert_eq!(count(&svg, "text", RED), 3);
        assert!(svg.contains("TTFT CDF (n = 30)") && svg.contains("ITL CDF (n = 210)"));
    }
}
