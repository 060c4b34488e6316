//! One picture per scenario, made to show its point at a glance.
//!
//! - scaling: throughput and ITL p99 against concurrency, in two panels sharing the x
//!   axis, so the knee where more streams stop paying is visible.
//! - interference: every stream on one timeline, a tick per token. A prefill that blocks
//!   decoding shows as one gap through all decoder rows, shaded red where it is a stall,
//!   lined up under the long prompt's arrival.
//! - poisson: CDFs of TTFT and ITL on log axes, with the SLOs and the stall threshold
//!   drawn in, so the share of requests that miss is read off directly.
//!
//! plotters draws them on its SVG backend, which writes text as SVG `<text>` and so
//! needs no font files to build or run. Every panel is made by [`Panel`], so axes, grid,
//! captions and legends look the same everywhere and are written once. Each kind of mark
//! has a colour of its own: that is how a reader tells them apart, and how the tests
//! find them.

mod cdf;
mod scaling;
mod timeline;

use crate::report::Report;
use plotters::chart::SeriesAnno;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

pub(crate) const BLUE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
pub(crate) const ORANGE: RGBColor = RGBColor(0xff, 0x7f, 0x0e);
pub(crate) const GREEN: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
pub(crate) const RED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
pub(crate) const BROWN: RGBColor = RGBColor(0x8c, 0x56, 0x4b);
pub(crate) const GREY: RGBColor = RGBColor(0x88, 0x88, 0x88);
const LIGHT: RGBColor = RGBColor(0xe5, 0xe5, 0xe5);

pub(crate) type Area<'b> = DrawingArea<SVGBackend<'b>, Shift>;
pub(crate) type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
type Draw = fn(&Report, &Area) -> anyhow::Result<()>;

/// The chart of a report, as a complete SVG document.
pub fn render(r: &Report) -> anyhow::Result<String> {
    let (size, draw): ((u32, u32), Draw) = match r.scenario.as_str() {
        "scaling" => (scaling::SIZE, scaling::draw),
        "interference" => (timeline::size(r), timeline::draw),
        _ => (cdf::SIZE, cdf::draw),
    };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(r, &title(&root, r)?)?;
        root.present()?;
    }
    Ok(out)
}

/// Text in the charts' one font, at a size in pixels.
pub(crate) fn text(px: f64, colour: &RGBColor) -> TextStyle<'static> {
    // The SVG backend writes a font's size divided by 1.24.
    ("sans-serif", px * 1.24).into_font().color(colour)
}

/// Writes the title and subtitle; returns the area under them.
fn title<'b>(root: &Area<'b>, r: &Report) -> anyhow::Result<Area<'b>> {
    let label = r.label.as_deref().unwrap_or("(no label)");
    let mid = root.dim_in_pixel().0 as i32 / 2;
    let top = Pos::new(HPos::Center, VPos::Top);
    let head = format!("braid-bench {} — {label}", r.scenario);
    root.draw(&Text::new(head, (mid, 8), text(15.0, &BLACK).pos(top)))?;
    let sub = format!("{} · model {} · {}", r.url, r.model, r.started_at);
    root.draw(&Text::new(sub, (mid, 28), text(10.0, &GREY).pos(top)))?;
    Ok(root.split_vertically(44).1)
}

/// The look every panel shares: caption, frame, grid at the labelled ticks, axis names.
pub(crate) struct Panel<'s> {
    pub caption: String,
    pub x: Range<f64>,
    pub y: Range<f64>,
    pub x_desc: &'s str,
    pub y_desc: &'s str,
    /// At most this many labelled x ticks, written by `x_fmt`.
    pub x_labels: usize,
    pub x_fmt: &'s dyn Fn(&f64) -> String,
    /// At most this many labelled y ticks (0: none, and no horizontal grid).
    pub y_labels: usize,
}

impl Panel<'_> {
    pub fn draw<'a, 'b>(&self, area: &'a Area<'b>) -> anyhow::Result<Chart<'a, 'b>> {
        let mut chart = ChartBuilder::on(area)
            .caption(&self.caption, text(13.0, &BLACK))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(96)
            .build_cartesian_2d(self.x.clone(), self.y.clone())?;
        chart
            .configure_mesh()
            .bold_line_style(LIGHT)
            .light_line_style(TRANSPARENT)
            .axis_style(BLACK)
            .x_labels(self.x_labels)
            .y_labels(self.y_labels)
            .x_label_formatter(self.x_fmt)
            .y_label_formatter(&|v| fmt_num(*v))
            .label_style(text(11.0, &BLACK))
            .axis_desc_style(text(12.0, &BLACK))
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .draw()?;
        Ok(chart)
    }

    /// The middle of the plot, in data coordinates.
    pub fn centre(&self) -> (f64, f64) {
        (
            (self.x.start + self.x.end) / 2.0,
            (self.y.start + self.y.end) / 2.0,
        )
    }
}

/// Draws the legend of every series given a label.
pub(crate) fn legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    at: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(GREY)
        .label_font(text(11.0, &BLACK))
        .draw()?;
    Ok(())
}

/// A legend entry's picture of a line in `style`.
pub(crate) fn swatch(style: ShapeStyle) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style)
}

/// A dashed straight line, e.g. a threshold.
pub(crate) fn dashed<'c, 'a, 'b>(
    chart: &'c mut Chart<'a, 'b>,
    from: (f64, f64),
    to: (f64, f64),
    style: ShapeStyle,
) -> anyhow::Result<&'c mut SeriesAnno<'a, SVGBackend<'b>>> {
    Ok(chart.draw_series(DashedLineSeries::new([from, to], 6, 4, style))?)
}

/// The placeholder of a panel that has nothing to draw.
pub(crate) fn no_data(chart: &Chart, panel: &Panel) -> anyhow::Result<()> {
    let style = text(14.0, &GREY).pos(Pos::new(HPos::Center, VPos::Center));
    chart
        .plotting_area()
        .draw(&Text::new("no data", panel.centre(), style))?;
    Ok(())
}

/// Room above the largest value of an axis that starts at 0.
pub(crate) fn headroom(max: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max * 1.15
    } else {
        1.0
    }
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures::report;

    /// Checks that every element opened is closed in order (enough to catch a broken
    /// writer; the content is escaped by construction).
    pub(crate) fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg "));
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

    /// How many `<tag>` elements are drawn in `colour`.
    pub(crate) fn count(svg: &str, tag: &str, colour: RGBColor) -> usize {
        let hex = format!("\"#{:02X}{:02X}{:02X}\"", colour.0, colour.1, colour.2);
        let open = format!("<{tag} ");
        svg.lines()
            .filter(|l| l.starts_with(&open) && l.contains(&hex))
            .count()
    }

    #[test]
    fn empty_reports_still_render() {
        for s in ["scaling", "interference", "poisson"] {
            let svg = render(&report(s, "x", vec![])).unwrap();
            assert_well_formed(&svg);
            assert!(svg.contains("no data"), "{s}");
        }
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(fmt_num(2.50), "2.5");
        assert_eq!(fmt_num(1234.4), "1234");
        assert_eq!(fmt_num(3.0), "3");
        assert_eq!(fmt_num(45.09), "45.1");
        assert_eq!(fmt_num(0.25), "0.25");
    }
}
