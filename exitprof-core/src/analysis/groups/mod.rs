//! Whose exits: exits split by workload — the cgroup they ran in (a container, a pod, a
//! service, named from the cgroup's path) or their process's name — into a bounded number of
//! groups, each with its whole exit's latencies and its stages' series.

pub mod cgroup_paths;
pub mod naming;

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use self::cgroup_paths::CgroupPaths;
use super::{
    fixed_buckets::FixedBuckets,
    histogram::Latency,
    profile::Profile,
    records::{Exit, ExitKind, TaskName},
    stages::Span,
    teardown::{Joined, TeardownBuckets, TeardownKind},
};

/// What exits are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// The cgroup (v2) the exiting task was in, named as its container, pod or service.
    Cgroup,
    /// The name (comm) of the exiting task's process.
    Comm,
}

/// How exits are grouped, and the bounds on the groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOptions {
    pub by: GroupBy,
    /// Groups kept apart at most; the exits of any other go to [`OTHER`].
    pub max_groups: usize,
    /// A group with no exit for this long is dropped, its series with it (`serve`).
    #[serde(skip)]
    pub ttl: Option<Duration>,
}

/// The group of the exits of groups past the bound.
pub const OTHER: &str = "other";

/// What marks a workload's own name that would read as [`OTHER`].
const ESCAPE: char = '\\';

/// A workload's name as its group's: a process or cgroup may be named `other` too (any name
/// is a process's to take), so a name that is [`OTHER`], or that begins with [`ESCAPE`], gets
/// [`ESCAPE`] before it. No workload's group is then named `other`, and no two names one.
fn apart_from_other(name: String) -> String {
    if name == OTHER || name.starts_with(ESCAPE) { format!("{ESCAPE}{name}") } else { name }
}

/// The groups of the exits seen.
pub struct Groups {
    options: GroupOptions,
    /// Whether each group keeps an HdrHistogram of its whole exit, for a run's table of the
    /// groups' percentiles; serve's series are the fixed buckets alone.
    percentiles: bool,
    by_name: HashMap<String, Group>,
    /// The paths of the cgroups exits ran in, by id.
    pub cgroup_paths: CgroupPaths,
    /// Exits that went to [`OTHER`] because `max_groups` groups were there already.
    pub overflowed: u64,
    /// Groups dropped after `ttl` without an exit.
    pub expired: u64,
}

/// The exits of one group.
pub struct Group {
    /// The whole exit's latencies, all kinds together (percentiles within 1 %), where the
    /// groups keep them (a run's, not serve's: some 37 KB a group).
    pub exit: Option<Latency>,
    /// The whole exit's and each stage's latencies by kind of exit, in fixed buckets (an
    /// HdrHistogram per series would cost each group megabytes): some 300 bytes a series.
    pub series: BTreeMap<(ExitKind, String), FixedBuckets>,
    /// The whole exits' time, all kinds together.
    pub exit_ns: u128,
    /// Each stage's time, all kinds together.
    pub stage_ns: BTreeMap<String, u128>,
    /// When its last exit ended (the kernel's monotonic clock).
    pub last_exit_ns: u64,
    /// The namespace teardowns its exits set off, by kind (`serve`).
    pub teardowns: BTreeMap<TeardownKind, TeardownBuckets>,
}

impl Group {
    fn new(percentiles: bool) -> Self {
        Self {
            exit: percentiles.then(Latency::coarse),
            series: BTreeMap::new(),
            exit_ns: 0,
            stage_ns: BTreeMap::new(),
            last_exit_ns: 0,
            teardowns: BTreeMap::new(),
        }
    }

    /// The stage (not the whole exit) that holds the most of the group's time, with its share
    /// of the whole exits' time.
    pub fn top_stage(&self) -> Option<(&str, f64)> {
        let (name, &ns) = self.stage_ns.iter().max_by_key(|(_, ns)| **ns)?;
        let whole = self.exit_ns;
        Some((name, if whole == 0 { 0.0 } else { ns as f64 / whole as f64 }))
    }
}

impl Groups {
    /// A run's groups, each with the percentiles of its whole exit.
    pub fn new(options: GroupOptions) -> Self {
        Self::keeping(options, true)
    }

    /// serve's groups: each group's series in the fixed buckets, and nothing else.
    pub fn series_only(options: GroupOptions) -> Self {
        Self::keeping(options, false)
    }

    fn keeping(options: GroupOptions, percentiles: bool) -> Self {
        Self {
            options,
            percentiles,
            by_name: HashMap::new(),
            cgroup_paths: CgroupPaths::default(),
            overflowed: 0,
            expired: 0,
        }
    }

    pub fn options(&self) -> GroupOptions {
        self.options
    }

    /// Folds one exit in, as `profile` cut it into `spans`.
    pub fn add(&mut self, exit: &Exit, profile: &Profile, spans: &[Span]) {
        let name = self.group_of(exit);
        let full = self.by_name.len() >= self.options.max_groups;
        let new = || Group::new(self.percentiles);
        let group = match self.by_name.get_mut(name.as_ref()) {
            Some(group) => group,
            None if full && name != OTHER => {
                self.overflowed += 1;
                self.by_name.entry(OTHER.to_owned()).or_insert_with(new)
            }
            None => self.by_name.entry(name.into_owned()).or_insert_with(new),
        };
        let kind = exit.kind();
        let ns = exit.duration_ns();
        if let Some(latency) = &mut group.exit {
            latency.record_waits(ns, exit.off_cpu_ns(), exit.runq_ns());
        }
        group.exit_ns += u128::from(ns);
        let whole = profile.whole_exit_series(exit);
        group.series.entry((kind, whole.into_owned())).or_default().record(ns);
        // A stage can occur more than once in an exit: one value per stage, as the profile has.
        let mut per_stage: BTreeMap<&str, u64> = BTreeMap::new();
        for span in spans {
            if let Some((stage, _)) = profile.stage(span.stage) {
                *per_stage.entry(&stage.name).or_default() += span.ns;
            }
        }
        for (stage, ns) in per_stage {
            group.series.entry((kind, stage.to_owned())).or_default().record(ns);
            *group.stage_ns.entry(stage.to_owned()).or_default() += u128::from(ns);
        }
        group.last_exit_ns = group.last_exit_ns.max(exit.end_ns());
    }

    /// The group an exit belongs to, by name.
    fn group_of(&self, exit: &Exit) -> Cow<'static, str> {
        self.group_named(exit.process_comm, exit.comm, exit.cgroup_id)
    }

    /// The group of an exit by its process's name, its own and its cgroup.
    fn group_named(&self, process: TaskName, comm: TaskName, cgroup_id: u64) -> Cow<'static, str> {
        let name = match self.options.by {
            GroupBy::Comm => {
                let name = if process.is_known() { process } else { comm };
                if name.is_known() { name.to_string() } else { "?".to_owned() }
            }
            GroupBy::Cgroup => self.cgroup_paths.workload(cgroup_id),
        };
        Cow::Owned(apart_from_other(name))
    }

    /// Folds in a namespace teardown, under the group of the exit that set it off (under
    /// [`OTHER`] where that group is not kept: past the bound, or expired since).
    pub fn add_teardown(&mut self, joined: &Joined) {
        let e = &joined.exit;
        let name = self.group_named(e.process_comm, e.comm, e.cgroup_id);
        let name = if self.by_name.contains_key(name.as_ref()) { name } else { OTHER.into() };
        let percentiles = self.percentiles;
        let group =
            self.by_name.entry(name.into_owned()).or_insert_with(|| Group::new(percentiles));
        group.teardowns.entry(joined.torn.kind).or_default().record(joined);
    }

    /// Drops the groups whose last exit ended more than the time to live before `now_ns` (the
    /// kernel's monotonic clock); returns how many.
    pub fn expire(&mut self, now_ns: u64) -> usize {
        let Some(ttl) = self.options.ttl else { return 0 };
        let before = self.by_name.len();
        let ttl_ns = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
        self.by_name.retain(|_, g| g.last_exit_ns.saturating_add(ttl_ns) >= now_ns);
        let expired = before - self.by_name.len();
        self.expired += expired as u64;
        expired
    }

    /// The groups with their whole exit's percentiles, the slowest (by p99) first (none in
    /// serve's).
    pub fn by_p99(&self) -> Vec<(&str, &Group, &Latency)> {
        let mut groups: Vec<(&str, &Group, &Latency)> = self
            .by_name
            .iter()
            .filter_map(|(name, g)| Some((name.as_str(), g, g.exit.as_ref()?)))
            .collect();
        groups.sort_by_key(|(name, _, exit)| {
            (std::cmp::Reverse(exit.hist.value_at_quantile(0.99)), *name)
        });
        groups
    }

    /// The groups by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Group)> {
        self.by_name.iter().map(|(name, g)| (name.as_str(), g))
    }

    /// How many groups are kept.
    pub fn kept(&self) -> usize {
        self.by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_workload_is_named_as_the_overflow_group() {
        let names = ["other", "\\other", "\\\\other", "others", "x\\"];
        let groups: Vec<String> = names.iter().map(|&n| apart_from_other(n.to_owned())).collect();
        assert_eq!(groups, ["\\other", "\\\\other", "\\\\\\other", "others", "x\\"]);
        assert!(!groups.iter().any(|g| g == OTHER));
    }
}
