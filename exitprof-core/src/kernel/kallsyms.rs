//! `/proc/kallsyms`: which kernel functions exist as symbols, and where.

use std::{
    collections::HashMap,
    fs::File,
    io::{self, BufRead, BufReader},
    sync::{Mutex, OnceLock, PoisonError},
};

const PATH: &str = "/proc/kallsyms";

/// An address this far past the closest symbol is not in that function (kernel functions are a
/// few KiB at most; past the end of the kernel text the closest symbol is a section marker).
pub const MAX_FUNCTION_BYTES: u64 = 128 * 1024;

/// The running kernel's function symbols, read from kallsyms as far as they are needed.
///
/// The kernel formats kallsyms' 120,000 lines anew at every read, and parsing and indexing them
/// took another as long: together a quarter of the CPU time of a short run. Most runs need one
/// address (`free_ipc`, in tracepoint mode), found by reading up to it, and names only for the
/// kernel stacks they took, if any; the whole table is read the first time a question needs it.
#[derive(Debug, Default)]
pub struct Kallsyms {
    table: OnceLock<SymbolTable>,
    /// Addresses found by reading up to their symbol, while the table is not read.
    addresses: Mutex<HashMap<String, Option<u64>>>,
}

impl Kallsyms {
    /// The running kernel's symbols, read as they are asked for; fails now if kallsyms cannot be
    /// read at all.
    pub fn open() -> io::Result<Self> {
        File::open(PATH)?;
        Ok(Self::default())
    }

    /// Symbols from kallsyms lines (`ADDRESS TYPE NAME [MODULE]`), all read now.
    #[cfg(any(test, feature = "test-support"))]
    pub fn parse(reader: impl BufRead) -> io::Result<Self> {
        Ok(Self { table: SymbolTable::parse(reader)?.into(), addresses: Mutex::default() })
    }

    /// The whole table, read on first use. Should kallsyms have become unreadable since
    /// [`Kallsyms::open`], no function is known, and stacks are left unnamed.
    fn table(&self) -> &SymbolTable {
        self.table.get_or_init(|| {
            log::debug!("reading the whole of {PATH}");
            File::open(PATH)
                .and_then(|file| SymbolTable::parse(BufReader::new(file)))
                .unwrap_or_else(|e| {
                    log::warn!("cannot read {PATH}: {e}; kernel functions are unknown");
                    SymbolTable::default()
                })
        })
    }

    /// The function a code address lies in (`None` when addresses are hidden or unknown, e.g.
    /// code loaded after the whole table was read; eBPF programs loaded before are listed as
    /// `bpf_prog_*`).
    pub fn name_of(&self, addr: u64) -> Option<&str> {
        self.table().name_of(addr)
    }

    /// The function a code address lies in, as [`Kallsyms::name_of`], with its address.
    pub fn symbol_of(&self, addr: u64) -> Option<(u64, &str)> {
        self.table().symbol_of(addr)
    }

    pub fn has_function(&self, name: &str) -> bool {
        self.table().address(name).is_some()
    }

    /// Address of a function (the first listed, where several have its name); 0 when kallsyms
    /// hides addresses (`kptr_restrict`). Without the whole table, kallsyms is read up to it.
    pub fn address(&self, name: &str) -> Option<u64> {
        if let Some(table) = self.table.get() {
            return table.address(name);
        }
        let mut addresses = self.addresses.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&known) = addresses.get(name) {
            return known;
        }
        let found = File::open(PATH)
            .and_then(|file| address_in(BufReader::new(file), name))
            .unwrap_or_else(|e| {
                log::warn!("cannot read {PATH}: {e}");
                None
            });
        addresses.insert(name.to_owned(), found);
        found
    }

    /// Compiler clones of a function (`name.isra.0`, `name.constprop.0`, ...), which are not the
    /// function itself.
    pub fn clones_of(&self, name: &str) -> Vec<&str> {
        self.table().clones_of(name)
    }

    /// A table of these symbols only (a record file's): it names the addresses they were kept
    /// for as the whole table did, as long as no other symbol lies between an address and the
    /// one it is in; it reads nothing of the running kernel.
    pub fn of_symbols(symbols: &[(u64, String)]) -> Self {
        let mut table = SymbolTable::default();
        for (address, name) in symbols {
            table.push(*address, name);
        }
        Self { table: table.indexed().into(), addresses: Mutex::default() }
    }
}

/// A text (function) symbol's address and name, from a kallsyms line.
fn text_symbol(line: &str) -> Option<(u64, &str)> {
    let mut fields = line.split_whitespace();
    match (fields.next(), fields.next(), fields.next()) {
        (Some(addr), Some("t" | "T"), Some(name)) => {
            Some((u64::from_str_radix(addr, 16).unwrap_or(0), name))
        }
        _ => None,
    }
}

/// The address of the first text symbol named `name`, reading no further than it.
fn address_in(mut reader: impl BufRead, name: &str) -> io::Result<Option<u64>> {
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 {
        if let Some((address, found)) = text_symbol(&line)
            && found == name
        {
            return Ok(Some(address));
        }
        line.clear();
    }
    Ok(None)
}

/// Text symbols by name and by address.
///
/// A kernel has some 120,000 of them: their names are kept in one string, each symbol as an
/// address and a span of it, with an index by name beside the list by address. (A map and a list
/// of owned names took 16 MiB, a fifth of exitprof's peak memory.)
#[derive(Debug, Default)]
struct SymbolTable {
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

impl SymbolTable {
    fn parse(mut reader: impl BufRead) -> io::Result<Self> {
        let mut symbols = Self::default();
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 {
            if let Some((address, name)) = text_symbol(&line) {
                symbols.push(address, name);
            }
            line.clear();
        }
        Ok(symbols.indexed())
    }

    fn push(&mut self, address: u64, name: &str) {
        let start = self.names.len() as u32;
        self.names.push_str(name);
        self.by_address.push(Symbol { address, start, len: name.len() as u32 });
    }

    /// Sorted and indexed by name, once every symbol is pushed.
    fn indexed(mut self) -> Self {
        self.names.shrink_to_fit();
        self.by_address.sort_unstable_by_key(|s| (s.address, s.start));
        let mut by_name: Vec<u32> = (0..self.by_address.len() as u32).collect();
        // A total order (ties by address), so an unstable sort gives the one result, faster.
        by_name.sort_unstable_by(|&a, &b| self.name(a).cmp(self.name(b)).then(a.cmp(&b)));
        self.by_name = by_name;
        self
    }

    fn name(&self, index: u32) -> &str {
        let s = &self.by_address[index as usize];
        &self.names[s.start as usize..(s.start + s.len) as usize]
    }

    fn name_of(&self, addr: u64) -> Option<&str> {
        self.symbol_of(addr).map(|(_, name)| name)
    }

    /// The symbol `addr` lies in: its address and name.
    fn symbol_of(&self, addr: u64) -> Option<(u64, &str)> {
        let at = self.by_address.partition_point(|s| s.address <= addr);
        let i = at.checked_sub(1)?;
        let start = self.by_address[i].address;
        (start != 0 && addr - start < MAX_FUNCTION_BYTES).then(|| (start, self.name(i as u32)))
    }

    /// The indices of the symbols named from `name` on, in name order.
    fn named_from<'a>(&'a self, name: &str) -> impl Iterator<Item = u32> + 'a {
        let at = self.by_name.partition_point(|&i| self.name(i) < name);
        self.by_name[at..].iter().copied()
    }

    fn address(&self, name: &str) -> Option<u64> {
        let i = self.named_from(name).next().filter(|&i| self.name(i) == name)?;
        Some(self.by_address[i as usize].address)
    }

    fn clones_of(&self, name: &str) -> Vec<&str> {
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
    use std::{collections::BTreeMap, io::Read};

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

    #[test]
    fn one_address_is_found_by_reading_up_to_it() {
        let first_of = |name| address_in(SAMPLE.as_bytes(), name).unwrap();
        assert_eq!(first_of("free_ipc"), Some(0xffffffff81aac9e0));
        assert_eq!(first_of("some_fn"), Some(0xffffffffc0000000), "module functions too");
        assert_eq!(first_of("init_ipc_ns"), None, "data symbols are not functions");
        assert_eq!(first_of("free_ipc_ns"), None, "a clone is not the function");
        // Nothing past the symbol is read: kallsyms that fails there still gives it.
        let failing_past_the_end = || BufReader::new(SAMPLE.as_bytes().chain(Unreadable));
        assert_eq!(
            address_in(failing_past_the_end(), "some_fn").unwrap(),
            Some(0xffffffffc0000000)
        );
        assert!(address_in(failing_past_the_end(), "no_such_fn").is_err());
    }

    #[test]
    fn the_symbols_of_some_addresses_name_them_as_the_whole_table_does() {
        let whole = Kallsyms::parse(SAMPLE.as_bytes()).unwrap();
        let addresses = [
            0xffffffff81aac9e8,
            0xffffffff81aac9e0,
            0xffffffff81aad100 + 0x40,
            0x1000,
            0xffffffff81aad080 + 4 * 1024 * 1024,
        ];
        let kept: BTreeMap<u64, String> = addresses
            .iter()
            .filter_map(|&a| whole.symbol_of(a))
            .map(|(address, name)| (address, name.to_owned()))
            .collect();
        let kept: Vec<(u64, String)> = kept.into_iter().collect();
        let names: Vec<&str> = kept.iter().map(|(_, name)| name.as_str()).collect();
        assert_eq!(names, ["free_ipc", "free_ipc_ns.isra.0"], "each symbol once, no other");
        let part = Kallsyms::of_symbols(&kept);
        for address in addresses {
            assert_eq!(part.name_of(address), whole.name_of(address), "{address:#x}");
        }
    }

    struct Unreadable;

    impl Read for Unreadable {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::other("read past the symbol"))
        }
    }
}
