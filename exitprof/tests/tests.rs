//! exitprof's integration tests, one module per part of it, in one binary. They run the real
//! exitprof, which loads real eBPF programs into the running kernel: root is required, and they
//! share kernel state, so they run one at a time (`cargo xtask test` does both).

mod support;

mod bad_input;
mod cgroup_target;
mod compare;
mod compat;
mod conditions;
mod deploy;
mod diff;
mod exports;
mod ground_truth;
mod groups;
mod html_report;
mod identity;
mod kernel_cost;
mod namespaces;
mod package;
mod pid_max;
mod plan;
mod probe_effect;
mod record;
mod record_input;
mod reliability;
mod serve;
mod side_by_side;
mod slow_exits;
mod stages;
mod state;
mod threads_storm;
mod workloads;
