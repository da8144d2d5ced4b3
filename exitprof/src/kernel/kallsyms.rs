//! `/proc/kallsyms`: which kernel functions exist as symbols, and where.

use std::io::{self, BufRead};

/// An address this far past the closest symbol is not in that function (kernel functions are a
/// few KiB at most; past the end of the kernel text the closest symbol is a section marker).
const MAX_FUNCTION_BYTES: u64 = 128 * 1024;

/// Text (function) symbols of the running kernel, by name and by address.
///
/// A kernel has some 120,000 of them: their names are kept in one string, each symbol as an
/// address and a span of it, with an index by name beside the list by address. (A map and a list
/// of owned names took 16 MiB, a fifth of exitprof's peak memory.)
#[derive(Debug, Default)]
pub struct Kallsyms {
    names: String,
    /// Sorted by address, for naming code addresses.
    by_address: Vec<Symbol>,
    /// Indices into `by_address`, sorted by name (the lowest address first among equal names).
    by_name: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Symbol {
    address: u64,
    start: u32,
    len: u32,
}

impl Kallsyms {
    pub fn load() -> io::Result<Self> {
        Self::parse(io::BufReader::new(std::fs::File::open("/proc/kallsyms")?))
    }

    /// Parses kallsyms lines (`ADDRESS TYPE NAME [MODULE]`), keeping text symbols.
    pub fn parse(mut reader: impl BufRead) -> io::Result<Self> {
        let mut symbols = Self::default();
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 {
            let mut fields = line.split_whitespace();
            if let (Some(addr), Some("t" | "T"), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            {
                let start = symbols.names.len() as u32;
                symbols.names.push_str(name);
                symbols.by_address.push(Symbol {
                    address: u64::from_str_radix(addr, 16).unwrap_or(0),
                    start,
                    len: name.len() as u32,
                });
            }
            line.clear();
        }
        symbols.names.shrink_to_fit();
        symbols.by_address.sort_unstable_by_key(|s| (s.address, s.start));
        let mut by_name: Vec<u32> = (0..symbols.by_address.len() as u32).collect();
        // A total order (ties by address), so an unstable sort gives the one result, faster.
        by_name.sort_unstable_by(|&a, &b| symbols.name(a).cmp(symbols.name(b)).then(a.cmp(&b)));
        symbols.by_name = by_name;
        Ok(symbols)
    }

    fn name(&self, index: u32) -> &str {
        let s = &self.by_address[index as usize];
        &self.names[s.start as usize..(s.start + s.len) as usize]
    }

    /// The function a code address lies in (`None` when addresses are hidden or unknown, e.g.
    /// code loaded after kallsyms was read, like eBPF programs).
    pub fn name_of(&self, addr: u64) -> Option<&str> {
        let at = self.by_address.partition_point(|s| s.address <= addr);
        let i = at.checked_sub(1)?;
        let start = self.by_address[i].address;
        (start != 0 && addr - start < MAX_FUNCTION_BYTES).then(|| self.name(i as u32))
    }

    /// The indices of the symbols named from `name` on, in name order.
    fn named_from<'a>(&'a self, name: &str) -> impl Iterator<Item = u32> + 'a {
        let at = self.by_name.partition_point(|&i| self.name(i) < name);
        self.by_name[at..].iter().copied()
    }

    pub fn has_function(&self, name: &str) -> bool {
        self.address(name).is_some()
    }

    /// Address of a function; 0 when kallsyms hides addresses (`kptr_restrict`).
    pub fn address(&self, name: &str) -> Option<u64> {
        let i = self.named_from(name).next().filter(|&i| self.name(i) == name)?;
        Some(self.by_address[i as usize].address)
    }

    /// Compiler clones of a function (`name.isra.0`, `name.constprop.0`, ...), which are not the
    /// function itself.
    pub fn clones_of(&self, name: &str) -> Vec<&str> {
        let prefix = format!("{name}.");
        let mut clones: Vec<&str> = self
            .named_from(&prefix)
            .map(|i| self.name(i))
            .take_while(|n| n.starts_with(&prefix))
            .collect();
        clones.dedup();
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
