//! Opening an input file (a spec's prompts, lengths, dataset or trace) within its budget: only a
//! regular file, never more than its byte limit, and never blocking on a FIFO: looked at before
//! opening, opened non-blocking (in case it was replaced by a FIFO since), and looked at again.

use std::fs::File;
use std::path::Path;

/// Why an input file is not opened.
#[derive(Debug)]
pub enum Refused {
    /// The file system said no (missing, permissions).
    Io(std::io::Error),
    /// Not a regular file: what it is (`a FIFO (named pipe)`).
    NotAFile(&'static str),
    /// Larger than the limit: its length in bytes.
    TooLarge(u64),
}

/// `path` opened for reading, if it is a regular file of at most `limit` bytes.
pub fn open_regular(path: &Path, limit: u64) -> Result<File, Refused> {
    use std::os::unix::fs::OpenOptionsExt;
    let check = |meta: &std::fs::Metadata| {
        if !meta.is_file() {
            return Err(Refused::NotAFile(file_kind(meta)));
        }
        if meta.len() > limit {
            return Err(Refused::TooLarge(meta.len()));
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(Refused::Io)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(Refused::Io)?;
    check(&file.metadata().map_err(Refused::Io)?)?;
    Ok(file)
}

/// What a file that is not a regular file is, for messages.
pub(crate) fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_within_its_limit_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.txt");
        std::fs::write(&small, "0123456789").unwrap();
        assert!(open_regular(&small, 10).is_ok());
        assert!(matches!(
            open_regular(&small, 9),
            Err(Refused::TooLarge(10))
        ));
        assert!(matches!(
            open_regular(dir.path(), 1 << 20),
            Err(Refused::NotAFile("a directory"))
        ));
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(matches!(
            open_regular(&fifo, 1 << 20),
            Err(Refused::NotAFile("a FIFO (named pipe)"))
        ));
        assert!(matches!(
            open_regular(&dir.path().join("missing"), 1),
            Err(Refused::Io(_))
        ));
    }
}
