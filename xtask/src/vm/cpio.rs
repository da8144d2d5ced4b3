//! A writer for the "newc" cpio format, the one the kernel unpacks an initramfs from
//! (Documentation/driver-api/early-userspace/buffer-format.rst).

use std::io::{self, Write};

const MAGIC: &str = "070701";
const TRAILER: &str = "TRAILER!!!";

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// Writes a newc archive entry by entry; [`Archive::finish`] writes the trailer.
pub struct Archive<W: Write> {
    out: W,
    next_ino: u32,
}

impl<W: Write> Archive<W> {
    pub fn new(out: W) -> Self {
        Self { out, next_ino: 1 }
    }

    /// A directory; its parents must come before it.
    pub fn dir(&mut self, path: &str) -> io::Result<()> {
        self.entry(path, S_IFDIR | 0o755, 2, b"")
    }

    /// A regular file with the given permission bits.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.entry(path, S_IFREG | mode, 1, data)
    }

    /// A symbolic link to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.entry(path, S_IFLNK | 0o777, 1, target.as_bytes())
    }

    /// Writes the trailer and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry(TRAILER, 0, 1, b"")?;
        Ok(self.out)
    }

    fn entry(&mut self, path: &str, mode: u32, nlink: u32, data: &[u8]) -> io::Result<()> {
        // Names are relative to the archive root; the kernel takes them as given.
        let name = path.trim_start_matches('/');
        let ino = self.next_ino;
        self.next_ino += 1;
        let too_big = |_| io::Error::new(io::ErrorKind::InvalidInput, format!("{path}: too big"));
        let size = u32::try_from(data.len()).map_err(too_big)?;
        let name_size = u32::try_from(name.len() + 1).map_err(too_big)?;
        // ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
        // namesize, check: 8 hex digits each. A zero mtime keeps the archive reproducible.
        let fields = [ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, name_size, 0];
        let mut header = String::from(MAGIC);
        for field in fields {
            header.push_str(&format!("{field:08x}"));
        }
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(b"\0")?;
        // The name is padded so that the data starts on a multiple of four; so is the data.
        self.pad(header.len() + name.len() + 1)?;
        self.out.write_all(data)?;
        self.pad(data.len())
    }

    fn pad(&mut self, written: usize) -> io::Result<()> {
        self.out.write_all(&[0; 3][..(4 - written % 4) % 4])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_follow_the_newc_layout() {
        let mut archive = Archive::new(Vec::new());
        archive.file("/init", 0o755, b"hello").unwrap();
        let bytes = archive.finish().unwrap();
        let text = String::from_utf8_lossy(&bytes);
        // 110-byte header, "init\0" (115 bytes, padded to 116), 5 bytes of data padded to 8.
        let header = concat!(
            "070701", "00000001", "000081ed", "00000000", "00000000", "00000001", "00000000",
            "00000005", "00000000", "00000000", "00000000", "00000000", "00000005", "00000000",
        );
        assert_eq!(&text[..110], header);
        assert_eq!(&bytes[110..116], b"init\0\0");
        assert_eq!(&bytes[116..124], b"hello\0\0\0");
        assert!(text[124..].starts_with("070701"), "the trailer follows: {:?}", &text[124..]);
        assert!(text.contains("TRAILER!!!\0"));
        assert_eq!(bytes.len() % 4, 0, "entries end on a multiple of four");
    }
}
