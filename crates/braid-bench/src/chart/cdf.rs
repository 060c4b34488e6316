//! TTFT and ITL distributions as CDFs on log axes, with the SLOs and the stall
//! threshold drawn in, so the share of requests that miss is read off directly.

use super::{no_data, title, y_axis, Area, BLUE, GREY, LIGHT, ORANGE, RED};
use crate::report::Report;
use crate::stats::itls;
use crate::svg::{fmt_num, Scale, Svg};

pub fn chart(r: &Report) -> String {
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
        no_data(svg, a.x + a.w / 2.0, a.y + a.h / 2.0);
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
    // Labels stacked one under the other, so that close thresholds stay legible.
    for (k, (m, label)) in marks.iter().filter(|(m, _)| m.is_some()).enumerate() {
        if let Some(m) = m {
            let x = xs.map(*m);
            svg.line("threshold", (x, a.y), (x, a.y + a.h), RED, 1.0, Some("6 4"));
            svg.text(
                x + 3.0,
                a.y + 12.0 + 13.0 * k as f64,
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
    use crate::chart::render;
    use crate::chart::tests::assert_well_formed;
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
        let svg = render(&report("poisson", "x", recs));
        assert_well_formed(&svg);
        assert_eq!(svg.matches("class=\"cdf ttft\"").count(), 1);
        assert_eq!(svg.matches("class=\"cdf itl\"").count(), 1);
        // TTFT SLO; stall and ITL SLO.
        assert_eq!(svg.matches("class=\"threshold\"").count(), 3);
        assert!(svg.contains("TTFT CDF (n = 30)") && svg.contains("ITL CDF (n = 210)"));
    }
}
