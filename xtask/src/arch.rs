//! The architectures exitprof ships for and is tested on, and what building for each takes on
//! this machine: Rust's musl target (the static binary), Debian's name for it (the package, the
//! guests' kernels and busybox), and, for the one that is not the machine's own, Debian's cross
//! C compiler and C library, which link the static binary and build the guests' C programs.

use std::fmt;

use clap::ValueEnum;

/// An architecture exitprof is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub enum Arch {
    #[value(name = "x86_64")]
    X86_64,
    #[value(name = "aarch64")]
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture of this machine, and of the tools built for it.
    pub fn host() -> Self {
        match std::env::consts::ARCH {
            "aarch64" => Self::Aarch64,
            _ => Self::X86_64,
        }
    }

    /// As Rust and `uname -m` name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }

    /// As Debian names it.
    pub fn debian(self) -> &'static str {
        match self {
            Self::X86_64 => "amd64",
            Self::Aarch64 => "arm64",
        }
    }

    /// Rust's target of the shipped binary: musl, which links statically.
    pub fn musl_target(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64-unknown-linux-musl",
            Self::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The ELF header's `e_machine` of its executables.
    pub fn elf_machine(self) -> u16 {
        match self {
            Self::X86_64 => 62,
            Self::Aarch64 => 183,
        }
    }

    /// The GNU triplet Debian's cross tools are prefixed with.
    fn gnu_triplet(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64-linux-gnu",
            Self::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// The C compiler that builds for it here: the machine's own `cc`, or Debian's cross
    /// compiler (`aarch64-linux-gnu-gcc`).
    pub fn c_compiler(self) -> String {
        if self == Self::host() { "cc".to_owned() } else { format!("{}-gcc", self.gnu_triplet()) }
    }

    /// The Debian packages building for it needs here: for the machine's own, musl's C compiler
    /// wrapper (`musl-tools`), which the cc crate builds C for its musl target with (ring's);
    /// for the other, the cross compiler and the target's C library.
    pub fn build_packages(self) -> Vec<String> {
        if self == Self::host() {
            return vec!["musl-tools".to_owned()];
        }
        vec![
            format!("gcc-{}", self.gnu_triplet().replace('_', "-")),
            format!("libc6-dev-{}-cross", self.debian()),
        ]
    }

    /// The environment that makes cargo build for its Rust target with Debian's cross tools:
    /// its linker (Rust links with the machine's `cc` unless told otherwise, which cannot link
    /// for another architecture), and the C compiler and archiver of crates with C in them
    /// (ring's; the cc crate would look for `aarch64-linux-musl-gcc`). None for the machine's own.
    pub fn cargo_env(self) -> Vec<(String, String)> {
        if self == Self::host() {
            return Vec::new();
        }
        let target = self.musl_target();
        let tool = |name: &str| format!("{}-{name}", self.gnu_triplet());
        vec![
            (
                format!("CARGO_TARGET_{}_LINKER", target.to_uppercase().replace('-', "_")),
                tool("gcc"),
            ),
            (format!("CC_{}", target.replace('-', "_")), tool("gcc")),
            (format!("AR_{}", target.replace('-', "_")), tool("ar")),
        ]
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_other_architecture_is_built_with_debians_cross_tools() {
        let other = if Arch::host() == Arch::X86_64 { Arch::Aarch64 } else { Arch::X86_64 };
        assert_eq!(Arch::host().build_packages(), ["musl-tools"]);
        assert!(Arch::host().cargo_env().is_empty());
        assert_eq!(Arch::host().c_compiler(), "cc");
        if other == Arch::Aarch64 {
            assert_eq!(other.c_compiler(), "aarch64-linux-gnu-gcc");
            assert_eq!(other.build_packages(), ["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"]);
            let env = other.cargo_env();
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            assert_eq!(
                env,
                [
                    ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER", "aarch64-linux-gnu-gcc"),
                    ("CC_aarch64_unknown_linux_musl", "aarch64-linux-gnu-gcc"),
                    ("AR_aarch64_unknown_linux_musl", "aarch64-linux-gnu-ar"),
                ]
            );
        } else {
            assert_eq!(other.build_packages(), ["gcc-x86-64-linux-gnu", "libc6-dev-amd64-cross"]);
        }
    }
}
