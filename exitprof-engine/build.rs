//! Builds the eBPF objects (`exitprof-ebpf`) and leaves them in `OUT_DIR` for `include_bytes!`:
//! `exitprof`, and `exitprof-compat` (its `compat` feature) for kernels that lack what the first
//! one uses.
//!
//! Without the eBPF toolchain (no bpf-linker on PATH, or `AYA_BUILD_SKIP=1`) it leaves an empty
//! stub instead, so `cargo check`, `clippy` and the unit tests work anywhere; a binary carrying
//! the stub refuses to run and says why.

use std::{env, fs, path::PathBuf};

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?);
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    let linker = which::which("bpf-linker");
    if skip || linker.is_err() {
        // Rebuild once bpf-linker appears in any PATH directory.
        println!("cargo:rerun-if-env-changed=PATH");
        for dir in env::split_paths(&env::var_os("PATH").unwrap_or_default()) {
            if dir.is_dir() {
                println!("cargo:rerun-if-changed={}", dir.display());
            }
        }
        let why = if skip { "AYA_BUILD_SKIP is set" } else { "bpf-linker is not on PATH" };
        println!(
            "cargo:warning={why}: exitprof is built with a stub eBPF object and will refuse to run; `cargo xtask setup` installs the eBPF toolchain"
        );
        for object in ["exitprof", COMPAT] {
            fs::write(out_dir.join(object), []).context("writing the stub eBPF objects")?;
        }
        return Ok(());
    }
    let ebpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../exitprof-ebpf");
    let root_dir = ebpf_dir.canonicalize().context("locating exitprof-ebpf")?;
    let root_dir = root_dir.to_str().context("exitprof-ebpf path is not UTF-8")?;
    // One package, two builds: aya-build names each object after the binary, so the compat
    // build's is renamed before the default build writes its own.
    let build = |features| {
        aya_build::build_ebpf(
            [Package { name: "exitprof-ebpf", root_dir, features, ..Default::default() }],
            Toolchain::default(),
        )
    };
    build(&["compat"])?;
    fs::rename(out_dir.join("exitprof"), out_dir.join(COMPAT))
        .context("naming the compat eBPF object")?;
    build(&[])
}

/// The compat object's name in `OUT_DIR`.
const COMPAT: &str = "exitprof-compat";
