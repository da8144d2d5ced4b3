//! exitprof with `kernel.pid_max` at 4194304, as systemd sets it on most distributions: pids are
//! then not reused for a long time, so nothing may depend on forgetting a process when its pid
//! comes back. A compare of fork storms makes far more processes than any map of followed
//! processes would hold.

use std::fs;

use crate::support::{num, require_root, run_json};

const PID_MAX: &str = "/proc/sys/kernel/pid_max";

/// `kernel.pid_max` set for the test, restored when dropped (a failed assertion included).
struct PidMax {
    before: String,
}

impl PidMax {
    fn set(value: u64) -> Self {
        let before = fs::read_to_string(PID_MAX).expect("reading kernel.pid_max");
        fs::write(PID_MAX, value.to_string()).expect("setting kernel.pid_max");
        Self { before }
    }
}

impl Drop for PidMax {
    fn drop(&mut self) {
        fs::write(PID_MAX, self.before.trim()).expect("restoring kernel.pid_max");
    }
}

#[test]
fn a_compare_of_fork_storms_at_systemd_pid_max_records_every_exit() {
    require_root();
    let _pid_max = PidMax::set(4_194_304);
    // 2 sides x 8 runs x 5001 processes: 80,016, beyond the 65,536 a map of followed processes
    // held, with no pid reused in between.
    let doc = run_json(&[
        "compare",
        "--toggle",
        "delayacct",
        "--workload",
        "fork",
        "--count",
        "5000",
        "--runs",
        "8",
    ]);
    for name in ["on", "off"] {
        let side = &doc[name];
        let (recorded, lost) = (num(side, "exits_recorded"), num(side, "lost"));
        assert_eq!(
            (recorded, lost),
            (8.0 * 5000.0, 0.0),
            "{name}: expected 40000 exits over 8 runs, recorded {recorded}, lost {lost}: {}",
            side["losses"]
        );
    }
}
