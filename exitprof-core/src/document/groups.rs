//! The exits of each workload (`--group-by`): the document's `groups` section and its table.

use serde::{Deserialize, Serialize};

use super::{fmt_ns, table::TextTable};
use crate::analysis::groups::{GroupBy, Groups};

/// The groups of a run's exits.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupsDoc {
    pub by: GroupBy,
    /// Groups kept apart at most; the exits of any other went to `other`.
    pub max_groups: usize,
    /// Exits that went to `other` because the groups were at their bound.
    pub overflowed_exits: u64,
    /// The slowest (by the whole exit's p99) first.
    pub groups: Vec<GroupDoc>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupDoc {
    pub name: String,
    pub exits: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub off_cpu_share: f64,
    /// The stage that holds most of the group's exit time, and its share of it.
    pub top_stage: Option<String>,
    pub top_stage_share: Option<f64>,
}

impl GroupsDoc {
    pub fn new(groups: &Groups) -> Self {
        let options = groups.options();
        let groups_doc = groups
            .by_p99()
            .into_iter()
            .map(|(name, group, exit)| {
                let summary = exit.summary();
                let top = group.top_stage();
                GroupDoc {
                    name: name.to_owned(),
                    exits: summary.count,
                    mean_ns: summary.mean_ns,
                    p50_ns: summary.p50_ns,
                    p99_ns: summary.p99_ns,
                    off_cpu_share: summary.off_cpu_share(),
                    top_stage: top.map(|(stage, _)| stage.to_owned()),
                    top_stage_share: top.map(|(_, share)| share),
                }
            })
            .collect();
        Self {
            by: options.by,
            max_groups: options.max_groups,
            overflowed_exits: groups.overflowed,
            groups: groups_doc,
        }
    }

    /// The table of the groups, slowest first.
    pub fn render(&self) -> String {
        let by = match self.by {
            GroupBy::Cgroup => "cgroup",
            GroupBy::Comm => "process name",
        };
        let mut table =
            TextTable::new(["group", "exits", "p50", "p99", "off-CPU", "top stage", "of the exit"])
                .names_left(1);
        for g in &self.groups {
            table.add_row([
                g.name.clone(),
                g.exits.to_string(),
                fmt_ns(g.p50_ns as f64),
                fmt_ns(g.p99_ns as f64),
                format!("{:.0}%", g.off_cpu_share * 100.0),
                g.top_stage.clone().unwrap_or_else(|| "-".to_owned()),
                g.top_stage_share.map_or_else(|| "-".to_owned(), |s| format!("{:.0}%", s * 100.0)),
            ]);
        }
        let overflow = if self.overflowed_exits > 0 {
            format!(
                " ({} exits of groups past the first {} counted under \"other\")",
                self.overflowed_exits, self.max_groups
            )
        } else {
            String::new()
        };
        format!("\nexits by {by}, slowest p99 first{overflow}:\n{table}\n")
    }
}
