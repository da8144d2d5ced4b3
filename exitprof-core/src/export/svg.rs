//! SVG figure (`.svg`): what a person wants from a run at a glance.
//!
//! - Top: latency by percentile, one curve per stage (the whole exit in black), latency on a log
//!   scale, percentiles spaced by their nines as HdrHistogram plots them (x = -log10(1 - q): 90%,
//!   99%, 99.9% equally apart), so the tail is as visible as the median.
//! - Bottom: each stage's share of the total exit time, in kernel order.
//!
//! A set of several variants (conditions of a compare, rows of a sweep) overlays them: a stage
//! keeps its color, each variant has its line style (solid, dashed, ...) and its bar shade.

use plotters::{
    coord::Shift,
    element::{DashedPathElement, IntoDynElement as _},
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

use super::{EncodeError, ExportSet, Series, Variant};

/// The figures' width and text, shared by every SVG exitprof draws.
pub(crate) const WIDTH: u32 = 1100;
const CURVES_HEIGHT: u32 = 560;
const BAR_HEIGHT: u32 = 20;
pub(crate) const FONT: &str = "sans-serif";
/// Text sizes as plotters takes them (its SVG backend writes them smaller, by 1.24).
pub(crate) const TITLE: u32 = 25;
const CAPTION: u32 = 21;
pub(crate) const TEXT: u32 = 17;
pub(crate) const SMALL: u32 = 16;

/// Distinct colors for stages (Tableau 10), then again; the whole exit is black.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// Dash and gap lengths (px) of each variant after the first, which is solid.
const DASHES: [(u32, u32); 4] = [(9, 5), (2, 4), (16, 4), (5, 10)];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

pub fn encode(set: &ExportSet) -> Result<Vec<u8>, EncodeError> {
    let figure = Figure::new(set);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, figure.height())).into_drawing_area();
        root.fill(&WHITE)?;
        let (header, rest) = root.split_vertically(figure.header_height());
        let (curves, bars) = rest.split_vertically(CURVES_HEIGHT);
        figure.draw_header(&header)?;
        figure.draw_curves(&curves)?;
        figure.draw_shares(&bars)?;
        root.present()?;
    }
    Ok(svg.into_bytes())
}

/// The set, arranged for drawing.
struct Figure<'a> {
    set: &'a ExportSet,
    /// Stage names in kernel order, the whole exit first.
    stages: Vec<&'a str>,
    variants: Vec<&'a Variant>,
}

impl<'a> Figure<'a> {
    fn new(set: &'a ExportSet) -> Self {
        Self { set, stages: set.stages(), variants: set.variants() }
    }

    /// Stages other than the whole exit: the bars.
    fn parts(&self) -> &[&'a str] {
        match self.stages.split_first() {
            Some((&"exit", rest)) => rest,
            _ => &self.stages,
        }
    }

    fn header_height(&self) -> u32 {
        64 + 19 * self.set.runs.len() as u32 + if self.set.partial { 20 } else { 0 }
    }

    fn shares_height(&self) -> u32 {
        let row = BAR_HEIGHT * self.variants.len() as u32 + 12;
        115 + row * self.parts().len() as u32
    }

    fn height(&self) -> u32 {
        self.header_height() + CURVES_HEIGHT + self.shares_height()
    }

    fn color(&self, stage: &str) -> RGBColor {
        match self.stages.iter().filter(|&&s| s != "exit").position(|&s| s == stage) {
            _ if stage == "exit" => BLACK,
            Some(i) => PALETTE[i % PALETTE.len()],
            None => BLACK,
        }
    }

    fn variant_index(&self, variant: &Variant) -> usize {
        self.variants.iter().position(|&v| v == variant).unwrap_or_default()
    }

    fn series(&self, stage: &str, variant: &Variant) -> Option<&'a Series> {
        self.set.series.iter().find(|s| s.stage == stage && s.variant == *variant)
    }

    fn draw_header(&self, area: &Area<'_>) -> Result<(), EncodeError> {
        let set = self.set;
        let mut y = 10;
        let mut line = |text: &str, size: u32, color: &RGBColor| -> Result<(), EncodeError> {
            area.draw(&Text::new(text.to_owned(), (20, y), (FONT, size).into_font().color(color)))?;
            y += (f64::from(size) / 1.24) as i32 + 6;
            Ok(())
        };
        line(&format!("Where the exit time goes: {}", set.describe()), TITLE, &BLACK)?;
        let gray = RGBColor(0x55, 0x55, 0x55);
        line(&format!("kernel {}, attach {}", set.kernel, set.attach), SMALL, &gray)?;
        for run in &set.runs {
            let label = run.variant.label();
            let of = if label.is_empty() { String::new() } else { format!("{label}: ") };
            line(&format!("{of}{}", run.describe()), SMALL, &gray)?;
        }
        if set.partial {
            let red = RGBColor(0xc0, 0x10, 0x10);
            line(
                "PARTIAL: the run was interrupted; these figures cover what ran until then",
                TEXT,
                &red,
            )?;
        }
        Ok(())
    }

    fn draw_curves(&self, area: &Area<'_>) -> Result<(), EncodeError> {
        let curves: Vec<(&Series, Vec<(f64, f64)>)> = self
            .set
            .series
            .iter()
            .filter(|s| !s.hist.is_empty())
            .map(|s| (s, nines_curve(s)))
            .collect();
        let points = curves.iter().flat_map(|(_, c)| c.iter());
        // Up to the last level any curve reaches, at least 90%.
        let x_max = points.clone().map(|p| p.0).fold(1.0, f64::max) * 1.01;
        let (low, high) =
            points.fold((f64::MAX, 1.0_f64), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
        let (y_low, y_high) = decades_around(low.min(high), high);

        let mut chart = ChartBuilder::on(area)
            .caption("Latency by percentile, per stage", (FONT, CAPTION))
            .margin_left(20)
            .margin_right(30)
            .margin_bottom(16)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(
                0.0..x_max,
                (y_low..y_high).log_scale().with_key_points(latency_ticks(y_low, y_high)),
            )?;
        chart
            .configure_mesh()
            // Whole nines only: 0%, 90%, 99%, ...
            .x_labels(x_max as usize + 2)
            .x_desc("percentile")
            .y_desc("latency (log scale)")
            .x_label_formatter(&|x| nines_label(*x))
            .y_label_formatter(&|y| tick_label(*y))
            .label_style((FONT, TEXT))
            .axis_desc_style((FONT, TEXT))
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(0xdd, 0xdd, 0xdd))
            .draw()?;

        for (series, points) in &curves {
            let color = self.color(&series.stage);
            let width = if series.stage == "exit" { 3 } else { 2 };
            let style = color.stroke_width(width);
            let variant = self.variant_index(&series.variant);
            let drawn = match variant.checked_sub(1) {
                None => chart.draw_series(LineSeries::new(points.iter().copied(), style))?,
                Some(i) => {
                    let (dash, gap) = DASHES[i % DASHES.len()];
                    chart.draw_series(DashedLineSeries::new(
                        points.iter().copied(),
                        dash,
                        gap,
                        style,
                    ))?
                }
            };
            // One legend entry per stage: its first variant's curve. Counts tell why a curve ends
            // early (fewer exits pass through its stage); with several variants they differ.
            if variant == 0 {
                let label = match self.variants.len() {
                    1 => format!("{} ({} exits)", series.stage, series.hist.len()),
                    _ => series.stage.clone(),
                };
                drawn.label(label).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(width))
                });
            }
        }
        if self.variants.len() > 1 {
            for (i, variant) in self.variants.iter().enumerate() {
                let style = RGBColor(0x44, 0x44, 0x44).stroke_width(2);
                let entry = chart.draw_series(std::iter::empty::<PathElement<(f64, f64)>>())?;
                entry.label(variant.label()).legend(move |(x, y)| match i.checked_sub(1) {
                    None => PathElement::new(vec![(x, y), (x + 24, y)], style).into_dyn(),
                    Some(i) => {
                        let (dash, gap) = DASHES[i % DASHES.len()];
                        DashedPathElement::new(vec![(x, y), (x + 24, y)], dash, gap, style)
                            .into_dyn()
                    }
                });
            }
        }
        chart
            .configure_series_labels()
            // Curves rise to the right: the lower right is where they are not.
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, TEXT))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0xbb, 0xbb, 0xbb))
            .draw()?;
        Ok(())
    }

    fn draw_shares(&self, area: &Area<'_>) -> Result<(), EncodeError> {
        let parts = self.parts();
        let rows = parts.len() as i32;
        let shares: Vec<(usize, usize, f64)> = parts
            .iter()
            .enumerate()
            .flat_map(|(row, &stage)| {
                self.variants.iter().enumerate().map(move |(v, &variant)| {
                    let share = match (self.series(stage, variant), self.exit_total_ns(variant)) {
                        (Some(s), total) if total > 0 => s.sum_ns as f64 / total as f64,
                        _ => 0.0,
                    };
                    (row, v, share * 100.0)
                })
            })
            .collect();
        let x_max = (shares.iter().map(|s| s.2).fold(0.0, f64::max) * 1.12).clamp(5.0, 100.0);
        let label_width =
            parts.iter().map(|s| s.chars().count()).max().unwrap_or(10) as u32 * 8 + 20;

        let order = match self.variants.as_slice() {
            [_] => String::new(),
            several => {
                let labels: Vec<String> = several.iter().map(|v| v.label()).collect();
                format!("; bars from the top: {}", labels.join(", "))
            }
        };
        let caption = format!("Share of the total exit time, by stage in kernel order{order}");
        let mut chart = ChartBuilder::on(area)
            .caption(caption, (FONT, CAPTION))
            .margin_top(10)
            .margin_left(20)
            .margin_right(30)
            .margin_bottom(10)
            .x_label_area_size(45)
            .y_label_area_size(label_width)
            .build_cartesian_2d(0.0..x_max, 0.0..f64::from(rows))?;
        chart
            .configure_mesh()
            .x_desc("% of exit time")
            .x_label_formatter(&|x| format!("{x:.0}%"))
            .y_labels(0)
            .label_style((FONT, TEXT))
            .axis_desc_style((FONT, TEXT))
            .disable_y_mesh()
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
            .draw()?;

        let text = |anchor: HPos, color: &RGBColor| {
            (FONT, TEXT).into_font().color(color).pos(Pos::new(anchor, VPos::Center))
        };
        // Stage r's row spans y in [rows - r - 1, rows - r]: kernel order from the top. A row
        // holds one bar per variant, stacked downwards, with a gap around them.
        let row_span = |row: usize| f64::from(rows - row as i32 - 1);
        for (row, stage) in parts.iter().enumerate() {
            let name = Text::new(stage.to_string(), (-8, 0), text(HPos::Right, &BLACK));
            chart.draw_series([EmptyElement::at((0.0, row_span(row) + 0.5)) + name])?;
        }
        let variants = self.variants.len() as f64;
        for &(row, v, percent) in &shares {
            let color = self.color(parts[row]);
            let top = row_span(row) + 0.9 - 0.8 * v as f64 / variants;
            let bottom = top - 0.8 / variants;
            let fill = if v == 0 { color.filled() } else { color.mix(0.35).filled() };
            chart.draw_series([
                Rectangle::new([(0.0, bottom), (percent, top)], fill),
                Rectangle::new([(0.0, bottom), (percent, top)], color.stroke_width(1)),
            ])?;
            // The share after the bar, or inside its end where the bar leaves no room.
            let label = format!("{percent:.1}%");
            let at = EmptyElement::at((percent, f64::midpoint(top, bottom)));
            let text = if percent > x_max * 0.9 {
                Text::new(label, (-6, 0), text(HPos::Right, if v == 0 { &WHITE } else { &BLACK }))
            } else {
                Text::new(label, (6, 0), text(HPos::Left, &BLACK))
            };
            chart.draw_series([at + text])?;
        }
        Ok(())
    }

    /// The whole exit's total time in a variant: its `exit` series, else the sum of its stages.
    fn exit_total_ns(&self, variant: &Variant) -> u128 {
        match self.series("exit", variant) {
            Some(exit) => exit.sum_ns,
            None => {
                self.set.series.iter().filter(|s| s.variant == *variant).map(|s| s.sum_ns).sum()
            }
        }
    }
}

/// A series' percentile distribution as (nines, ns) points: level q at x = -log10(1 - q). The
/// last level (1, at the maximum) has no finite place; the point before it is at the maximum
/// already.
fn nines_curve(series: &Series) -> Vec<(f64, f64)> {
    series
        .percentiles()
        .iter()
        .filter(|p| p.quantile < 1.0)
        .map(|p| (-(1.0 - p.quantile).log10(), p.value_ns.max(1) as f64))
        .collect()
}

/// `0%`, `90%`, `99%`, `99.9%`, ... at x = 0, 1, 2, 3, ...; nothing between.
fn nines_label(x: f64) -> String {
    let nines = x.round() as i32;
    if (x - f64::from(nines)).abs() > 1e-6 {
        return String::new();
    }
    match nines {
        0 => "0%".to_owned(),
        n => format!("{}%", 100.0 - 100.0 * 10f64.powi(-n)),
    }
}

/// A round latency for an axis: `100ns`, `2µs`, `50ms`.
fn tick_label(ns: f64) -> String {
    let (value, unit) = match ns {
        ns if ns >= 1e9 => (ns / 1e9, "s"),
        ns if ns >= 1e6 => (ns / 1e6, "ms"),
        ns if ns >= 1e3 => (ns / 1e3, "µs"),
        ns => (ns, "ns"),
    };
    format!("{}{unit}", (value * 1e3).round() / 1e3)
}

/// Powers of ten around [low, high], at least one decade apart.
fn decades_around(low: f64, high: f64) -> (f64, f64) {
    let lo = 10f64.powf(low.max(1.0).log10().floor());
    let hi = 10f64.powf(high.max(1.0).log10().ceil());
    (lo, if hi > lo { hi } else { lo * 10.0 })
}

/// 1-2-5 ticks for a few decades, powers of ten for more.
fn latency_ticks(low: f64, high: f64) -> Vec<f64> {
    let decades = (high / low).log10().round() as i32;
    let steps: &[f64] = if decades <= 4 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    (0..=decades)
        .flat_map(|d| steps.iter().map(move |s| low * 10f64.powi(d) * s))
        .filter(|&t| t <= high * 1.0001)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::tests::two_condition_set;

    #[test]
    fn nines_are_labelled_as_percentiles() {
        let labels: Vec<String> = (0..=4).map(|x| nines_label(f64::from(x))).collect();
        assert_eq!(labels, ["0%", "90%", "99%", "99.9%", "99.99%"]);
    }

    #[test]
    fn ticks_are_round() {
        let labels: Vec<String> =
            [100.0, 2_000.0, 50_000.0, 1e6, 1.5e6, 2e9].map(tick_label).to_vec();
        assert_eq!(labels, ["100ns", "2µs", "50µs", "1ms", "1.5ms", "2s"]);
    }

    #[test]
    fn ticks_span_the_decades() {
        assert_eq!(decades_around(850.0, 1_350_000.0), (100.0, 10_000_000.0));
        assert_eq!(decades_around(1_000.0, 1_000.0), (1_000.0, 10_000.0));
        let ticks = latency_ticks(100.0, 10_000.0);
        assert_eq!(ticks, [100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0]);
        assert_eq!(latency_ticks(1.0, 1e9).len(), 10);
    }

    #[test]
    fn curves_run_from_the_minimum_to_the_maximum() {
        let set = two_condition_set();
        let s = &set.series[0];
        let curve = nines_curve(s);
        assert_eq!(curve[0], (0.0, s.hist.highest_equivalent(s.hist.min()) as f64));
        assert_eq!(curve.last().unwrap().1, s.hist.max() as f64);
        assert!(curve.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        // 5000 values resolve the tail to about 99.98%: between 3 and 4 nines.
        let x_last = curve.last().unwrap().0;
        assert!((3.0..4.5).contains(&x_last), "last x {x_last}");
    }

    #[test]
    fn the_figure_names_every_stage_and_condition() {
        let mut set = two_condition_set();
        set.partial = true;
        let svg = String::from_utf8(encode(&set).unwrap()).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for text in [
            "exit_signals",
            "exit_files",
            "exit_mm",
            "condition=on",
            "condition=off",
            "99.9%",
            "PARTIAL",
        ] {
            assert!(svg.contains(text), "the figure does not show {text}");
        }
        assert!(svg.contains("bars from the top: condition=on, condition=off"));
        // Each stage's two bars are labelled with its share in each condition.
        for condition in ["on", "off"] {
            let of: Vec<&Series> = set
                .series
                .iter()
                .filter(|s| s.variant.condition.as_deref() == Some(condition))
                .collect();
            let share = of[2].sum_ns as f64 / of[0].sum_ns as f64 * 100.0;
            let label = format!("{share:.1}%");
            assert!(svg.lines().any(|l| l.trim() == label), "no bar label {label} ({condition})");
        }
    }
}
