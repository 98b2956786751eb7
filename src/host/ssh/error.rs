//! What went wrong over SSH, classified from ssh's own stderr so the message can say what to do.

/// An SSH failure, each with the fix in its message.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("invalid SSH target: {0}")]
    InvalidTarget(String),

    /// A value this layer refuses before anything runs (an empty argv, pid 1, a bad name).
    #[error("{0}")]
    InvalidArgument(String),

    #[error(
        "cannot reach {host}: {reason}\nCheck the host name, port and network (does `ssh ssh://{host}` work from this machine?)."
    )]
    Unreachable { host: String, reason: String },

    #[error(
        "{host} refused authentication: {reason}\nGive an identity file whose public key is in the host's ~/.ssh/authorized_keys, or load the key into ssh-agent (ssh-add). servebench never prompts for passwords."
    )]
    AuthRefused { host: String, reason: String },

    #[error(
        "the host key of {host} is not in {known_hosts} and host keys are checked strictly.\nConnect once by hand (`ssh ssh://{host}`) and compare the fingerprint, or run `ssh-keyscan` for the host, verify it, and append it to {known_hosts}; or opt in to trusting a first-seen key with `host_key_check: accept-new`."
    )]
    HostKeyUnknown { host: String, known_hosts: String },

    #[error(
        "WARNING: the host key of {host} does NOT match the one in {known_hosts}. Someone may be intercepting the connection (man-in-the-middle), or the host was reinstalled. servebench refuses to connect and never replaces a known key.\nIf the change is expected, verify the new fingerprint with the host's administrator, then remove the old key with `ssh-keygen -R <host>`.\n--- ssh said ---\n{detail}"
    )]
    HostKeyMismatch {
        host: String,
        known_hosts: String,
        detail: String,
    },

    #[error("ssh to {host} failed: {stderr}")]
    Other { host: String, stderr: String },

    #[error("the connection to {host} dropped and {attempts} reconnection attempts failed: {last}")]
    Reconnect {
        host: String,
        attempts: u32,
        last: Box<SshError>,
    },

    #[error("on {host}: command not found: {program}")]
    CommandNotFound { host: String, program: String },

    #[error("on {host}: {what} failed ({status}){}", stderr_suffix(.stderr))]
    CommandFailed {
        host: String,
        what: String,
        status: String,
        stderr: String,
    },

    #[error("on {host}: {what}: {message}")]
    Remote {
        host: String,
        what: String,
        message: String,
    },

    #[error(
        "{host} is a {remote} machine but this servebench binary is built for {local}; build servebench for {remote} (e.g. `cargo build --release --target {remote}-unknown-linux-musl`) and run that one"
    )]
    ArchMismatch {
        host: String,
        remote: String,
        local: String,
    },

    #[error(
        "the servebench binary copied to {host} ({path}) does not run there: {stderr}\nThe binary is probably not portable to that host (a newer glibc, or missing libraries); use a static build (`cargo build --release --target {arch}-unknown-linux-musl`)."
    )]
    NotPortable {
        host: String,
        path: String,
        arch: String,
        stderr: String,
    },

    #[error("{what}: {source}")]
    Local {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    match stderr.trim() {
        "" => String::new(),
        s => format!(": {s}"),
    }
}

/// Sorts a failed connection by what ssh printed (its log or stderr).
pub(crate) fn classify(host: &str, known_hosts: &str, stderr: &str) -> SshError {
    let text = stderr.trim();
    // The warning line about adding a key is noise in front of the real error.
    let reason = text
        .lines()
        .filter(|l| !l.starts_with("Warning: Permanently added"))
        .map(|l| l.trim().trim_start_matches("ssh: "))
        .rfind(|l| !l.is_empty())
        .unwrap_or("ssh exited without saying why")
        .to_string();
    let host = host.to_string();
    let known_hosts = known_hosts.to_string();
    if text.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || text.contains("has changed and you have requested strict checking")
    {
        return SshError::HostKeyMismatch {
            host,
            known_hosts,
            detail: text.to_string(),
        };
    }
    if text.contains("host key is known for") && text.contains("requested strict checking")
        || text.contains("Host key verification failed")
    {
        return SshError::HostKeyUnknown { host, known_hosts };
    }
    if text.contains("Permission denied (") || text.contains("Too many authentication failures") {
        return SshError::AuthRefused { host, reason };
    }
    const UNREACHABLE: &[&str] = &[
        "Connection refused",
        "No route to host",
        "Network is unreachable",
        "Connection timed out",
        "Operation timed out",
        "Could not resolve hostname",
        "Name or service not known",
        "Temporary failure in name resolution",
        "kex_exchange_identification",
        "Connection reset by peer",
        "Connection closed by",
    ];
    if UNREACHABLE.iter().any(|m| text.contains(m)) {
        return SshError::Unreachable { host, reason };
    }
    SshError::Other {
        host,
        stderr: text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(stderr: &str) -> SshError {
        classify("h", "/k", stderr)
    }

    #[test]
    fn real_ssh_messages_are_classified() {
        assert!(matches!(
            kind("ssh: connect to host 127.0.0.1 port 1: Connection refused"),
            SshError::Unreachable { .. }
        ));
        assert!(matches!(
            kind("ssh: Could not resolve hostname nope.invalid: Name or service not known"),
            SshError::Unreachable { .. }
        ));
        assert!(matches!(
            kind("ssh: connect to host 10.0.0.1 port 22: Connection timed out"),
            SshError::Unreachable { .. }
        ));
        assert!(matches!(
            kind(
                "Warning: Permanently added '[h]:22' (ED25519) to the list of known hosts.\r\nroot@h: Permission denied (publickey)."
            ),
            SshError::AuthRefused { .. }
        ));
        assert!(matches!(
            kind(
                "No ED25519 host key is known for [127.0.0.1]:2299 and you have requested strict checking.\nHost key verification failed."
            ),
            SshError::HostKeyUnknown { .. }
        ));
        assert!(matches!(
            kind(
                "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed."
            ),
            SshError::HostKeyMismatch { .. }
        ));
        match kind("something new") {
            SshError::Other { stderr, .. } => assert_eq!(stderr, "something new"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn messages_name_the_fix() {
        let auth = kind("root@h: Permission denied (publickey).").to_string();
        assert!(
            auth.contains("identity file") && auth.contains("ssh-agent"),
            "{auth}"
        );
        assert!(auth.contains("Permission denied (publickey)"), "{auth}");
        let unknown = kind("Host key verification failed.").to_string();
        assert!(unknown.contains("ssh-keyscan") && unknown.contains("accept-new"));
        let mismatch = kind("REMOTE HOST IDENTIFICATION HAS CHANGED").to_string();
        assert!(mismatch.contains("man-in-the-middle") && mismatch.contains("ssh-keygen -R"));
    }
}
