//! Deferred work: what an exit causes in other contexts, sent as separate records and joined to
//! exits in userspace.
