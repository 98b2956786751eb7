//! Reading a small regular file where the server runs (a model's `config.json`), bounded in
//! bytes like every input: this machine directly, an SSH host or a Slurm allocation's node
//! through one fixed script that refuses what is not a regular file or is too large before
//! reading it.

use std::io::Read as _;
use std::path::Path;
use std::process::ExitStatus;

/// Why a small file was not read or a directory not listed, in the words the records keep
/// (`meta.json`'s `model_config.missing`, a trace file's `left`), where the caller adds the fix.
/// The host's script says the same in the same words, so a remote refusal reads as a local one.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileRefused {
    #[error("no such file")]
    NoSuchFile,
    #[error("no such directory")]
    NoSuchDirectory,
    /// Not a regular file: what it is when known (`a FIFO (named pipe)`, on this machine).
    #[error("{}not a regular file", .0.map(|k| format!("{k}, ")).unwrap_or_default())]
    NotAFile(Option<&'static str>),
    #[error("{size} bytes; read up to {limit}")]
    TooLarge { size: u64, limit: u64 },
    /// The host's script refused it in other words (the last line it wrote on stderr).
    #[error("{0}")]
    OnHost(String),
    /// The host's script failed and said nothing.
    #[error("{what} failed ({status})")]
    Failed {
        what: &'static str,
        status: ExitStatus,
    },
    /// This machine's file system said no (permissions, a read that failed).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A copy's destination here could not be written.
    #[error("could not be written here: {0}")]
    NotWritten(std::io::Error),
}

impl FileRefused {
    /// The script's refusal from its stderr (its last line), or `what` failed with `status`
    /// when it wrote none.
    fn from_script(out: &std::process::Output, what: &'static str) -> FileRefused {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let Some(line) = stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()) else {
            return FileRefused::Failed {
                what,
                status: out.status,
            };
        };
        let too_large = line.split_once(" bytes; read up to ").and_then(|(n, l)| {
            Some(FileRefused::TooLarge {
                size: n.parse().ok()?,
                limit: l.parse().ok()?,
            })
        });
        match line {
            "no such file" => FileRefused::NoSuchFile,
            "no such directory" => FileRefused::NoSuchDirectory,
            "not a regular file" => FileRefused::NotAFile(None),
            _ => too_large.unwrap_or_else(|| FileRefused::OnHost(line.to_string())),
        }
    }
}

/// The script run on a host: `$1` the path, `$2` the byte limit. Exit 3 with the reason on
/// stderr when the file is refused; its bytes on stdout otherwise. A constant: values reach it
/// only as arguments.
pub(crate) const SCRIPT: &str = r#"if [ ! -e "$1" ]; then echo "no such file" >&2; exit 3; fi
if [ ! -f "$1" ]; then echo "not a regular file" >&2; exit 3; fi
n=$(wc -c < "$1") || exit 3
if [ "$n" -gt "$2" ]; then echo "$n bytes; read up to $2" >&2; exit 3; fi
exec head -c "$2" -- "$1""#;

/// The listing script run on a host: `$1` the directory, `$2` the most entries. One line per
/// regular file (links and directories left out): its size in bytes, a tab, its name. Exit 3
/// with the reason on stderr when the directory is not there. A constant, like [`SCRIPT`].
pub(crate) const LIST_SCRIPT: &str = r#"if [ ! -d "$1" ]; then echo "no such directory" >&2; exit 3; fi
cd "$1" || exit 3
for f in * .*; do
  if [ -f "$f" ] && [ ! -L "$f" ]; then printf '%s\t%s\n' "$(wc -c < "$f" | tr -d ' ')" "$f"; fi
done | head -n "$2""#;

/// `sh -c LIST_SCRIPT sh DIR MAX`.
pub(crate) fn list_argv(dir: &str, max: usize) -> Vec<String> {
    ["sh", "-c", LIST_SCRIPT, "sh", dir, &max.to_string()]
        .into_iter()
        .map(String::from)
        .collect()
}

/// The listing script's output as (name, bytes); lines of another shape (a name with a
/// newline in it) are left out.
pub(crate) fn parse_listing(out: &std::process::Output) -> Result<Vec<(String, u64)>, FileRefused> {
    if !out.status.success() {
        return Err(FileRefused::from_script(out, "listing"));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (n, name) = l.split_once('\t')?;
            Some((name.to_string(), n.trim().parse().ok()?))
        })
        .collect())
}

/// The regular files of a directory on this machine (links left out), at most `max`.
pub(crate) fn list_local(dir: &str, max: usize) -> Result<Vec<(String, u64)>, FileRefused> {
    let entries = std::fs::read_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FileRefused::NoSuchDirectory,
        _ => FileRefused::Io(e),
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        if out.len() >= max {
            break;
        }
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if meta.is_file() {
            out.push((e.file_name().to_string_lossy().into_owned(), meta.len()));
        }
    }
    out.sort();
    Ok(out)
}

/// `sh -c SCRIPT sh PATH LIMIT`.
pub(crate) fn argv(path: &str, limit: u64) -> Vec<String> {
    ["sh", "-c", SCRIPT, "sh", path, &limit.to_string()]
        .into_iter()
        .map(String::from)
        .collect()
}

/// The script's result: its stdout, or why the file was not read (its stderr's last line).
pub(crate) fn from_output(out: &std::process::Output, limit: u64) -> Result<Vec<u8>, FileRefused> {
    if out.status.success() && out.stdout.len() as u64 <= limit {
        return Ok(out.stdout.clone());
    }
    Err(FileRefused::from_script(out, "reading it"))
}

/// A file on this machine: regular, at most `limit` bytes (a FIFO is refused, not opened).
pub(crate) fn read_local(path: &str, limit: u64) -> Result<Vec<u8>, FileRefused> {
    use servebench_model::input_file::{Refused, open_regular};
    let file = open_regular(Path::new(path), limit).map_err(|r| match r {
        Refused::Io(e) if e.kind() == std::io::ErrorKind::NotFound => FileRefused::NoSuchFile,
        Refused::Io(e) => FileRefused::Io(e),
        Refused::NotAFile(kind) => FileRefused::NotAFile(Some(kind)),
        Refused::TooLarge(size) => FileRefused::TooLarge { size, limit },
    })?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Copies regular file `path` on this machine to `to`, at most `limit` bytes, a buffer at a
/// time (a 300 MB trace is never held whole); the bytes copied, or why not.
pub(crate) fn copy_local(path: &str, to: &Path, limit: u64) -> Result<u64, FileRefused> {
    use servebench_model::input_file::{Refused, open_regular};
    let file = open_regular(Path::new(path), limit).map_err(|r| match r {
        Refused::Io(e) if e.kind() == std::io::ErrorKind::NotFound => FileRefused::NoSuchFile,
        Refused::Io(e) => FileRefused::Io(e),
        Refused::NotAFile(kind) => FileRefused::NotAFile(Some(kind)),
        Refused::TooLarge(size) => FileRefused::TooLarge { size, limit },
    })?;
    let mut out = std::fs::File::create(to).map_err(FileRefused::NotWritten)?;
    std::io::copy(&mut file.take(limit), &mut out).map_err(FileRefused::NotWritten)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_copied_a_buffer_at_a_time_within_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("t.pt.trace.json");
        std::fs::write(&from, vec![b'x'; 300_000]).unwrap();
        let to = dir.path().join("copy");
        assert_eq!(
            copy_local(from.to_str().unwrap(), &to, 1 << 20).unwrap(),
            300_000
        );
        assert_eq!(std::fs::metadata(&to).unwrap().len(), 300_000);
        assert!(copy_local(from.to_str().unwrap(), &to, 1000).is_err());
    }

    #[test]
    fn the_listing_script_and_the_local_listing_agree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.trace.json.gz"), b"12345").unwrap();
        std::fs::write(dir.path().join("b c"), b"").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("a.trace.json.gz", dir.path().join("link")).unwrap();
        let d = dir.path().to_str().unwrap();
        let argv = list_argv(d, 10);
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap();
        let mut listed = parse_listing(&out).unwrap();
        listed.sort();
        let want = vec![("a.trace.json.gz".to_string(), 5), ("b c".to_string(), 0)];
        assert_eq!(listed, want);
        assert_eq!(list_local(d, 10).unwrap(), want);
        let argv = list_argv(&format!("{d}/none"), 10);
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap();
        assert_eq!(
            parse_listing(&out).unwrap_err().to_string(),
            "no such directory"
        );
        assert_eq!(
            list_local(&format!("{d}/none"), 10)
                .unwrap_err()
                .to_string(),
            "no such directory"
        );
    }

    #[test]
    fn the_script_reads_a_small_file_and_refuses_the_rest_by_reason() {
        let dir = tempfile::tempdir().unwrap();
        let run = |path: &Path, limit: u64| {
            let a = argv(path.to_str().unwrap(), limit);
            let out = std::process::Command::new(&a[0])
                .args(&a[1..])
                .output()
                .unwrap();
            from_output(&out, limit)
        };
        let ok = dir.path().join("config.json");
        std::fs::write(&ok, b"{\"a\": 1}").unwrap();
        assert_eq!(run(&ok, 100).unwrap(), b"{\"a\": 1}");
        assert_eq!(
            read_local(ok.to_str().unwrap(), 100).unwrap(),
            b"{\"a\": 1}"
        );
        assert!(matches!(
            run(&ok, 3).unwrap_err(),
            FileRefused::TooLarge { size: 8, limit: 3 }
        ));
        assert_eq!(
            read_local(ok.to_str().unwrap(), 3).unwrap_err().to_string(),
            "8 bytes; read up to 3"
        );
        let none = dir.path().join("none.json");
        assert!(matches!(
            run(&none, 100).unwrap_err(),
            FileRefused::NoSuchFile
        ));
        assert_eq!(
            read_local(none.to_str().unwrap(), 100)
                .unwrap_err()
                .to_string(),
            "no such file"
        );
        assert_eq!(
            run(dir.path(), 100).unwrap_err().to_string(),
            "not a regular file"
        );
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        assert_eq!(
            run(&fifo, 100).unwrap_err().to_string(),
            "not a regular file"
        );
        assert!(
            read_local(fifo.to_str().unwrap(), 100)
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
    }
}
