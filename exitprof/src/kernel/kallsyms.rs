//! `/proc/kallsyms`: which kernel functions exist as symbols, and where.

use std::{
    collections::HashMap,
    io::{self, BufRead},
};

/// An address this far past the closest symbol is not in that function (kernel functions are a
/// few KiB at most; past the end of the kernel text the closest symbol is a section marker).
const MAX_FUNCTION_BYTES: u64 = 128 * 1024;

/// Text (function) symbols of the running kernel, by name and by address.
#[derive(Debug, Default)]
pub struct Kallsyms {
    functions: HashMap<String, u64>,
    /// (address, name), sorted by address, for naming code addresses.
    by_address: Vec<(u64, String)>,
}

impl Kallsyms {
    pub fn load() -> io::Result<Self> {
        Self::parse(io::BufReader::new(std::fs::File::open("/proc/kallsyms")?))
    }

    /// Parses kallsyms lines (`ADDRESS TYPE NAME [MODULE]`), keeping text symbols.
    pub fn parse(reader: impl BufRead) -> io::Result<Self> {
        let mut functions = HashMap::new();
        let mut by_address = Vec::new();
        for line in reader.lines() {
            let line = line?;
            let mut fields = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if !matches!(kind, "t" | "T") {
                continue;
            }
            let addr = u64::from_str_radix(addr, 16).unwrap_or(0);
            functions.entry(name.to_owned()).or_insert(addr);
            by_address.push((addr, name.to_owned()));
        }
        by_address.sort_unstable();
        Ok(Self { functions, by_address })
    }

    /// The function a code address lies in (`None` when addresses are hidden or unknown, e.g.
    /// code loaded after kallsyms was read, like eBPF programs).
    pub fn name_of(&self, addr: u64) -> Option<&str> {
        let at = self.by_address.partition_point(|&(a, _)| a <= addr);
        match at.checked_sub(1).map(|i| &self.by_address[i]) {
            Some((start, name)) if *start != 0 && addr - start < MAX_FUNCTION_BYTES => Some(name),
            _ => None,
        }
    }

    pub fn has_function(&self, name: &str) -> bool {
        self.functions.contains_key(name)
    }

    /// Address of a function; 0 when kallsyms hides addresses (`kptr_restrict`).
    pub fn address(&self, name: &str) -> Option<u64> {
        self.functions.get(name).copied()
    }

    /// Compiler clones of a function (`name.isra.0`, `name.constprop.0`, ...), which are not the
    /// function itself.
    pub fn clones_of(&self, name: &str) -> Vec<&str> {
        let prefix = format!("{name}.");
        let mut clones: Vec<&str> =
            self.functions.keys().filter(|k| k.starts_with(&prefix)).map(String::as_str).collect();
        clones.sort_unstable();
        clones
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffff81aac9e0 t free_ipc
ffffffff81aad080 T put_ipc_ns
ffffffff81aad100 t free_ipc_ns.isra.0
ffffffff82000000 D init_ipc_ns
ffffffffc0000000 t some_fn\t[some_module]
";

    #[test]
    fn keeps_text_symbols() {
        let k = Kallsyms::parse(SAMPLE.as_bytes()).unwrap();
        assert!(k.has_function("free_ipc"));
        assert!(k.has_function("put_ipc_ns"));
        assert!(k.has_function("some_fn"));
        assert_eq!(k.address("free_ipc"), Some(0xffffffff81aac9e0));
        assert!(!k.has_function("init_ipc_ns"), "data symbols are not functions");
        assert!(!k.has_function("free_ipc_ns"));
        assert_eq!(k.clones_of("free_ipc_ns"), ["free_ipc_ns.isra.0"]);
        assert_eq!(k.name_of(0xffffffff81aac9e8), Some("free_ipc"));
        assert_eq!(k.name_of(0xffffffff81aad080), Some("put_ipc_ns"));
        assert_eq!(k.name_of(0x1000), None);
        assert_eq!(k.name_of(0xffffffff81aad080 + 4 * 1024 * 1024), None, "far past the text");
    }
}
