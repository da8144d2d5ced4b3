//! A namespace teardown shown with the exit that set it off: what `--slower-than` prints when
//! the teardown of a slow exit's namespace is joined to it (after the exit was printed: the
//! teardown runs later, in a kworker), and what `report --exit` and `--slowest` show with each
//! exit of a record.

use serde::Serialize;

use crate::{
    analysis::{
        on_cpu::HotPath,
        teardown::{Joined, NamedTeardown, TeardownBlock, TeardownKind, Teardowns},
    },
    kernel::kallsyms::Kallsyms,
};

/// Stacks its run blocked in, listed with one teardown.
const BLOCKS_LISTED: usize = 3;

/// One namespace's teardown, joined to its exit.
#[derive(Clone, Debug, Serialize)]
pub struct ExitTeardown {
    /// `net` or `user`, and the work function that tore it down.
    pub kind: TeardownKind,
    pub function: &'static str,
    /// The namespace, its exit (`pid`), its wait from the exit's end to the run's start, its
    /// share of the run and the run.
    #[serde(flatten)]
    pub named: NamedTeardown,
    /// Its exit's first hit (the kernel's monotonic clock; with `pid`, names the exit, as the
    /// exit's own `start_ns`) and how long the exit took.
    pub exit_start_ns: u64,
    pub exit_ns: u64,
    /// Of its share: runnable (waiting for a CPU).
    pub runq_ns: u64,
    /// When its run ended (wall clock, seconds since the Unix epoch), where known.
    pub done_at: Option<f64>,
    /// The stacks its run blocked in, longest first, their time in the proportion of its share
    /// (`est_ns`, `share` of its run's time); and the chain of calls most of the run's samples
    /// went through.
    pub blocked_in: Vec<TeardownBlock>,
    pub computes_mostly_in: Option<HotPath>,
}

impl ExitTeardown {
    /// `joined`, with where its run spent its time (from `teardowns`, named with `symbols`);
    /// `wall_at_zero`: the wall clock at the kernel's monotonic 0, where known.
    pub fn of(
        joined: &Joined,
        teardowns: &Teardowns,
        symbols: &Kallsyms,
        wall_at_zero: Option<f64>,
    ) -> Self {
        let mut where_ = teardowns.where_one(joined, symbols);
        where_.blocks.truncate(BLOCKS_LISTED);
        let torn = &joined.torn;
        Self {
            kind: torn.kind,
            function: torn.kind.function(),
            named: NamedTeardown::of(joined),
            exit_start_ns: joined.exit.start_ns,
            exit_ns: joined.exit.end_ns.saturating_sub(joined.exit.start_ns),
            runq_ns: torn.runq_ns,
            done_at: wall_at_zero.map(|zero| zero + torn.done_ns() as f64 / 1e9),
            blocked_in: where_.blocks,
            computes_mostly_in: where_.hot_path,
        }
    }

    /// Whether it is the teardown of the exit of thread `pid` that started at `start_ns`.
    pub fn is_of(&self, pid: u32, start_ns: u64) -> bool {
        self.named.pid == pid && self.exit_start_ns == start_ns
    }
}
