//! `cargo xtask dist`: exitprof for machines without Rust, for x86_64 and aarch64. For each, one
//! statically linked binary (musl, the eBPF object of its architecture embedded by the build
//! script as always) in `target/dist/<amd64|arm64>/exitprof`, and a Debian package
//! `target/dist/exitprof_<version>_<amd64|arm64>.deb` holding it with its manual pages, shell
//! completions and a systemd unit for `exitprof serve`, installed disabled. The architecture
//! that is not the machine's own is linked with Debian's cross C compiler, installed when
//! missing.

mod deb;

use std::{
    fs,
    io::Read as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{
    arch::Arch,
    command::{run, workspace_root},
    packages, setup,
};

/// The cargo profile of the shipped binary (the workspace's Cargo.toml: release, stripped).
pub const PROFILE: &str = "release-static";

/// Sets up, then builds.
pub fn dist() -> anyhow::Result<()> {
    setup::setup()?;
    build()
}

/// Builds the static binary and the package of every architecture, and says what they weigh.
pub fn build() -> anyhow::Result<()> {
    let mut binaries = Vec::new();
    for arch in Arch::ALL {
        binaries.push((arch, static_binary(arch)?));
    }
    // The pages and completions are made by running exitprof: the binary this machine runs.
    let host = &binaries.iter().find(|(arch, _)| *arch == Arch::host()).context("no host build")?.1;
    let manuals = deb::manuals(host)?;
    for (arch, binary) in &binaries {
        let deb = deb::build(*arch, binary, &manuals)?;
        for path in [binary, &deb] {
            let size =
                fs::metadata(path).with_context(|| format!("reading {}", path.display()))?.len();
            eprintln!("dist: {} ({:.1} MiB)", path.display(), size as f64 / f64::from(1 << 20));
        }
    }
    Ok(())
}

/// The directory of `arch`'s static binary.
pub fn dir(arch: Arch) -> PathBuf {
    workspace_root().join("target/dist").join(arch.debian())
}

/// The cargo command that builds for `arch`'s musl target (its standard library and the C
/// tools it needs installed, and where `arch` is not the machine's, Debian's cross compiler set
/// as its linker and C compiler).
pub fn cargo_for(arch: Arch) -> anyhow::Result<Command> {
    setup::ensure_target(arch.musl_target())?;
    let needed = arch.build_packages();
    packages::ensure(&needed.iter().map(String::as_str).collect::<Vec<_>>())?;
    let mut cargo = Command::new(env!("CARGO"));
    cargo.current_dir(workspace_root());
    cargo.envs(arch.cargo_env());
    Ok(cargo)
}

/// Builds exitprof for `arch` statically linked into `target/dist/<arch>/exitprof` and returns
/// that path. The eBPF toolchain must be set up (`setup::setup`): the build script embeds the
/// eBPF object it builds for `arch`.
pub fn static_binary(arch: Arch) -> anyhow::Result<PathBuf> {
    let target = arch.musl_target();
    run(cargo_for(arch)?
        .args(["build", "--locked", "--package", "exitprof", "--profile", PROFILE])
        .args(["--target", target])
        // A shipped binary without its eBPF programs would refuse every run.
        .env_remove("AYA_BUILD_SKIP"))
    .with_context(|| format!("building exitprof for {target}"))?;
    let built = workspace_root().join("target").join(target).join(PROFILE).join("exitprof");
    require_static(&built, arch)?;
    let dir = dir(arch);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let binary = dir.join("exitprof");
    let partial = dir.join("exitprof.partial");
    fs::copy(&built, &partial).with_context(|| format!("copying {}", built.display()))?;
    fs::rename(&partial, &binary).with_context(|| format!("moving {}", partial.display()))?;
    Ok(binary)
}

/// Fails unless `path` is an ELF executable for `arch` that the kernel runs without a dynamic
/// loader (no `PT_INTERP` program header), so that it loads no shared library.
pub fn require_static(path: &Path, arch: Arch) -> anyhow::Result<()> {
    let mut header = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut header))
        .with_context(|| format!("reading {}", path.display()))?;
    match interpreter(&header, arch) {
        Ok(None) => Ok(()),
        Ok(Some(loader)) => {
            bail!("{} is dynamically linked: it needs the loader {loader}", path.display())
        }
        Err(why) => bail!("{}: {why}", path.display()),
    }
}

/// The dynamic loader an ELF64 little-endian executable for `arch` names (`PT_INTERP`), if any,
/// from its first bytes (the ELF header and the program headers, which linkers put at the start).
fn interpreter(elf: &[u8], arch: Arch) -> Result<Option<String>, String> {
    const PT_INTERP: u32 = 3;
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".to_owned());
    }
    let field = |at: usize, len: usize| {
        elf.get(at..at + len)
            .map(|b| b.iter().rev().fold(0_u64, |n, &byte| n << 8 | u64::from(byte)))
            .ok_or_else(|| "its program headers lie beyond its first 64 KiB".to_owned())
    };
    if field(18, 2)? != u64::from(arch.elf_machine()) {
        return Err(format!("not an {arch} executable"));
    }
    let (phoff, phentsize, phnum) = (field(32, 8)?, field(54, 2)?, field(56, 2)?);
    for i in 0..phnum {
        let ph = usize::try_from(phoff + i * phentsize).map_err(|e| e.to_string())?;
        if field(ph, 4)? == u64::from(PT_INTERP) {
            let (offset, size) = (field(ph + 8, 8)? as usize, field(ph + 32, 8)? as usize);
            let name = elf.get(offset..offset + size).ok_or("its loader's name is out of reach")?;
            return Ok(Some(String::from_utf8_lossy(name).trim_end_matches('\0').to_owned()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamically_linked_executable_names_its_loader() {
        // The test binary itself is linked against the host's libc.
        let exe = fs::read(std::env::current_exe().unwrap()).unwrap();
        let loader = interpreter(&exe[..64 * 1024], Arch::host()).unwrap().expect("a PT_INTERP");
        assert!(loader.starts_with('/') && loader.contains("ld-"), "{loader}");
        assert!(require_static(&std::env::current_exe().unwrap(), Arch::host()).is_err());
    }

    #[test]
    fn a_static_executable_has_no_loader_and_other_files_are_refused() {
        // An ELF header with no program headers at all: nothing to load.
        let mut elf = vec![0_u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[18] = 62;
        assert_eq!(interpreter(&elf, Arch::X86_64), Ok(None));
        assert!(interpreter(&elf, Arch::Aarch64).is_err(), "an x86-64 executable");
        elf[18] = 183;
        assert_eq!(interpreter(&elf, Arch::Aarch64), Ok(None));
        assert!(interpreter(b"#!/bin/sh\n", Arch::X86_64).is_err());
        elf[18] = 3; // EM_386
        assert!(interpreter(&elf, Arch::X86_64).is_err());
    }
}
