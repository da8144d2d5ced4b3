//! Kernel stacks for flame graphs: folded stacks (`.folded`, one `root;frame;...;frame weight`
//! line per stack, as flamegraph.pl and inferno read them) and a flame graph drawn from them
//! (`.flame.svg`, by inferno).
//!
//! Two roots, one unit: `on-cpu;STAGE;do_exit;...` weighs each sampled stack by the on-CPU time
//! it stands for (its share of its stage's samples times the stage's on-CPU time), and
//! `off-cpu;STAGE;do_exit;...` each stack where exits blocked by the blocked time it stands for
//! (the stage's blocked time shared out by the walked blocks' time). Both in microseconds, so widths compare across the two roots. A stack the
//! kernel could not unwind down to `do_exit` goes under an `[unknown]` frame, as flame graphs
//! name such gaps; one that stops in a probe's trampoline (a kretprobe's: before 5.13 the
//! unwinder cannot get past it) under `[probe-trampoline]`: time in the probes' own machinery,
//! not in the exit's code.

use std::fmt::Write as _;

use super::{EncodeError, ExportSet, StackKind, WeightedStack};
use crate::analysis::on_cpu::EXIT_FRAME;

/// The unit of the weights, as the flame graph names it.
const UNIT: &str = "µs";

/// One line per stack: `[variant;]root;stage;outermost;...;innermost weight`.
pub fn encode(set: &ExportSet) -> Vec<u8> {
    let mut out = String::new();
    for line in lines(&set.stacks) {
        out.push_str(&line);
        out.push('\n');
    }
    out.into_bytes()
}

/// A flame graph of the folded stacks (a picture that says there is nothing to draw when no
/// stack was sampled or blocked).
pub fn encode_svg(set: &ExportSet) -> Result<Vec<u8>, EncodeError> {
    let lines = lines(&set.stacks);
    let mut options = inferno::flamegraph::Options::default();
    "exitprof: where exits compute and block".clone_into(&mut options.title);
    options.subtitle = Some(format!(
        "kernel {}; widths in {UNIT}: on-cpu estimated from samples, off-cpu from the blocks \
         walked",
        set.kernel
    ));
    UNIT.clone_into(&mut options.count_name);
    draw(&mut options, &lines)
}

/// Draws folded lines (with one weight, or two for a differential flame graph) as inferno's
/// flame graph; nothing to draw is inferno's picture that says so, not a failed export.
pub(crate) fn draw(
    options: &mut inferno::flamegraph::Options<'_>,
    lines: &[String],
) -> Result<Vec<u8>, EncodeError> {
    let mut svg = Vec::new();
    let drawn =
        inferno::flamegraph::from_lines(options, lines.iter().map(String::as_str), &mut svg);
    match drawn {
        Ok(()) => Ok(svg),
        // inferno has drawn its "no valid input" picture.
        Err(_) if lines.is_empty() => Ok(svg),
        Err(e) => Err(e.into()),
    }
}

fn lines(stacks: &[WeightedStack]) -> Vec<String> {
    stacks
        .iter()
        .filter(|s| s.us > 0)
        .map(|s| {
            let mut line = String::new();
            let variant = s.variant.label();
            if !variant.is_empty() {
                let _ = write!(line, "{};", frame(&variant));
            }
            let _ = write!(line, "{} {}", folded_stack(s.kind, &s.stage, &s.frames), s.us);
            line
        })
        .collect()
}

/// A stack as the frames of a folded line, without its weight: `root;stage;do_exit;...;
/// innermost`, or with the frame that stands for what was not unwound down to `do_exit`.
pub(crate) fn folded_stack(kind: StackKind, stage: &str, frames: &[String]) -> String {
    let root = match kind {
        StackKind::OnCpu => "on-cpu",
        StackKind::OffCpu => "off-cpu",
    };
    let mut line = format!("{root};{}", frame(stage));
    if let Some(gap) = unwound_short(frames) {
        let _ = write!(line, ";{gap}");
    }
    for f in frames.iter().rev() {
        let _ = write!(line, ";{}", frame(f));
    }
    line
}

/// The frame that stands for the rest of a stack the kernel did not unwind down to do_exit
/// (frames innermost first): a probe's trampoline it stopped in, or an unknown gap.
fn unwound_short(frames: &[String]) -> Option<&'static str> {
    match frames.last() {
        Some(f) if f == EXIT_FRAME => None,
        Some(f) if f.contains("trampoline") => Some(PROBE_TRAMPOLINE),
        _ => Some("[unknown]"),
    }
}

/// The frame under which stacks that stop in a probe's trampoline go.
const PROBE_TRAMPOLINE: &str = "[probe-trampoline]";

/// A name as one frame of a folded line: `;` separates frames and a space the weight.
fn frame(name: &str) -> String {
    name.replace(';', ":").replace(' ', "_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::{Variant, tests::two_condition_set};

    fn stack(kind: StackKind, stage: &str, frames: &[&str], us: u64) -> WeightedStack {
        WeightedStack {
            variant: Variant::default(),
            kind,
            stage: stage.to_owned(),
            frames: frames.iter().map(|&f| f.to_owned()).collect(),
            us,
        }
    }

    fn set_with(stacks: Vec<WeightedStack>) -> ExportSet {
        ExportSet { stacks, ..two_condition_set() }
    }

    #[test]
    fn stacks_fold_outermost_first_under_their_root_and_stage_unwound_or_not() {
        let mut on =
            stack(StackKind::OnCpu, "exit_mm…exit_thread", &["zap_pte_range", "do_exit"], 812);
        on.variant =
            Variant { condition: Some("on".to_owned()), row: Some("stagger=2".to_owned()) };
        let set = set_with(vec![
            on,
            stack(
                StackKind::OffCpu,
                "exit_mm",
                &["rwsem_down_read_slowpath", "down_read", "do_exit"],
                9,
            ),
            stack(StackKind::OnCpu, "a stage; odd", &["f"], 0),
            stack(StackKind::OnCpu, "exit_mm", &[], 3),
            stack(StackKind::OnCpu, "exit_mm", &["arch_rethook_trampoline"], 2),
        ]);
        let text = String::from_utf8(encode(&set)).unwrap();
        assert_eq!(
            text,
            "condition=on_row=stagger=2;on-cpu;exit_mm…exit_thread;do_exit;zap_pte_range 812\n\
             off-cpu;exit_mm;do_exit;down_read;rwsem_down_read_slowpath 9\n\
             on-cpu;exit_mm;[unknown] 3\n\
             on-cpu;exit_mm;[probe-trampoline];arch_rethook_trampoline 2\n"
        );
    }

    #[test]
    fn the_flame_graph_draws_every_frame() {
        let set = set_with(vec![
            stack(StackKind::OnCpu, "exit_mm", &["zap_pte_range", "unmap_vmas", "do_exit"], 800),
            stack(StackKind::OffCpu, "exit_mm", &["down_read", "do_exit"], 200),
        ]);
        let svg = String::from_utf8(encode_svg(&set).unwrap()).unwrap();
        for name in ["on-cpu", "off-cpu", "zap_pte_range", "unmap_vmas", "down_read", "µs"] {
            assert!(svg.contains(name), "{name} missing from the flame graph");
        }
        // Nothing to draw is a picture that says so, not a failed export.
        let empty = String::from_utf8(encode_svg(&set_with(Vec::new())).unwrap()).unwrap();
        assert!(empty.contains("<svg") && empty.contains("No valid input"), "{empty}");
    }
}
