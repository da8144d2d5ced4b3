//! The diff as a figure (`--export diff.svg`): one panel per row, the whole exit first, each
//! with side A's and side B's time per exit as bars side by side, and on B's bar a whisker: A's
//! time plus the change's interval, where the runs give one. Each panel has its own scale, so
//! that small stages are as readable as the whole exit.

use plotters::{
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

use crate::{
    diff::{
        document::{DiffDocument, RowDoc},
        verdict::{cut_note, percent},
    },
    document::{fmt_ns, signed},
    export::{
        EncodeError,
        svg::{FONT, SMALL, TEXT, TITLE, WIDTH},
    },
    report::diff::describe_side,
};

const PANEL_HEIGHT: u32 = 120;
const LINE_HEIGHT: u32 = 22;

const A_COLOR: RGBColor = RGBColor(0x4e, 0x79, 0xa7);
/// B's bar where its change is beyond noise, and where it is not (or cannot be told).
const B_BEYOND: RGBColor = RGBColor(0xe1, 0x57, 0x59);
const B_WITHIN: RGBColor = RGBColor(0xba, 0xb0, 0xac);
const GRAY: RGBColor = RGBColor(0x55, 0x55, 0x55);

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

pub fn encode(doc: &DiffDocument) -> Result<Vec<u8>, EncodeError> {
    let header = header_lines(doc);
    let header_height = 20 + LINE_HEIGHT * (header.len() as u32 + 1);
    let height = header_height + PANEL_HEIGHT * doc.rows.len() as u32 + 10;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, rest) = root.split_vertically(header_height);
        draw_header(&top, &header)?;
        let (panels, _) = rest.split_vertically(PANEL_HEIGHT * doc.rows.len() as u32);
        for (panel, row) in panels.split_evenly((doc.rows.len(), 1)).iter().zip(&doc.rows) {
            draw_row(panel, row)?;
        }
        root.present()?;
    }
    Ok(svg.into_bytes())
}

fn header_lines(doc: &DiffDocument) -> Vec<String> {
    let whisker = if doc.noise.method == "interval" {
        format!(
            "B's whisker: A's time plus the change's interval (Welch's t over the runs, {:.0}% for \
             all rows together)",
            doc.noise.confidence * 100.0
        )
    } else {
        format!(
            "no interval with fewer than 3 runs a side: a change is beyond noise only past {}x \
             and {:.0}% of the whole exit",
            doc.noise.factor,
            doc.noise.floor * 100.0
        )
    };
    let mut lines = vec![
        format!("A: {}", describe_side(&doc.a)),
        format!("B: {}", describe_side(&doc.b)),
        whisker,
    ];
    if !doc.same_cut {
        lines.push(cut_note(doc));
    }
    lines
}

fn draw_header(area: &Area<'_>, lines: &[String]) -> Result<(), EncodeError> {
    let title = "Time per exit, side A against side B, row by row";
    area.draw(&Text::new(title, (20, 10), (FONT, TITLE).into_font()))?;
    for (i, line) in lines.iter().enumerate() {
        let y = 10 + (LINE_HEIGHT * (i as u32 + 1)) as i32 + 6;
        area.draw(&Text::new(line.as_str(), (20, y), (FONT, SMALL).into_font().color(&GRAY)))?;
    }
    Ok(())
}

fn draw_row(area: &Area<'_>, row: &RowDoc) -> Result<(), EncodeError> {
    let c = &row.ns_per_exit;
    let whisker = c.interval.map(|i| ((c.a + i.low).max(0.0), c.a + i.high));
    let widest = [c.a, c.b, whisker.map_or(0.0, |w| w.1)].into_iter().fold(1.0, f64::max);
    let judged = match c.beyond_noise {
        Some(true) => "beyond noise",
        Some(false) => "within noise",
        None => "cannot be told from noise",
    };
    let caption =
        format!("{}: {}{} per exit, {judged}", row.group.name, signed(c.delta), percent(c));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, TEXT))
        .margin_left(20)
        .margin_right(30)
        .x_label_area_size(22)
        .y_label_area_size(30)
        .build_cartesian_2d(0.0..widest * 1.2, 0.0..2.0)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(6)
        .x_label_formatter(&|x| fmt_ns(*x))
        .label_style((FONT, SMALL))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
        .draw()?;
    let b_color = if c.is_beyond_noise() { B_BEYOND } else { B_WITHIN };
    let text =
        |anchor: HPos| (FONT, SMALL).into_font().color(&BLACK).pos(Pos::new(anchor, VPos::Center));
    // A's bar on top, B's below; each value after its bar (B's after its whisker).
    let b_label_at = whisker.map_or(c.b, |w| w.1.max(c.b));
    for (name, value, label_at, y, color) in
        [("A", c.a, c.a, 1.5, A_COLOR), ("B", c.b, b_label_at, 0.5, b_color)]
    {
        chart
            .draw_series([Rectangle::new([(0.0, y - 0.32), (value, y + 0.32)], color.filled())])?;
        chart.draw_series([
            EmptyElement::at((0.0, y)) + Text::new(name.to_owned(), (-8, 0), text(HPos::Right)),
            EmptyElement::at((label_at, y)) + Text::new(fmt_ns(value), (6, 0), text(HPos::Left)),
        ])?;
    }
    if let Some((low, high)) = whisker {
        let ink = BLACK.stroke_width(2);
        chart.draw_series([
            PathElement::new(vec![(low, 0.5), (high, 0.5)], ink),
            PathElement::new(vec![(low, 0.3), (low, 0.7)], ink),
            PathElement::new(vec![(high, 0.3), (high, 0.7)], ink),
        ])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{
        document::DiffDocument,
        input::tests::{document, view},
    };

    #[test]
    fn the_figure_shows_every_row_and_both_sides() {
        let run = |mm: f64| {
            (
                "run.json".to_owned(),
                view(&document(100, &[("a…b", &["a", "b"], 900.0), ("exit_mm", &["exit_mm"], mm)])),
            )
        };
        let a = [run(1_000.0), run(1_100.0), run(900.0)];
        let b = [run(8_000.0), run(8_100.0), run(7_900.0)];
        let svg = String::from_utf8(encode(&DiffDocument::judged(&a, &b)).unwrap()).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in ["exit_mm: +7.0µs (+700%) per exit, beyond noise", "a…b", "whisker: A"] {
            assert!(svg.contains(text), "the figure does not show {text}");
        }
    }
}
