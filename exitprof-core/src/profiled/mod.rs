//! What is profiled: the storms exitprof drives and their parameters, commands, processes and
//! cgroups it watches, and how the workload's children ended.

pub mod workload;

use std::{ffi::OsString, path::PathBuf};

use serde::{Deserialize, Serialize};

/// What a run profiles, once the command line is read.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// A storm exitprof drives itself.
    Storm(Storm),
    /// A program exitprof starts, with its descendants.
    Command(Vec<OsString>),
    /// An existing process and its descendants.
    Pid(u32),
    /// Tasks by name.
    Comm(String),
    /// Tasks in a cgroup of the v2 hierarchy, or below it.
    Cgroup(PathBuf),
    /// Every task.
    All,
}

/// A storm with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storm {
    Threads(ThreadsParams),
    Fork(ForkParams),
    Ipcns(ForkParams),
    Netns(NetnsParams),
}

/// Parameters of the `threads` storm: `threads` threads created, then joined, `reps` times;
/// thread i of N sleeps `(N-i) * stagger_us` microseconds before it exits, or `rate` sets the
/// stagger rep by rep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadsParams {
    pub threads: u32,
    pub reps: u32,
    pub stagger_us: u32,
    /// The exit rate aimed at, in exits per second.
    pub rate: Option<u64>,
}

/// Parameters of the `fork` and `ipcns` storms: `count` children forked in all, by `parallel`
/// sequential fork loops at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkParams {
    pub count: u32,
    pub parallel: u32,
}

/// Parameters of the `netns` storm: the fork loops of `ipcns`, each child making `veth_pairs`
/// veth pairs in its own network namespace before it exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetnsParams {
    #[serde(flatten)]
    pub forks: ForkParams,
    pub veth_pairs: u32,
}
