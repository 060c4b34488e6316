//! Every stream of the interference run on one timeline, a tick per token.
//!
//! A prefill that blocks decoding shows as one gap through all decoder rows at once,
//! shaded red where it is a stall, lined up under the long prompt's arrival marker.

use super::{
    dashed, fmt_num, legend, no_data, swatch, text, Area, Panel, BLUE, BROWN, GREEN, ORANGE, RED,
};
use crate::record::RequestRecord;
use crate::report::{Report, DECODER, LONG};
use crate::stats::itls;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const WIDTH: u32 = 1000;

/// One row per request: decoders first, then long prompts.
fn rows(r: &Report) -> Vec<&RequestRecord> {
    let mut rows: Vec<_> = r.requests.iter().filter(|q| q.group == DECODER).collect();
    rows.extend(r.requests.iter().filter(|q| q.group == LONG));
    rows
}

/// Pixels per row: as tall as fits, within legible bounds.
fn row_height(rows: usize) -> f64 {
    (480.0 / rows.max(1) as f64).clamp(8.0, 22.0)
}

pub fn size(r: &Report) -> (u32, u32) {
    let n = rows(r).len().max(1);
    (WIDTH, (row_height(n) * n as f64) as u32 + 220)
}

pub fn draw(r: &Report, area: &Area) -> anyhow::Result<()> {
    let rows = rows(r);
    let n = rows.len().max(1) as f64;
    let t_max = rows.iter().map(|q| q.finished_at_s()).fold(0.0, f64::max);
    let t_max = if t_max > 0.0 { t_max } else { 1.0 };
    let x_fmt = |t: &f64| fmt_num(*t);
    // Row i is the band from n - i - 1 to n - i, so the first row is on top.
    let panel = Panel {
        caption: "a tick per token".into(),
        // The last fifth is left empty for the legend.
        x: 0.0..t_max * 1.25,
        y: 0.0..n,
        x_desc: "time since start (s)",
        y_desc: "",
        x_labels: 10,
        x_fmt: &x_fmt,
        y_labels: 0,
    };
    let mut chart = panel.draw(area)?;
    let stall_s = r.stall_ms / 1e3;

    // Long-prompt arrivals and first tokens, drawn through every row.
    for q in rows.iter().filter(|q| q.group == LONG) {
        dashed(
            &mut chart,
            (q.sent_s, 0.0),
            (q.sent_s, n),
            BROWN.stroke_width(1),
        )?;
        if let Some(t) = q.token_times_s.first() {
            let x = q.sent_s + t;
            dashed(&mut chart, (x, 0.0), (x, n), GREEN.stroke_width(1))?;
        }
    }
    let row_px = row_height(rows.len());
    let name_px = (row_px * 0.6).min(11.0);
    for (i, q) in rows.iter().enumerate() {
        let y = n - i as f64 - 1.0;
        let mid = y + 0.5;
        let mut name = format!("{} {}", q.group, q.id);
        if !q.ok() {
            name.push_str(" ✗");
        }
        let (px, py) = chart.backend_coord(&(0.0, mid));
        let base = area.get_base_pixel();
        let colour = if q.ok() { BLACK } else { RED };
        let style = text(name_px, &colour).pos(Pos::new(HPos::Right, VPos::Center));
        area.draw(&Text::new(name, (px - 6 - base.0, py - base.1), style))?;

        let abs: Vec<f64> = q.token_times_s.iter().map(|t| q.sent_s + t).collect();
        let tick = if q.group == DECODER {
            let gaps = itls(&abs);
            let stalls = gaps.iter().enumerate().filter(|(_, g)| **g > stall_s);
            chart.draw_series(stalls.map(|(k, _)| {
                Rectangle::new(
                    [(abs[k], y + 0.05), (abs[k + 1], y + 0.95)],
                    RED.mix(0.3).filled(),
                )
            }))?;
            BLUE
        } else {
            let end = abs.first().copied().unwrap_or(q.finished_at_s());
            let prefill = [(q.sent_s, y + 0.3), (end, y + 0.7)];
            chart.draw_series([Rectangle::new(prefill, ORANGE.mix(0.25).filled())])?;
            let size = (row_px * 0.25).min(5.0) as i32;
            let arrival = (q.sent_s, y + 0.2);
            chart.draw_series([TriangleMarker::new(arrival, size, BROWN.filled())])?;
            let first = abs
                .first()
                .map(|t| Circle::new((*t, mid), size, GREEN.filled()));
            chart.draw_series(first)?;
            ORANGE
        };
        chart.draw_series(
            abs.iter().map(|t| {
                PathElement::new(vec![(*t, y + 0.2), (*t, y + 0.8)], tick.stroke_width(1))
            }),
        )?;
    }

    // Legend entries only: the marks were drawn above.
    let entries: [(&str, ShapeStyle); 3] = [
        ("token of a decoder", BLUE.stroke_width(2)),
        ("token of a long prompt", ORANGE.stroke_width(2)),
        ("long prompt arrives", BROWN.stroke_width(2)),
    ];
    for (label, style) in entries {
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())?
            .label(label)
            .legend(swatch(style));
    }
    let stall = format!("stall (gap > {} ms)", fmt_num(r.stall_ms));
    chart
        .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
        .label(stall)
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], RED.mix(0.3).filled()));
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("its first token")
        .legend(|c| Circle::new(c, 4, GREEN.filled()));
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    if rows.is_empty() {
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
        let svg = render(&report("interference", "x", recs)).unwrap();
        assert_well_formed(&svg);
        // Each count includes the mark's legend entry.
        assert_eq!(count(&svg, "polyline", BLUE), 20 + 1, "decoder ticks");
        assert_eq!(count(&svg, "polyline", ORANGE), 3 + 1, "long-prompt ticks");
        assert_eq!(count(&svg, "rect", RED), 1 + 1, "stalls");
        assert_eq!(count(&svg, "polygon", BROWN), 2, "arrivals");
        assert_eq!(count(&svg, "circle", GREEN), 1 + 1, "first tokens");
        assert!(svg.contains("long 3 ✗") && svg.contains("time since start (s)"));
    }
}
