//! The run document, the one shape of a finished run (`run.rs`): what `--json` prints, a record
//! reports, diff reads back and the exports are drawn from; versioned. With it, what it is made
//! with and every report shares: the verdicts (`verdict.rs`), the groups' document, and how
//! durations, rates and tables are written.
//!
//! It reads what runs produced (`run::RunOutcome`) and the plan; `diff`, `report` and `export`
//! are made of it.

pub mod groups;
pub mod run;
pub mod table;
pub mod verdict;

/// A duration in ns, with a unit a person reads at a glance: `850ns`, `12.3µs`, `4.56ms`, `2.10s`.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0}ns")
    } else if ns < 1e6 {
        format!("{:.1}µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2}ms", ns / 1e6)
    } else {
        format!("{:.2}s", ns / 1e9)
    }
}

/// A duration with its sign, e.g. `+2.1µs`.
pub fn signed(ns: f64) -> String {
    format!("{}{}", if ns < 0.0 { "-" } else { "+" }, fmt_ns(ns.abs()))
}

/// A count per second, e.g. `14.5k`.
pub fn fmt_rate(per_s: f64) -> String {
    if per_s >= 1e6 {
        format!("{:.2}M", per_s / 1e6)
    } else if per_s >= 1e3 {
        format!("{:.1}k", per_s / 1e3)
    } else {
        format!("{per_s:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_ns(850.0), "850ns");
        assert_eq!(fmt_ns(12_345.0), "12.3µs");
        assert_eq!(fmt_ns(4_560_000.0), "4.56ms");
        assert_eq!(fmt_ns(2_100_000_000.0), "2.10s");
        assert_eq!(fmt_rate(14_523.0), "14.5k");
        assert_eq!(fmt_rate(950.0), "950");
    }
}
