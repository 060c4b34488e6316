//! Every stream of the interference run on one timeline, a tick per token.
//!
//! A prefill that blocks decoding shows as one gap through all decoder rows at once,
//! shaded red where it is a stall, lined up under the long prompt's arrival marker.

use super::{no_data, title, Area, BLUE, GREEN, LIGHT, ORANGE, RED};
use crate::report::{Report, DECODER, LONG};
use crate::stats::itls;
use crate::svg::{fmt_num, nice_ticks, Scale, Svg};

pub fn chart(r: &Report) -> String {
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
        no_data(&mut svg, width / 2.0, plot.y + 40.0);
    }
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::render;
    use crate::chart::tests::assert_well_formed;
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
        let svg = render(&report("interference", "x", recs));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("class=\"token\"").count(), 23);
        assert_eq!(svg.matches("class=\"stall\"").count(), 1);
        assert_eq!(svg.matches("class=\"arrival\"").count(), 2);
        assert_eq!(svg.matches("class=\"first-token\"").count(), 1);
        assert_eq!(svg.matches("class=\"arrival-line\"").count(), 2);
        assert!(svg.contains("long 3 ✗") && svg.contains("time since start (s)"));
    }
}
