//! The differential flame graph of a diff (`--export NAME.flame.svg`): where B's exits computed
//! and blocked, each frame as wide as B's time per exit there and coloured by its change
//! against A — red where B spends more, blue where it spends less — as Brendan Gregg's
//! differential flame graphs are, drawn by inferno from the two sides' folded stacks.
//!
//! Stacks are folded under the diff's rows (not each side's own stages), so that sides that cut
//! the exit differently still meet frame for frame. Weights are nanoseconds per exit, the means
//! of each side's runs: sides of unlike exit counts compare as they are.

use crate::{
    diff::document::{DiffDocument, StackChange},
    export::{
        EncodeError, StackKind,
        folded::{draw, folded_stack},
    },
};

/// Draws the differential flame graph of `doc`.
pub fn encode(doc: &DiffDocument) -> Result<Vec<u8>, EncodeError> {
    let lines = lines(doc);
    let mut options = inferno::flamegraph::Options::default();
    "exitprof diff: where exits compute and block, B against A".clone_into(&mut options.title);
    options.subtitle = Some(
        "widths: B's ns per exit; red: more time per exit in B than in A, blue: less (a frame's \
         own change; stacks only A has are not drawn)"
            .to_owned(),
    );
    "ns per exit".clone_into(&mut options.count_name);
    draw(&mut options, &lines)
}

/// `root;row;do_exit;...;innermost A B` for each stack either side has, weights rounded to the
/// nanosecond per exit.
fn lines(doc: &DiffDocument) -> Vec<String> {
    let kinds = [(StackKind::OnCpu, &doc.every_on_cpu), (StackKind::OffCpu, &doc.every_blocked)];
    let mut lines: Vec<String> = kinds
        .into_iter()
        .flat_map(|(kind, changes)| changes.iter().map(move |c| (kind, c)))
        .filter_map(|(kind, c): (StackKind, &StackChange)| {
            let (a, b) = (c.a_ns_per_exit.round() as u64, c.b_ns_per_exit.round() as u64);
            (a > 0 || b > 0).then(|| format!("{} {a} {b}", folded_stack(kind, &c.row, &c.stack)))
        })
        .collect();
    lines.sort();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{
        document::DiffDocument,
        input::tests::{document, view},
    };

    fn run(unmap_ns: f64, lock_ns: f64) -> (String, crate::document::run::RunDocument) {
        let mut doc = document(10, &[("exit_mm", &["exit_mm"], 1_000.0 + unmap_ns / 10.0)]);
        doc["stages"][1]["on_cpu_in"] = serde_json::json!([
            {"stack": ["unmap_page_range", "exit_mmap", "do_exit"], "samples": 1, "share": 0.5,
             "est_ns": unmap_ns},
            {"stack": ["free_pgtables", "exit_mmap", "do_exit"], "samples": 1, "share": 0.5,
             "est_ns": 1_000.0},
        ]);
        doc["blocked_in"] = serde_json::json!([
            {"stage": "exit_mm", "stack": ["schedule", "down_read", "do_exit"], "blocks": 1,
             "walked_ns": 1, "est_ns": lock_ns, "share": 1.0},
        ]);
        ("run.json".to_owned(), view(&doc))
    }

    #[test]
    fn both_sides_fold_under_the_rows_with_their_time_per_exit() {
        let doc = DiffDocument::judged(&[run(1_000.0, 500.0)], &[run(8_000.0, 0.0)]);
        assert_eq!(
            lines(&doc),
            [
                "off-cpu;exit_mm;do_exit;down_read;schedule 50 0",
                "on-cpu;exit_mm;do_exit;exit_mmap;free_pgtables 100 100",
                "on-cpu;exit_mm;do_exit;exit_mmap;unmap_page_range 100 800",
            ]
        );
        let svg = String::from_utf8(encode(&doc).unwrap()).unwrap();
        // The grown frame is drawn red; the one that did not change, white.
        let fill = |name: &str| {
            let at = svg.find(&format!("<title>{name} (")).expect(name);
            let rest = &svg[at..];
            let fill = rest.find("fill=\"").unwrap() + 6;
            rest[fill..fill + rest[fill..].find('"').unwrap()].to_owned()
        };
        assert!(fill("unmap_page_range").starts_with("rgb(255,"), "{}", fill("unmap_page_range"));
        assert_eq!(fill("free_pgtables"), "rgb(250,250,250)");
        assert!(svg.contains("B against A"));
    }
}
