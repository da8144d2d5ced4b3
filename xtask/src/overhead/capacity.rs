//! The highest exit rate exitprof records without losing an exit: storms at their full speed,
//! growing, one run each, with the default ring buffer.

use serde::Serialize;

use super::exitprof::{Exitprof, Storm};

/// The storms tried: threads at stagger 0 with more and more threads per rep, a long one that
/// sustains the rate for 100 000 exits, and two fork loops in parallel (one per CPU here).
fn ladder() -> Vec<Storm> {
    vec![
        Storm::threads(250, 40),
        Storm::threads(1000, 10),
        Storm::threads(4000, 10),
        Storm::threads(1000, 100),
        Storm::forks(10_000, 2),
    ]
}

/// One storm of the ladder.
#[derive(Debug, Serialize)]
pub struct Step {
    pub storm: String,
    pub exits_recorded: u64,
    pub exit_rate: f64,
    pub lost: u64,
}

#[derive(Debug, Serialize)]
pub struct Capacity {
    pub steps: Vec<Step>,
    /// The highest exit rate of a storm that lost nothing (0 when every storm lost some).
    pub max_rate_without_loss: f64,
    /// Exits lost over all the storms.
    pub lost: u64,
}

pub fn measure(exitprof: &Exitprof) -> anyhow::Result<Capacity> {
    eprintln!("bench: exit rate without loss (storms at full speed, one run each)");
    let mut steps = Vec::new();
    for storm in ladder() {
        let doc = exitprof.profile(&storm, &[], false)?.doc;
        steps.push(Step {
            storm: storm.name,
            exits_recorded: doc.exits_recorded,
            exit_rate: doc.exit_rate,
            lost: doc.exits_lost(),
        });
    }
    let max_rate_without_loss =
        steps.iter().filter(|s| s.lost == 0).map(|s| s.exit_rate).fold(0.0, f64::max);
    let lost = steps.iter().map(|s| s.lost).sum();
    Ok(Capacity { steps, max_rate_without_loss, lost })
}
