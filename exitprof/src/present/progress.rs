//! The progress line on a terminal: exits so far, the current rate, the expected total when it
//! is known. Nothing at all when stderr is not a terminal or the output is JSON.

use std::{io::IsTerminal as _, time::Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use exitprof_core::{
    analysis::{exit_teardown::ExitTeardown, exit_timeline::ExitTimeline},
    document::fmt_rate,
    report::exit_timeline,
};

use exitprof_engine::run::collect::Progress;

/// What a live run shows while it collects (a run of a compare shows nothing).
pub struct ProgressLine {
    wanted: bool,
    bar: Option<ProgressBar>,
    last: (Instant, u64),
    /// Exits shown as they end (`--slower-than`) go out as JSON lines.
    exits_as_json: bool,
}

impl ProgressLine {
    /// A progress line on stderr once the run starts, if stderr is a terminal and `wanted`;
    /// exits kept whole are printed on stdout, one JSON line each with `exits_as_json`.
    pub fn new(wanted: bool, exits_as_json: bool) -> Self {
        Self { wanted, bar: None, last: (Instant::now(), 0), exits_as_json }
    }
}

/// A JSON line of an exit shown as it ends.
#[derive(serde::Serialize)]
struct ExitLine<'a> {
    event: &'static str,
    #[serde(flatten)]
    exit: &'a ExitTimeline,
}

impl Progress for ProgressLine {
    fn start(&mut self, expected: Option<u64>) {
        self.bar = (self.wanted && std::io::stderr().is_terminal()).then(|| {
            let (bar, template) = match expected {
                Some(n) => {
                    (ProgressBar::new(n), "{spinner} {pos}/{len} exits {wide_bar} {msg} {elapsed}")
                }
                None => (ProgressBar::no_length(), "{spinner} {pos} exits {msg} {elapsed}"),
            };
            let style = ProgressStyle::with_template(template).expect("a valid progress template");
            bar.set_style(style.progress_chars("=> "));
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar
        });
        self.last = (Instant::now(), 0);
    }

    fn is_shown(&self) -> bool {
        self.bar.is_some()
    }

    /// Shows `exits` so far and the rate since the last update.
    fn update(&mut self, exits: u64) {
        let Some(bar) = &self.bar else { return };
        let now = Instant::now();
        let (then, before) = self.last;
        let secs = now.duration_since(then).as_secs_f64();
        if secs > 0.0 {
            let rate = exits.saturating_sub(before) as f64 / secs;
            bar.set_message(format!("{} exits/s", fmt_rate(rate)));
        }
        bar.set_position(exits);
        self.last = (now, exits);
    }

    /// Removes the line before the report is printed.
    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// Prints a slow exit on stdout as it ends, above the progress line.
    fn exit(&mut self, exit: &ExitTimeline) {
        let text = if self.exits_as_json {
            json_line(&ExitLine { event: "slow_exit", exit })
        } else {
            format!("{}\n", exit_timeline::summary(exit))
        };
        self.print(&text);
    }

    /// Prints a namespace teardown joined to an exit on stdout, above the progress line.
    fn teardown(&mut self, teardown: &ExitTeardown, exit_shown: bool) {
        let text = if self.exits_as_json {
            json_line(&TeardownLine { event: "slow_exit_teardown", exit_shown, teardown })
        } else {
            format!("{}\n", exit_timeline::teardown(teardown, exit_shown))
        };
        self.print(&text);
    }
}

/// A JSON line of a teardown shown when it is joined to its exit.
#[derive(serde::Serialize)]
struct TeardownLine<'a> {
    event: &'static str,
    /// Its exit was shown before (else the teardown is shown for its own length).
    exit_shown: bool,
    #[serde(flatten)]
    teardown: &'a ExitTeardown,
}

fn json_line(line: &impl serde::Serialize) -> String {
    serde_json::to_string(line).map(|l| format!("{l}\n")).unwrap_or_default()
}

impl ProgressLine {
    /// Prints `text` on stdout, above the progress line.
    fn print(&self, text: &str) {
        let print = || {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
        };
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }
}
