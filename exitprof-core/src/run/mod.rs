//! A finished run: what it was asked and what it gives back ([`RunOutcome`]), every exit or
//! part lost on the way ([`Losses`]), what exitprof cost it, and a run kept in a record file,
//! written and read back.

pub mod outcome;
pub mod own_cost;
pub mod record;

pub use self::outcome::{Diagnostics, Ended, Losses, RunEnd, RunOutcome, RunRequest, RunSetup};
