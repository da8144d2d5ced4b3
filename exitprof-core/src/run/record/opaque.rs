//! What a record file keeps instead of the kernel's addresses. A record is shared (sent with a
//! bug report, read by other users): none of its bytes may tell where the kernel lies in memory,
//! which `kptr_restrict` hides from them and KASLR depends on. The raw records carry two kinds of
//! address, and each is kept for what it is used for:
//!
//! - a stack's return addresses name its frames. Each distinct address becomes a frame of the
//!   file, at a made-up address [`FRAME_SPACING`] from the previous frame's; the closing's symbols
//!   place each frame's function so that the frame lies at its own offset in it, symbol +
//!   offset. A reader names the frames through [`crate::kernel::kallsyms::Kallsyms::of_symbols`]
//!   as it names real addresses with their real symbols (older files: format 2 reads both), and
//!   a frame kallsyms could not name stays unnamed, with no symbol within reach.
//! - a namespace's address (an exit record's IPC, network and user namespaces; the namespace an
//!   IPC namespace free or a network or user namespace teardown names) only says which namespace:
//!   it becomes the namespace's number in the order the run met it (0, unknown, stays 0), so that
//!   an exit still joins the free or teardown of its namespace. One numbering for every kind: the
//!   same address is the same number wherever it appears, as the run saw it.

use std::{collections::HashMap, mem::offset_of};

use exitprof_common::{
    deferred::{DeferredKind, DeferredRecord},
    record::ExitRecord,
    stack::{STACK_HEADER_LEN, StackRecord},
};

use super::container::Kind;
use crate::kernel::kallsyms::{Kallsyms, MAX_FUNCTION_BYTES};

/// How far apart the made-up addresses of two frames lie: further than any frame lies from its
/// function's start, so that a frame is never named after the symbol of another.
const FRAME_SPACING: u64 = 1 << 20;
const _: () = assert!(FRAME_SPACING > 2 * MAX_FUNCTION_BYTES);

/// The kernel addresses a run's records held, and what its file holds instead.
#[derive(Debug, Default)]
pub struct Opaque {
    /// Return address → the frame's made-up address.
    frames: HashMap<u64, u64>,
    /// IPC namespace address → its number.
    namespaces: HashMap<u64, u64>,
}

impl Opaque {
    /// `record`, of `kind`, with its kernel addresses replaced.
    pub fn conceal(&mut self, kind: Kind, record: &mut [u8]) {
        match kind {
            Kind::Exit => self.exit(record),
            Kind::Deferred => self.deferred(record),
            Kind::Stack => self.stack(record),
            Kind::Cgroup | Kind::Opening | Kind::Closing => {}
        }
    }

    /// The symbols that name the file's frames, lowest first: for each frame kallsyms names,
    /// its function placed the frame's offset before it.
    pub fn symbols(&self, kallsyms: &Kallsyms) -> Vec<(u64, String)> {
        let mut symbols: Vec<(u64, String)> = self
            .frames
            .iter()
            .filter_map(|(&address, &frame)| {
                let (start, name) = kallsyms.symbol_of(address)?;
                Some((frame - (address - start), name.to_owned()))
            })
            .collect();
        symbols.sort_unstable();
        symbols
    }

    fn exit(&mut self, record: &mut [u8]) {
        let namespaces = [
            offset_of!(ExitRecord, ipc_ns),
            offset_of!(ExitRecord, net_ns),
            offset_of!(ExitRecord, user_ns),
        ];
        for at in namespaces {
            self.number_namespace(record, at);
        }
    }

    /// The records that name a namespace by its address (others name a pid, or nothing).
    fn deferred(&mut self, record: &mut [u8]) {
        const OF_A_NAMESPACE: [DeferredKind; 3] =
            [DeferredKind::IpcNsFreed, DeferredKind::NetNsTornDown, DeferredKind::UserNsTeardown];
        let kind = record.get(..4).map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")));
        if record.len() == size_of::<DeferredRecord>()
            && OF_A_NAMESPACE.iter().any(|&k| kind == Some(k as u32))
        {
            self.number_namespace(record, offset_of!(DeferredRecord, object));
        }
    }

    /// The namespace address at `at` of `record` replaced by its number.
    fn number_namespace(&mut self, record: &mut [u8], at: usize) {
        if let Some(ns) = word(record, at) {
            let number = self.namespace(ns);
            put_word(record, at, number);
        }
    }

    /// Every frame the record holds made up, and the slots past its length zeroed (a sample is
    /// sent whole, whatever its length).
    fn stack(&mut self, record: &mut [u8]) {
        let len_at = offset_of!(StackRecord, stack_len);
        let Some(frames) = record.get(len_at..len_at + 4) else { return };
        let frames = u32::from_ne_bytes(frames.try_into().expect("4 bytes")) as usize;
        let slots = record.len().saturating_sub(STACK_HEADER_LEN) / 8;
        for slot in 0..slots {
            let at = STACK_HEADER_LEN + slot * 8;
            let made_up = match word(record, at) {
                Some(address) if slot < frames && address != 0 => self.frame(address),
                _ => 0,
            };
            put_word(record, at, made_up);
        }
    }

    fn frame(&mut self, address: u64) -> u64 {
        let next = (self.frames.len() as u64 + 1) * FRAME_SPACING;
        *self.frames.entry(address).or_insert(next)
    }

    fn namespace(&mut self, address: u64) -> u64 {
        if address == 0 {
            return 0;
        }
        let next = self.namespaces.len() as u64 + 1;
        *self.namespaces.entry(address).or_insert(next)
    }
}

fn word(record: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().expect("8 bytes")))
}

fn put_word(record: &mut [u8], at: usize, value: u64) {
    record[at..at + 8].copy_from_slice(&value.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use exitprof_common::stack::{STACK_ON_CPU, stack_wire_len};

    use super::*;
    use crate::analysis::records::{decode_deferred, decode_stack};

    const KALLSYMS: &str = "\
ffffffff81aac9e0 t free_ipc
ffffffff81aad080 T put_ipc_ns
ffffffff81aad100 t do_exit
ffffffffc0000000 t some_fn\t[some_module]
";

    /// The kernel addresses of the tests' records: in the kernel's text, in a module, and one
    /// kallsyms does not name (code loaded after it was read).
    const IN_DO_EXIT: u64 = 0xffff_ffff_81aa_d1a4;
    const IN_MODULE: u64 = 0xffff_ffff_c000_0010;
    const UNNAMED: u64 = 0xffff_ffff_c100_0000;

    fn stack_record(frames: &[u64], sent: usize) -> Vec<u8> {
        // SAFETY: all-zero is a valid StackRecord.
        let mut record: StackRecord = unsafe { std::mem::zeroed() };
        record.kind = STACK_ON_CPU;
        record.stack_len = frames.len() as u32;
        record.stack[..frames.len()].copy_from_slice(frames);
        // A stale address past the frames, as a reused buffer may hold.
        record.stack[frames.len()] = IN_MODULE;
        // SAFETY: plain integers, no padding.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const record).cast::<u8>(), size_of::<StackRecord>())
        };
        bytes[..sent].to_vec()
    }

    fn kernel_words(record: &[u8]) -> Vec<u64> {
        record
            .windows(8)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
            .filter(|&w| w >= 0xffff_8000_0000_0000)
            .collect()
    }

    /// Frames read back through the file's symbols are named as the running kernel's table names
    /// the raw addresses, the unnamed one included; the same address is the same frame in every
    /// record; and no kernel address is left, past the frames either.
    #[test]
    fn frames_are_named_as_before_and_no_address_is_left() {
        let kallsyms = Kallsyms::parse(KALLSYMS.as_bytes()).unwrap();
        let mut opaque = Opaque::default();
        let raw = [IN_DO_EXIT, IN_MODULE, UNNAMED];
        let mut whole = stack_record(&raw, size_of::<StackRecord>());
        let mut trimmed = stack_record(&raw[1..], stack_wire_len(2));
        opaque.conceal(Kind::Stack, &mut whole);
        opaque.conceal(Kind::Stack, &mut trimmed);
        assert_eq!(kernel_words(&whole), [0; 0], "addresses left in {whole:?}");
        assert_eq!(kernel_words(&trimmed), [0; 0]);

        let file = Kallsyms::of_symbols(&opaque.symbols(&kallsyms));
        let whole = decode_stack(&whole).unwrap().stack;
        let trimmed = decode_stack(&trimmed).unwrap().stack;
        assert_eq!(whole[1..], trimmed[..], "one address, one frame");
        for (raw, made_up) in raw.iter().zip(&whole) {
            assert_eq!(file.name_of(*made_up), kallsyms.name_of(*raw), "{raw:#x}");
        }
        // Symbol + offset: the frame lies as far into its function as the address did.
        let (start, _) = file.symbol_of(whole[0]).unwrap();
        assert_eq!(whole[0] - start, IN_DO_EXIT - 0xffff_ffff_81aa_d100);
    }

    fn deferred(kind: DeferredKind, object: u64) -> Vec<u8> {
        let record = DeferredRecord { kind: kind as u32, object, ..DeferredRecord::default() };
        // SAFETY: plain integers, no padding.
        unsafe {
            std::slice::from_raw_parts(
                (&raw const record).cast::<u8>(),
                size_of::<DeferredRecord>(),
            )
        }
        .to_vec()
    }

    #[test]
    fn namespaces_are_numbered_in_the_order_met() {
        const IPC: u64 = 0xffff_8880_0777_0000;
        const NET: u64 = 0xffff_8880_0888_0000;
        const USER: u64 = 0xffff_8880_0999_0000;
        const OTHER: u64 = 0xffff_8880_0123_4000;
        let mut opaque = Opaque::default();
        // SAFETY: all-zero is a valid ExitRecord.
        let mut exit: ExitRecord = unsafe { std::mem::zeroed() };
        (exit.ipc_ns, exit.net_ns, exit.user_ns) = (IPC, NET, USER);
        // SAFETY: plain integers and bytes, no padding.
        let mut exit = unsafe {
            std::slice::from_raw_parts((&raw const exit).cast::<u8>(), size_of::<ExitRecord>())
        }
        .to_vec();
        opaque.conceal(Kind::Exit, &mut exit);
        let mut records = [
            deferred(DeferredKind::IpcNsFreed, OTHER),
            deferred(DeferredKind::IpcNsFreed, 0),
            deferred(DeferredKind::IpcNsFreed, IPC),
            deferred(DeferredKind::IpcNsFreed, OTHER),
            deferred(DeferredKind::NetNsTornDown, NET),
            deferred(DeferredKind::UserNsTeardown, USER),
        ];
        let mut of_pids =
            [deferred(DeferredKind::Reap, 42), deferred(DeferredKind::NetNsAtFree, 43)];
        for record in records.iter_mut().chain(&mut of_pids) {
            opaque.conceal(Kind::Deferred, record);
        }
        let objects: Vec<u64> =
            records.iter().map(|r| decode_deferred(r).unwrap().object).collect();
        assert_eq!(objects, [4, 0, 1, 4, 2, 3], "the exit's namespaces were met first");
        let ats = [
            offset_of!(ExitRecord, ipc_ns),
            offset_of!(ExitRecord, net_ns),
            offset_of!(ExitRecord, user_ns),
        ];
        let exit_numbers: Vec<Option<u64>> = ats.iter().map(|&at| word(&exit, at)).collect();
        assert_eq!(exit_numbers, [Some(1), Some(2), Some(3)]);
        let pids: Vec<u64> = of_pids.iter().map(|r| decode_deferred(r).unwrap().object).collect();
        assert_eq!(pids, [42, 43], "a reap's and a free's pid are kept");
    }
}
