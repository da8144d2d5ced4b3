//! The running kernel's version, for the parts of the exit path that moved between releases.

use std::{fmt, str::FromStr};

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self { major, minor, patch }
    }

    /// The running kernel's release string (`uname -r`).
    pub fn running_release() -> std::io::Result<String> {
        Ok(std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_owned())
    }
}

impl FromStr for KernelVersion {
    type Err = String;

    /// Parses the leading `MAJOR.MINOR[.PATCH]` of a release string such as `6.1.0-57-amd64`.
    fn from_str(release: &str) -> Result<Self, String> {
        let mut numbers = release
            .split(|c: char| !c.is_ascii_digit())
            .take(3)
            .map(|part| part.parse::<u32>().ok());
        match (numbers.next().flatten(), numbers.next().flatten()) {
            (Some(major), Some(minor)) => {
                let patch = numbers.next().flatten().unwrap_or(0);
                Ok(Self::new(major, minor, patch))
            }
            _ => Err(format!("cannot read a kernel version from release {release:?}")),
        }
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_release_strings() {
        assert_eq!("6.1.0-57-amd64".parse(), Ok(KernelVersion::new(6, 1, 0)));
        assert_eq!("6.12.117+deb12-amd64".parse(), Ok(KernelVersion::new(6, 12, 117)));
        assert_eq!("6.18.44-fc-v1045".parse(), Ok(KernelVersion::new(6, 18, 44)));
        assert_eq!("5.4".parse(), Ok(KernelVersion::new(5, 4, 0)));
        assert!("linux".parse::<KernelVersion>().is_err());
    }

    #[test]
    fn orders_by_numbers() {
        assert!(KernelVersion::new(6, 16, 0) > KernelVersion::new(6, 15, 9));
        assert!(KernelVersion::new(6, 2, 0) < KernelVersion::new(6, 12, 0));
    }
}
