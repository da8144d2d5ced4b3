/// Rebuild the eBPF object whenever bpf-linker changes: cargo cannot see it as a dependency.
/// (Without bpf-linker the userspace build falls back to a stub object and says so.)
fn main() {
    match which::which("bpf-linker") {
        Ok(bpf_linker) => println!("cargo:rerun-if-changed={}", bpf_linker.display()),
        Err(_) => println!("cargo:rerun-if-env-changed=PATH"),
    }
}
