//! What every command of the presentation layer does with its outcome: check its exports can
//! be written before it runs, print its report, write its exports, and end as a signal would
//! have when one cut it short.

use std::io::Write as _;

use anyhow::Context as _;

use exitprof_core::export::{self, ExportSet, ExportTarget};

/// Checks, before anything runs, that every export can be written: a run must not be lost to a
/// file it cannot write at the end.
pub(super) fn check_exports(exports: &[ExportTarget]) -> anyhow::Result<()> {
    for target in exports {
        export::check_writable(&target.path)?;
    }
    Ok(())
}

/// Prints the report, then writes the exports (an interrupted run's too: they say it is
/// partial), then ends the process as the signal would have, when one cut the run short.
pub(super) fn publish(
    text: &str,
    exports: &[ExportTarget],
    set: impl FnOnce() -> ExportSet,
    interrupted: Option<i32>,
) -> anyhow::Result<()> {
    print_report(text)?;
    let exported = if exports.is_empty() {
        Ok(())
    } else {
        let set = set();
        write_exports(exports, |target| export::write(&set, target))
    };
    if let Some(signal) = interrupted {
        // The shell convention for death by a signal, after a complete (partial) report.
        std::process::exit(128 + signal);
    }
    exported
}

/// Prints the report on standard output.
pub(super) fn print_report(text: &str) -> anyhow::Result<()> {
    // A reader that went away (`| head`) is not an error worth a report of its own.
    if let Err(e) = std::io::stdout().write_all(text.as_bytes())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e).context("writing the report");
    }
    Ok(())
}

/// Writes every export, each on its own: one that fails is reported and the others are written.
pub(super) fn write_exports(
    exports: &[ExportTarget],
    write: impl Fn(&ExportTarget) -> Result<(), export::ExportError>,
) -> anyhow::Result<()> {
    let mut failed = 0;
    for target in exports {
        match write(target) {
            Ok(()) => log::info!("wrote {} ({})", target.path.display(), target.format),
            Err(e) => {
                eprintln!("exitprof: error: {:#}", anyhow::Error::new(e));
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} exports were not written", exports.len());
    }
    Ok(())
}
