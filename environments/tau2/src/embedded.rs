//! The copy of tau2's data built into Parley: `data/tau2-data.tar.zst`, packed by `data/pack`
//! from `../shared/data/tau2` (the files the loader reads, and tau2's NOTICE with its MIT
//! license). It is unpacked into memory once per process, on the first read, and never written
//! to disk. A test compares every packed file with the folder's, so the copy cannot go stale
//! unnoticed.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::OnceLock;

/// The packed data, compressed with zstd (about 0.4 MB for 10 MB of JSON, TOML and Markdown).
static ARCHIVE: &[u8] = include_bytes!("../data/tau2-data.tar.zst");

/// Every packed file by its path inside the data folder (`airline/db.json`), or why the archive
/// cannot be read (which the tests rule out for the archive this crate is built with).
pub(crate) fn files() -> Result<&'static BTreeMap<String, String>, &'static str> {
    static FILES: OnceLock<Result<BTreeMap<String, String>, String>> = OnceLock::new();
    FILES.get_or_init(|| unpack(ARCHIVE)).as_ref().map_err(String::as_str)
}

fn unpack(archive: &[u8]) -> Result<BTreeMap<String, String>, String> {
    let mut tar = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(archive)
        .map_err(|e| e.to_string())?
        .read_to_end(&mut tar)
        .map_err(|e| e.to_string())?;
    untar(&tar)
}

/// The size of a tar block: every header is one, and every file is padded to a whole number.
const BLOCK: usize = 512;

/// The regular files of a ustar archive, as `data/pack` writes it: a header block per entry
/// (name, then size in octal at byte 124, type at byte 156, name prefix at byte 345), the file's
/// bytes padded to a block, and zero blocks at the end. Every file must be UTF-8 text.
fn untar(mut tar: &[u8]) -> Result<BTreeMap<String, String>, String> {
    let mut files = BTreeMap::new();
    while tar.len() >= BLOCK && tar[..BLOCK].iter().any(|&b| b != 0) {
        let (header, rest) = tar.split_at(BLOCK);
        // A field ends at its first NUL; the size may also end in spaces.
        let field = |from: usize, to: usize| {
            let f = &header[from..to];
            String::from_utf8_lossy(&f[..f.iter().position(|&b| b == 0).unwrap_or(f.len())]).into_owned()
        };
        let (name, prefix) = (field(0, 100), field(345, 500));
        let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let size = usize::from_str_radix(field(124, 136).trim(), 8).map_err(|e| format!("{path}: size: {e}"))?;
        let padded = size.div_ceil(BLOCK) * BLOCK;
        if rest.len() < padded {
            return Err(format!("{path}: the archive ends inside the file"));
        }
        // Regular files only ('0', or NUL in old archives); the packer writes nothing else.
        if matches!(header[156], b'0' | 0) {
            let text = String::from_utf8(rest[..size].to_vec()).map_err(|e| format!("{path}: {e}"))?;
            files.insert(path, text);
        }
        tar = &rest[padded..];
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_unpacks_with_the_notice_and_every_domain() {
        let files = files().unwrap();
        assert!(files["NOTICE"].contains("MIT License"), "tau2's license travels with its data");
        assert!(files["NOTICE"].contains("Copyright (c) 2025 Sierra Research"), "Data::CREDIT says so");
        assert_eq!(files["NOTICE"], include_str!("../data/NOTICE"), "the repository's NOTICE is the packed one");
        for path in ["derived/tools.openai.json", "user_simulator/simulation_guidelines.md", "airline/db.json"] {
            assert!(files.contains_key(path), "{path} is packed");
        }
    }

    /// The archive is `data/pack`'s from `../shared/data/tau2`: every packed file is that folder's
    /// byte for byte, so a change there fails here until the archive is packed again.
    #[test]
    fn the_embedded_data_is_the_folders_file_for_file() {
        let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tau2");
        for (path, text) in files().unwrap() {
            let theirs = std::fs::read(source.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert!(
                text.as_bytes() == theirs,
                "{path} differs from {}: run environments/tau2/data/pack",
                source.display()
            );
        }
        assert_eq!(files().unwrap().len(), 24, "the files the loader reads, and NOTICE");
    }

    #[test]
    fn a_damaged_archive_is_an_error_not_a_panic() {
        assert!(unpack(b"not zstd").is_err());
        let mut header = vec![0u8; BLOCK];
        header[..5].copy_from_slice(b"a.txt");
        header[124..135].copy_from_slice(b"00000001000");
        header[156] = b'0';
        assert!(untar(&header).unwrap_err().contains("ends inside"), "a truncated file is named");
        assert_eq!(untar(&[0; 2 * BLOCK]).unwrap(), BTreeMap::new(), "zero blocks end the archive");
    }
}
