//! The container of a record file: a header that says what the file is and which version of the
//! format it follows, then one gzip stream of frames.
//!
//! ```text
//! magic     16 bytes: "exitprof record\n"
//! version   u32, little-endian
//! gzip      one gzip member (RFC 1952: its CRC-32 and length tell damage), up to the end of
//!           the file, of frames:
//!   kind      u8 (see Kind)
//!   length    u32, little-endian
//!   payload   `length` bytes
//! ```

use std::{
    fs::File,
    io::{self, BufRead, BufReader, BufWriter, Read, Write},
    mem::offset_of,
    path::Path,
};

use exitprof_common::{deferred::DeferredRecord, record::ExitRecord};
use flate2::{Compression, bufread::GzDecoder, write::GzEncoder};

use crate::base::atomic_file::AtomicFile;

/// What every record file begins with.
pub const MAGIC: &[u8; 16] = b"exitprof record\n";
/// The format this exitprof writes, and the newest it reads: raised by any change an older
/// exitprof would misread, which then refuses the file instead.
///
/// 2: exit records carry their cgroup and names (format 1's are read with those unknown).
/// 3: exit records carry their network and user namespaces, deferred-work records the fields of
/// namespace teardowns, stack records those of teardowns' kworkers (format 1's and 2's are read
/// with those unknown).
pub const VERSION: u32 = 3;
/// No frame is larger (the largest, the closing, holds the names of a run's stacks): a larger
/// length is damage, not something to allocate.
const MAX_FRAME: u32 = 64 << 20;

/// What a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The run's setup (JSON); the first frame.
    Opening = 1,
    /// A raw record of the exit ring buffer.
    Exit = 2,
    /// A raw record of the deferred-work ring buffer.
    Deferred = 3,
    /// A raw record of the kernel-stack ring buffer.
    Stack = 4,
    /// How the run ended (JSON); the last frame.
    Closing = 5,
    /// A raw record of the cgroup ring buffer, or a cgroup found in the tree (format 2).
    Cgroup = 6,
}

impl Kind {
    fn of(byte: u8) -> Option<Self> {
        [Self::Opening, Self::Exit, Self::Deferred, Self::Stack, Self::Closing, Self::Cgroup]
            .into_iter()
            .find(|&k| k as u8 == byte)
    }
}

/// Why a record file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read it: {0}")]
    Unreadable(io::Error),
    #[error(
        "it is not an exitprof record (a record begins with {:?})",
        String::from_utf8_lossy(MAGIC)
    )]
    NotARecord,
    #[error(
        "it was written by a newer exitprof, in record format {0}; this exitprof reads format \
         {VERSION} and older: report it with that exitprof or a later one"
    )]
    Newer(u32),
    #[error("it is truncated: it ends before the end of the run it records")]
    Truncated,
    #[error("it is damaged: {0}")]
    Damaged(String),
    #[error(
        "its exits carry no task names (it was written in record format 1, before they did): \
         --comm cannot choose among them; --pid can"
    )]
    Unnamed,
    #[error(
        "{undecodable} of its {records} exit records do not decode as record format {version}, \
         the format its header gives: the header, which the compressed stream's checksum does \
         not cover, is damaged, or the file was not written by exitprof"
    )]
    ExitsUndecodable { undecodable: u64, records: u64, version: u32 },
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => Self::Truncated,
            // The decoder's word for a corrupt stream or a CRC that does not match.
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => {
                Self::Damaged(e.to_string())
            }
            _ => Self::Unreadable(e),
        }
    }
}

/// A record file being written: frames compressed into an [`AtomicFile`], in place once
/// committed.
pub struct Writer {
    /// Buffered ahead of the encoder: records are small, and compressing each alone is slow.
    out: BufWriter<GzEncoder<AtomicFile>>,
    /// The first write that failed: nothing is written after it, and the commit reports it.
    failed: Option<io::Error>,
}

impl Writer {
    pub fn create(path: &Path) -> io::Result<Self> {
        let mut file = AtomicFile::create(path)?;
        file.write_all(MAGIC)?;
        file.write_all(&VERSION.to_le_bytes())?;
        // The fastest level: exitprof compresses while it collects, on the CPU it measures.
        let encoder = GzEncoder::new(file, Compression::fast());
        Ok(Self { out: BufWriter::with_capacity(64 << 10, encoder), failed: None })
    }

    /// Adds one frame. Records come in where an error has nowhere to go: the first one is kept
    /// for [`Writer::commit`].
    pub fn frame(&mut self, kind: Kind, payload: &[u8]) {
        if self.failed.is_none()
            && let Err(e) = self.write_frame(kind, payload)
        {
            self.failed = Some(e);
        }
    }

    fn write_frame(&mut self, kind: Kind, payload: &[u8]) -> io::Result<()> {
        let length = u32::try_from(payload.len())
            .ok()
            .filter(|&n| n <= MAX_FRAME)
            .ok_or_else(|| io::Error::other(format!("a frame of {} bytes", payload.len())))?;
        self.out.write_all(&[kind as u8])?;
        self.out.write_all(&length.to_le_bytes())?;
        self.out.write_all(payload)
    }

    /// Ends the compressed stream and puts the file in place.
    pub fn commit(self) -> io::Result<()> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let encoder = self.out.into_inner().map_err(io::IntoInnerError::into_error)?;
        encoder.finish()?.commit()
    }
}

/// A record file being read, frame by frame.
pub struct Reader {
    frames: BufReader<GzDecoder<BufReader<File>>>,
    version: u32,
    payload: Vec<u8>,
}

impl Reader {
    /// Opens a record file, checking what it is and its version.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let mut file = BufReader::new(File::open(path).map_err(ReadError::Unreadable)?);
        let mut header = [0; MAGIC.len() + 4];
        let got = read_up_to(&mut file, &mut header)?;
        let (magic, version) = header.split_at(MAGIC.len());
        if got == 0 || magic[..got.min(MAGIC.len())] != MAGIC[..got.min(MAGIC.len())] {
            return Err(ReadError::NotARecord);
        }
        if got < header.len() {
            return Err(ReadError::Truncated);
        }
        let version = match u32::from_le_bytes(version.try_into().expect("4 bytes")) {
            0 => return Err(ReadError::Damaged("it says format version 0".to_owned())),
            v if v > VERSION => return Err(ReadError::Newer(v)),
            v => v,
        };
        Ok(Self { frames: BufReader::new(GzDecoder::new(file)), version, payload: Vec::new() })
    }

    /// The format its header gives.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The next frame; `None` at the end of the stream.
    pub fn next(&mut self) -> Result<Option<(Kind, &[u8])>, ReadError> {
        let mut head = [0; 5];
        match read_up_to(&mut self.frames, &mut head)? {
            0 => return Ok(None),
            n if n < head.len() => return Err(ReadError::Truncated),
            _ => {}
        }
        let kind = Kind::of(head[0])
            .ok_or_else(|| ReadError::Damaged(format!("a frame of unknown kind {}", head[0])))?;
        let length = u32::from_le_bytes(head[1..].try_into().expect("4 bytes"));
        if length > MAX_FRAME {
            return Err(ReadError::Damaged(format!("a frame of {length} bytes")));
        }
        self.payload.resize(length as usize, 0);
        self.frames.read_exact(&mut self.payload)?;
        match kind {
            Kind::Exit => upgrade_exit(self.version, &mut self.payload),
            Kind::Deferred => upgrade_deferred(self.version, &mut self.payload),
            _ => {}
        }
        Ok(Some((kind, &self.payload)))
    }

    /// Checks that the last frame read ends the file: the compressed stream ends there (which
    /// checks its CRC-32 and length), and the file with it.
    pub fn finish(mut self) -> Result<(), ReadError> {
        if let Some((kind, _)) = self.next()? {
            return Err(ReadError::Damaged(format!("a frame ({kind:?}) after the last")));
        }
        let mut file = self.frames.into_inner().into_inner();
        if !file.fill_buf()?.is_empty() {
            return Err(ReadError::Damaged("data after its compressed stream".to_owned()));
        }
        Ok(())
    }
}

/// An exit record of an earlier format as this exitprof's kernel side sends them: format 1's had
/// no namespaces but the IPC one, cgroup and names, format 2's no network and user namespaces,
/// where these now lie (after the IPC namespace); they read as unknown (zero).
fn upgrade_exit(version: u32, record: &mut Vec<u8>) {
    let at = offset_of!(ExitRecord, net_ns);
    let added = match version {
        1 => offset_of!(ExitRecord, points) - at,
        2 => offset_of!(ExitRecord, cgroup_id) - at,
        _ => return,
    };
    if record.len() >= at {
        record.splice(at..at, std::iter::repeat_n(0, added));
    }
}

/// A deferred-work record of format 1 or 2, which ended before the fields of namespace teardowns:
/// they read as zero.
fn upgrade_deferred(version: u32, record: &mut Vec<u8>) {
    if version <= 2 && record.len() == offset_of!(DeferredRecord, runq_ns) {
        record.resize(size_of::<DeferredRecord>(), 0);
    }
}

/// Reads until `buf` is full or the input ends; returns how much it read.
fn read_up_to(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(frames: &[(Kind, &[u8])]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.rec");
        let mut writer = Writer::create(&path).unwrap();
        for &(kind, payload) in frames {
            writer.frame(kind, payload);
        }
        writer.commit().unwrap();
        (dir, path)
    }

    fn read_all(path: &Path) -> Result<Vec<(Kind, Vec<u8>)>, ReadError> {
        let mut reader = Reader::open(path)?;
        let mut frames = Vec::new();
        while let Some((kind, payload)) = reader.next()? {
            frames.push((kind, payload.to_vec()));
        }
        reader.finish()?;
        Ok(frames)
    }

    const FRAMES: &[(Kind, &[u8])] = &[
        (Kind::Opening, b"{}"),
        (Kind::Exit, &[1, 2, 3]),
        (Kind::Stack, &[]),
        (Kind::Deferred, &[9; 300]),
        (Kind::Closing, b"{}"),
    ];

    #[test]
    fn frames_are_read_back_as_written_in_order() {
        let (_dir, path) = written(FRAMES);
        let frames = read_all(&path).unwrap();
        let expected: Vec<(Kind, Vec<u8>)> = FRAMES.iter().map(|&(k, p)| (k, p.to_vec())).collect();
        assert_eq!(frames, expected);
        assert_eq!(&std::fs::read(&path).unwrap()[..MAGIC.len()], MAGIC);
    }

    /// Cut anywhere, a file is refused as truncated (or, cut inside its magic, as no record):
    /// never read as a shorter run.
    #[test]
    fn every_cut_is_refused() {
        let (dir, path) = written(FRAMES);
        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut.rec");
        for len in 0..bytes.len() {
            std::fs::write(&cut, &bytes[..len]).unwrap();
            match read_all(&cut) {
                Err(ReadError::Truncated) => {}
                Err(ReadError::NotARecord) if len <= MAGIC.len() => {}
                other => panic!("cut at {len} of {}: {other:?}", bytes.len()),
            }
        }
    }

    /// A byte changed anywhere past the header is refused (the decoder, the gzip CRC-32 or the
    /// frames find it), never read as other figures; but for the gzip header's time, flags of
    /// the compressor and system (its bytes 4 to 9), which say nothing of what it holds.
    #[test]
    fn every_damaged_byte_is_refused() {
        let (dir, path) = written(FRAMES);
        let bytes = std::fs::read(&path).unwrap();
        let damaged = dir.path().join("damaged.rec");
        let gzip = MAGIC.len() + 4;
        for at in gzip..bytes.len() {
            let mut copy = bytes.clone();
            copy[at] ^= 0x5a;
            std::fs::write(&damaged, &copy).unwrap();
            match read_all(&damaged) {
                Err(_) => {}
                Ok(frames) if (gzip + 4..gzip + 10).contains(&at) => {
                    assert_eq!(frames, read_all(&path).unwrap());
                }
                Ok(_) => panic!("byte {at} of {} changed, and the file read", bytes.len()),
            }
        }
    }

    #[test]
    fn other_files_and_versions_say_what_they_are() {
        let (dir, path) = written(FRAMES);
        let other = dir.path().join("other");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&(VERSION + 1).to_le_bytes());
        std::fs::write(&other, &bytes).unwrap();
        assert!(matches!(read_all(&other), Err(ReadError::Newer(v)) if v == VERSION + 1));
        std::fs::write(&other, "{\"partial\": false}\n").unwrap();
        assert!(matches!(read_all(&other), Err(ReadError::NotARecord)));
        bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"more");
        std::fs::write(&other, &bytes).unwrap();
        assert!(matches!(read_all(&other), Err(ReadError::Damaged(_))));
        let missing = read_all(&dir.path().join("nosuch")).unwrap_err();
        assert!(matches!(missing, ReadError::Unreadable(_)), "{missing:?}");
    }
}
