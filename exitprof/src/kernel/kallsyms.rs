//! `/proc/kallsyms`: which kernel functions exist as symbols, and where.

use std::{
    collections::HashMap,
    io::{self, BufRead},
};

/// Text (function) symbols of the running kernel, by name.
#[derive(Debug, Default)]
pub struct Kallsyms {
    functions: HashMap<String, u64>,
}

impl Kallsyms {
    pub fn load() -> io::Result<Self> {
        Self::parse(io::BufReader::new(std::fs::File::open("/proc/kallsyms")?))
    }

    /// Parses kallsyms lines (`ADDRESS TYPE NAME [MODULE]`), keeping text symbols.
    pub fn parse(reader: impl BufRead) -> io::Result<Self> {
        let mut functions = HashMap::new();
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
        }
        Ok(Self { functions })
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
    }
}
