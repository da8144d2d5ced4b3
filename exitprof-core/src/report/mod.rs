//! Everything a person reads in a terminal: the report of a run, its views of a record and of
//! one exit, the document and tables of a comparison or sweep, and the tables of a diff.
//!
//! Part of the presentation layer, under `present`: it reads what runs and comparisons produced
//! (`run::RunOutcome`, `compare::CompareOutcome`), their documents (`document`) and a diff's
//! (`diff`). Must not import `cli` or `present`, nor load, attach or read the eBPF object; `run`,
//! `compare`, `document` and `diff` never import it.

pub mod compare_document;
pub mod diff;
pub mod exit_timeline;
pub mod record_views;
pub mod terminal;
