//! Values of the kernel side's `TRACKED` map: how the exits of a followed process are recorded.

/// A process whose exits are recorded, with those of the processes it forks from then on.
pub const FOLLOWED: u8 = 1;
/// A storm driver: its threads and the processes it forks are recorded, but not the exit of its
/// main thread, which is not part of the storm it drives. Left out in the kernel, so that a
/// full ring buffer never counts it among the storm's lost exits.
pub const DRIVER: u8 = 2;
