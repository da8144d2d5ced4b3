//! Stage assembly: turns one exit's probe hits into stages that sum exactly to the whole exit.
//!
//! Each interval between two consecutive hits belongs to exactly one stage: the innermost traced
//! function open at that time, or, between functions, the gap named after the kernel work that
//! lies there on the running kernel (from [`ExitPath`]).

use std::collections::{HashMap, HashSet};

use exitprof_common::point::{ExitFn, Point};

use crate::{
    exits::Exit,
    kernel::{exit_path::ExitPath, function_slot, marker_name},
    plan::Plan,
};

/// One stage's share of one exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Index into [`StageNamer::stages`].
    pub stage: usize,
    pub ns: u64,
    pub off_cpu_ns: u64,
}

/// A stage: a traced function (its own time, without traced callees) or a gap between probes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Stage {
    pub name: String,
    /// What the kernel does in this stage, in order (for a gap: everything between its bounds).
    pub covers: Vec<String>,
    /// Positions of its bounds on the exit path, for ordering stages as the kernel runs them.
    #[serde(skip)]
    pub order: (usize, usize),
}

/// Names and orders stages for one probe plan; stage indices are stable for its lifetime.
pub struct StageNamer {
    path: ExitPath,
    probed: HashSet<Point>,
    symbols: HashMap<ExitFn, String>,
    stages: Vec<Stage>,
    by_key: HashMap<(Point, Point, Option<ExitFn>), usize>,
    by_name: HashMap<String, usize>,
}

impl StageNamer {
    pub fn new(plan: &Plan) -> Self {
        let mut probed = HashSet::new();
        let mut symbols = HashMap::new();
        for planned in &plan.points {
            probed.extend(planned.site.points());
            if let crate::plan::SiteId::Function(f) = planned.site {
                symbols.insert(f, planned.target.clone());
            }
        }
        Self {
            path: plan.exit_path.clone(),
            probed,
            symbols,
            stages: Vec::new(),
            by_key: HashMap::new(),
            by_name: HashMap::new(),
        }
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// Splits an exit into stage spans, in firing order. Their durations sum to
    /// [`Exit::duration_ns`] exactly.
    pub fn spans(&mut self, exit: &Exit) -> Vec<Span> {
        let mut open: Vec<ExitFn> = Vec::new();
        let mut spans = Vec::with_capacity(exit.hits.len());
        for pair in exit.hits.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            match a.point {
                Point::Enter(f) => open.push(f),
                Point::Return(f) => {
                    // Unwind to the matching entry; a return without one closes nothing.
                    if let Some(depth) = open.iter().rposition(|&g| g == f) {
                        open.truncate(depth);
                    }
                }
                Point::Marker(_) => {}
            }
            let stage = self.stage(a.point, b.point, open.last().copied());
            spans.push(Span {
                stage,
                ns: b.ts_ns.saturating_sub(a.ts_ns),
                off_cpu_ns: b.off_cpu_ns.saturating_sub(a.off_cpu_ns),
            });
        }
        spans
    }

    fn stage(&mut self, a: Point, b: Point, inside: Option<ExitFn>) -> usize {
        let key = (a, b, inside);
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        let stage = match inside {
            Some(f) => Stage {
                name: self.symbol(f),
                covers: vec![self.symbol(f)],
                order: (self.position(Point::Enter(f)), self.position(Point::Return(f))),
            },
            None => self.gap(a, b),
        };
        let i = match self.by_name.get(&stage.name) {
            Some(&i) => i,
            None => {
                self.stages.push(stage.clone());
                self.by_name.insert(stage.name, self.stages.len() - 1);
                self.stages.len() - 1
            }
        };
        self.by_key.insert(key, i);
        i
    }

    fn gap(&self, a: Point, b: Point) -> Stage {
        let order = (self.position(a), self.position(b));
        let between = self.path.between(a, b, |p| self.probed.contains(&p));
        let covers: Vec<String> = match between {
            Some(names) => names
                .into_iter()
                .map(|n| match ExitFn::ALL.iter().find(|&&f| function_slot(f) == n) {
                    Some(&f) => self.symbol(f),
                    None => n.to_owned(),
                })
                .collect(),
            None => Vec::new(),
        };
        let name = match covers.as_slice() {
            [] => format!("{}→{}", self.point_name(a), self.point_name(b)),
            [one] => one.clone(),
            [first, second] => format!("{first}+{second}"),
            [first, .., last] => format!("{first}…{last}"),
        };
        Stage { name, covers, order }
    }

    fn position(&self, p: Point) -> usize {
        self.path.position(p).unwrap_or(usize::MAX)
    }

    /// The symbol a function slot resolved to (its slot name when it is not probed).
    fn symbol(&self, f: ExitFn) -> String {
        self.symbols.get(&f).cloned().unwrap_or_else(|| function_slot(f).to_owned())
    }

    fn point_name(&self, p: Point) -> String {
        match p {
            Point::Marker(m) => marker_name(m).to_owned(),
            Point::Enter(f) | Point::Return(f) => self.symbol(f),
        }
    }
}
