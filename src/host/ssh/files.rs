//! Files on the host: a per-run directory, reading a log from an offset, uploads, and
//! servebench's own binary installed once per content hash.

use std::path::Path;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::{SshError, SshHost, Stdio, local};

/// Where [`SshHost::ensure_binary`] put servebench on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteBinary {
    /// Absolute path of the executable on the host.
    pub path: String,
    /// False when a copy with the same content was already there.
    pub uploaded: bool,
}

/// $1 base ('' for ~/.cache/servebench/runs; a leading ~/ is the remote home), $2 id.
const REMOTE_DIR: &str = r#"
base=$1
case $base in
  "") base="$HOME/.cache/servebench/runs" ;;
  "~") base=$HOME ;;
  "~/"*) base="$HOME/${base#"~/"}" ;;
esac
mkdir -p -- "$base/$2" && cd -- "$base/$2" && pwd -P
"#;

const READ_FROM: &str = r#"exec tail -c "+$2" -- "$1""#;

/// $1 destination, $2 octal mode; the content arrives on stdin. Written to a temporary name
/// and renamed, so a reader never sees half a file.
const UPLOAD: &str = r#"
dest=$1
dir=$(dirname -- "$dest") && mkdir -p -- "$dir" || exit 1
tmp="$dest.tmp.$$"
if cat > "$tmp" && chmod "$2" -- "$tmp" && mv -f -- "$tmp" "$dest"; then exit 0; fi
rm -f -- "$tmp"; exit 1
"#;

/// $1 first 16 hex digits of the hash, $2 the full sha256. Prints "present PATH" or
/// "absent PATH". Uploads are atomic, so without sha256sum an existing file is trusted.
const BINARY_STATE: &str = r#"
p="$HOME/.cache/servebench/bin/$1/servebench"
if [ -x "$p" ]; then
  if ! command -v sha256sum >/dev/null 2>&1; then echo "present $p"; exit 0; fi
  if [ "$(sha256sum < "$p" | cut -c1-64)" = "$2" ]; then echo "present $p"; exit 0; fi
fi
echo "absent $p"
"#;

impl SshHost {
    /// Creates `<base>/<id>` (base default `~/.cache/servebench/runs`; a leading `~/` in
    /// `base` is the remote home) and returns its absolute path.
    pub async fn remote_dir(&self, base: Option<&str>, id: &str) -> Result<String, SshError> {
        if id.is_empty()
            || id == "."
            || id == ".."
            || id.contains('/')
            || id.contains(char::is_control)
        {
            return Err(SshError::InvalidArgument(format!(
                "run directory name {id:?} must be one path component"
            )));
        }
        let stdout = self
            .script_checked(
                "creating the run directory",
                REMOTE_DIR,
                &[base.unwrap_or(""), id],
            )
            .await?;
        Ok(String::from_utf8_lossy(&stdout)
            .trim_end_matches('\n')
            .to_string())
    }

    /// The bytes of remote file `path` from byte `offset` on (for resuming a log tail).
    pub async fn read_from(&self, path: &str, offset: u64) -> Result<Vec<u8>, SshError> {
        let from = (offset + 1).to_string();
        self.script_checked(&format!("reading {path}"), READ_FROM, &[path, &from])
            .await
    }

    /// Copies `local_path` to `remote_path` with `mode` (e.g. 0o755), streamed over the
    /// command's stdin; parent directories are created.
    pub async fn upload(
        &self,
        local_path: &Path,
        remote_path: &str,
        mode: u32,
    ) -> Result<(), SshError> {
        let mode = format!("{mode:o}");
        let argv = super::script_argv(UPLOAD, &[remote_path, &mode]);
        // Fail early and locally when the source cannot be read.
        tokio::fs::File::open(local_path)
            .await
            .map_err(|e| local(&format!("cannot read {}", local_path.display()), e))?;
        let out = self
            .retrying(&format!("uploading to {remote_path}"), |s| {
                let argv = argv.clone();
                async move {
                    let mut file = tokio::fs::File::open(local_path)
                        .await
                        .map_err(openssh::Error::ChildIo)?;
                    let mut child = super::command(&s, &argv)
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .await?;
                    if let Some(mut stdin) = child.stdin().take() {
                        let copied = tokio::io::copy(&mut file, &mut stdin).await;
                        // EOF tells `cat` the file is complete.
                        let _ = stdin.shutdown().await;
                        drop(stdin);
                        if let Err(e) = copied {
                            let _ = child.wait_with_output().await;
                            return Err(openssh::Error::ChildIo(e));
                        }
                    }
                    child.wait_with_output().await
                }
            })
            .await?;
        self.checked(&format!("uploading to {remote_path}"), out)
            .map(drop)
    }

    /// Installs `local_exe` (servebench itself) on the host once per content hash, under
    /// `~/.cache/servebench/bin/<hash16>/servebench`, after checking that the host's CPU
    /// architecture matches; a fresh copy must answer `--version` there.
    pub async fn ensure_binary(&self, local_exe: &Path) -> Result<RemoteBinary, SshError> {
        let machine = self.run_checked(&["uname", "-m"]).await?;
        let remote_arch = String::from_utf8_lossy(&machine).trim().to_string();
        if !same_arch(&remote_arch, std::env::consts::ARCH) {
            return Err(SshError::ArchMismatch {
                host: self.name().to_string(),
                remote: remote_arch,
                local: std::env::consts::ARCH.to_string(),
            });
        }
        let hash = file_sha256(local_exe).await?;
        let state = self
            .script_checked(
                "looking for servebench on the host",
                BINARY_STATE,
                &[&hash[..16], &hash],
            )
            .await?;
        let state = String::from_utf8_lossy(&state);
        let (present, path) = match state.trim_end_matches('\n').split_once(' ') {
            Some(("present", p)) => (true, p.to_string()),
            Some(("absent", p)) => (false, p.to_string()),
            _ => {
                return Err(SshError::Remote {
                    host: self.name().to_string(),
                    what: "looking for servebench on the host".into(),
                    message: format!("unexpected answer {state:?}"),
                });
            }
        };
        if present {
            return Ok(RemoteBinary {
                path,
                uploaded: false,
            });
        }
        self.upload(local_exe, &path, 0o755).await?;
        let out = self.run(&[path.as_str(), "--version"]).await;
        let failure = match out {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(format!(
                "{}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Some(e.to_string()),
        };
        if let Some(stderr) = failure {
            return Err(SshError::NotPortable {
                host: self.name().to_string(),
                path,
                arch: remote_arch,
                stderr,
            });
        }
        Ok(RemoteBinary {
            path,
            uploaded: true,
        })
    }
}

/// `uname -m` against Rust's arch name (macOS says arm64, some BSDs amd64).
fn same_arch(uname_m: &str, rust_arch: &str) -> bool {
    let canon = |a: &str| match a {
        "amd64" => "x86_64".to_string(),
        "arm64" | "aarch64_be" => "aarch64".to_string(),
        a => a.to_string(),
    };
    canon(uname_m) == canon(rust_arch)
}

async fn file_sha256(path: &Path) -> Result<String, SshError> {
    let owned = path.to_path_buf();
    let hashed = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        use std::io::Read;
        let mut f = std::fs::File::open(&owned)?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match f.read(&mut buf)? {
                0 => break,
                n => h.update(&buf[..n]),
            }
        }
        Ok(hex::encode(h.finalize()))
    })
    .await
    .map_err(|e| local("hashing the binary", std::io::Error::other(e)))?;
    hashed.map_err(|e| local(&format!("cannot read {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_compare_by_meaning() {
        assert!(same_arch("x86_64", "x86_64"));
        assert!(same_arch("amd64", "x86_64"));
        assert!(same_arch("arm64", "aarch64"));
        assert!(!same_arch("aarch64", "x86_64"));
    }
}
