//! The progress line on a terminal: exits so far, the current rate, the expected total when it
//! is known. Nothing at all when stderr is not a terminal or the output is JSON.

use std::{
    io::IsTerminal as _,
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::fmt_rate;

/// How often the line is redrawn.
pub const INTERVAL: Duration = Duration::from_millis(250);

pub struct Progress {
    bar: Option<ProgressBar>,
    last: (Instant, u64),
}

impl Progress {
    /// A progress line on stderr, if stderr is a terminal and `wanted`.
    pub fn new(expected: Option<u64>, wanted: bool) -> Self {
        let bar = (wanted && std::io::stderr().is_terminal()).then(|| {
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
        Self { bar, last: (Instant::now(), 0) }
    }

    pub fn is_shown(&self) -> bool {
        self.bar.is_some()
    }

    /// Shows `exits` so far and the rate since the last update.
    pub fn update(&mut self, exits: u64) {
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
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
