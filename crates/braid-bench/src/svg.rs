//! A few SVG primitives and axis scales, written by hand.
//!
//! The charts are simple (lines, dots, ticks, text), and a timeline of a few thousand
//! token ticks needs exact control of every mark; a plotting library would add weight
//! without making either easier. Every mark carries a `class`, so tests (and anyone
//! post-processing a chart) can find them.

use std::fmt::Write as _;

pub struct Svg {
    out: String,
}

/// Escapes text for SVG content and attribute values.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A number as a short label: about three significant digits, no trailing zeros.
pub fn fmt_num(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

// The primitives take SVG's own attributes as arguments, one for one.
#[allow(clippy::too_many_arguments)]
impl Svg {
    pub fn new(width: f64, height: f64) -> Svg {
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            out,
            r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
        );
        Svg { out }
    }

    pub fn line(
        &mut self,
        class: &str,
        (x1, y1): (f64, f64),
        (x2, y2): (f64, f64),
        stroke: &str,
        width: f64,
        dash: Option<&str>,
    ) {
        let dash = dash.map_or(String::new(), |d| format!(r#" stroke-dasharray="{d}""#));
        let _ = writeln!(
            self.out,
            r#"<line class="{class}" x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="{width}"{dash}/>"#
        );
    }

    pub fn rect(&mut self, class: &str, x: f64, y: f64, w: f64, h: f64, fill: &str, opacity: f64) {
        let _ = writeln!(
            self.out,
            r#"<rect class="{class}" x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}" fill-opacity="{opacity}"/>"#,
            w.max(0.5),
            h.max(0.5)
        );
    }

    pub fn circle(&mut self, class: &str, cx: f64, cy: f64, r: f64, fill: &str) {
        let _ = writeln!(
            self.out,
            r#"<circle class="{class}" cx="{cx:.1}" cy="{cy:.1}" r="{r}" fill="{fill}"/>"#
        );
    }

    /// A small downward triangle with its tip at (x, y).
    pub fn marker(&mut self, class: &str, x: f64, y: f64, size: f64, fill: &str) {
        let _ = writeln!(
            self.out,
            r#"<polygon class="{class}" points="{:.1},{:.1} {:.1},{:.1} {x:.1},{y:.1}" fill="{fill}"/>"#,
            x - size,
            y - size * 1.5,
            x + size,
            y - size * 1.5
        );
    }

    pub fn polyline(
        &mut self,
        class: &str,
        points: &[(f64, f64)],
        stroke: &str,
        width: f64,
        dash: Option<&str>,
    ) {
        if points.is_empty() {
            return;
        }
        let pts: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let dash = dash.map_or(String::new(), |d| format!(r#" stroke-dasharray="{d}""#));
        let _ = writeln!(
            self.out,
            r#"<polyline class="{class}" points="{}" fill="none" stroke="{stroke}" stroke-width="{width}"{dash}/>"#,
            pts.join(" ")
        );
    }

    /// Text; `anchor` is start, middle or end; `rotate` in degrees about (x, y).
    pub fn text(
        &mut self,
        x: f64,
        y: f64,
        s: &str,
        size: f64,
        anchor: &str,
        fill: &str,
        rotate: f64,
    ) {
        let rot = if rotate != 0.0 {
            format!(r#" transform="rotate({rotate} {x:.1} {y:.1})""#)
        } else {
            String::new()
        };
        let _ = writeln!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{rot}>{}</text>"#,
            esc(s)
        );
    }

    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// Maps a data interval onto a pixel interval, linearly or by log10.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub d0: f64,
    pub d1: f64,
    pub r0: f64,
    pub r1: f64,
    pub log: bool,
}

impl Scale {
    pub fn map(&self, v: f64) -> f64 {
        let (v, d0, d1) = if self.log {
            (v.max(1e-12).log10(), self.d0.log10(), self.d1.log10())
        } else {
            (v, self.d0, self.d1)
        };
        let f = if d1 > d0 { (v - d0) / (d1 - d0) } else { 0.5 };
        self.r0 + f.clamp(0.0, 1.0) * (self.r1 - self.r0)
    }
}

/// Round tick values (1, 2 or 5 × 10^k apart) covering [lo, hi], about `target` of them.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) {
        return vec![lo];
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil();
    (0..=target * 3 + 2)
        .map(|i| (first + i as f64) * step)
        .take_while(|v| *v <= hi + step * 1e-9)
        .map(|v| if v.abs() < step * 1e-9 { 0.0 } else { v })
        .collect()
}

/// A round upper bound for an axis that starts at 0.
pub fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let ticks = nice_ticks(0.0, v * 1.05, 5);
    let step = if ticks.len() > 1 {
        ticks[1] - ticks[0]
    } else {
        v
    };
    (v * 1.05 / step).ceil() * step
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 10.0, 5),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(nice_ticks(0.0, 1.0, 4), vec![0.0, 0.5, 1.0]);
        assert_eq!(nice_ticks(3.0, 27.0, 5), vec![5.0, 10.0, 15.0, 20.0, 25.0]);
        assert_eq!(nice_max(87.0), 100.0);
        assert_eq!(nice_max(0.0), 1.0);
    }

    #[test]
    fn scales_and_labels() {
        let s = Scale {
            d0: 0.0,
            d1: 10.0,
            r0: 100.0,
            r1: 200.0,
            log: false,
        };
        assert_eq!(s.map(5.0), 150.0);
        assert_eq!(s.map(20.0), 200.0);
        let l = Scale {
            d0: 1.0,
            d1: 100.0,
            r0: 0.0,
            r1: 100.0,
            log: true,
        };
        assert!((l.map(10.0) - 50.0).abs() < 1e-9);
        assert_eq!(fmt_num(2.50), "2.5");
        assert_eq!(fmt_num(1234.4), "1234");
        assert_eq!(fmt_num(3.0), "3");
        assert_eq!(fmt_num(45.09), "45.1");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
