//! `cargo xtask dist`: exitprof for machines without Rust. One statically linked binary (musl,
//! the eBPF object embedded by the build script as always) in `target/dist/exitprof`, and a
//! Debian package `target/dist/exitprof_<version>_amd64.deb` holding it with a systemd unit for
//! `exitprof serve`, installed disabled.

mod deb;

use std::{
    fs,
    io::Read as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{
    command::{run, workspace_root},
    setup,
};

/// The target the shipped binary is built for: musl links statically by default.
pub const TARGET: &str = "x86_64-unknown-linux-musl";
/// The cargo profile of the shipped binary (the workspace's Cargo.toml: release, stripped).
pub const PROFILE: &str = "release-static";

/// Sets up, then builds.
pub fn dist() -> anyhow::Result<()> {
    setup::setup()?;
    build()
}

/// Builds the static binary and the package, and says what they weigh.
pub fn build() -> anyhow::Result<()> {
    let binary = static_binary()?;
    let deb = deb::build(&binary)?;
    for path in [&binary, &deb] {
        let size = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?.len();
        eprintln!("dist: {} ({:.1} MiB)", path.display(), size as f64 / f64::from(1 << 20));
    }
    Ok(())
}

/// Builds exitprof statically linked into `target/dist/exitprof` and returns that path. The eBPF
/// toolchain must be set up (`setup::setup`): the build script embeds the eBPF object it builds.
pub fn static_binary() -> anyhow::Result<PathBuf> {
    setup::ensure_target(TARGET)?;
    let root = workspace_root();
    run(Command::new(env!("CARGO"))
        .args(["build", "--locked", "--package", "exitprof", "--profile", PROFILE])
        .args(["--target", TARGET])
        // A shipped binary without its eBPF programs would refuse every run.
        .env_remove("AYA_BUILD_SKIP")
        .current_dir(&root))
    .with_context(|| format!("building exitprof for {TARGET}"))?;
    let built = root.join("target").join(TARGET).join(PROFILE).join("exitprof");
    require_static(&built)?;
    let dir = root.join("target/dist");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let binary = dir.join("exitprof");
    let partial = dir.join("exitprof.partial");
    fs::copy(&built, &partial).with_context(|| format!("copying {}", built.display()))?;
    fs::rename(&partial, &binary).with_context(|| format!("moving {}", partial.display()))?;
    Ok(binary)
}

/// Fails unless `path` is an x86-64 ELF executable that the kernel runs without a dynamic
/// loader (no `PT_INTERP` program header), so that it loads no shared library.
pub fn require_static(path: &Path) -> anyhow::Result<()> {
    let mut header = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut header))
        .with_context(|| format!("reading {}", path.display()))?;
    match interpreter(&header) {
        Ok(None) => Ok(()),
        Ok(Some(loader)) => {
            bail!("{} is dynamically linked: it needs the loader {loader}", path.display())
        }
        Err(why) => bail!("{}: {why}", path.display()),
    }
}

/// The dynamic loader an ELF64 little-endian executable names (`PT_INTERP`), if any, from its
/// first bytes (the ELF header and the program headers, which linkers put at the start).
fn interpreter(elf: &[u8]) -> Result<Option<String>, String> {
    const PT_INTERP: u32 = 3;
    const EM_X86_64: u16 = 62;
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".to_owned());
    }
    let field = |at: usize, len: usize| {
        elf.get(at..at + len)
            .map(|b| b.iter().rev().fold(0_u64, |n, &byte| n << 8 | u64::from(byte)))
            .ok_or_else(|| "its program headers lie beyond its first 64 KiB".to_owned())
    };
    if field(18, 2)? != u64::from(EM_X86_64) {
        return Err("not an x86-64 executable".to_owned());
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
        let loader = interpreter(&exe[..64 * 1024]).unwrap().expect("a PT_INTERP header");
        assert!(loader.starts_with('/') && loader.contains("ld-"), "{loader}");
        assert!(require_static(&std::env::current_exe().unwrap()).is_err());
    }

    #[test]
    fn a_static_executable_has_no_loader_and_other_files_are_refused() {
        // An ELF header with no program headers at all: nothing to load.
        let mut elf = vec![0_u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[18] = 62;
        assert_eq!(interpreter(&elf), Ok(None));
        assert!(interpreter(b"#!/bin/sh\n").is_err());
        elf[18] = 3; // EM_386
        assert!(interpreter(&elf).is_err());
    }
}
