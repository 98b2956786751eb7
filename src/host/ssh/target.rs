//! Where to connect: an SSH destination plus the options that shape the connection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::SshError;

/// How the host's key is checked against known_hosts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HostKeyCheck {
    /// The key must already be in known_hosts (`StrictHostKeyChecking=yes`).
    #[default]
    Strict,
    /// An unknown host's key is added on first contact; a changed key is still refused
    /// (`StrictHostKeyChecking=accept-new`).
    AcceptNew,
}

/// An SSH host to run on, as `ssh` would be told on its command line.
#[derive(Debug, Clone, PartialEq)]
pub struct SshTarget {
    /// `host`, `user@host` or `ssh://[user@]host[:port]`; also a `Host` alias from ~/.ssh/config.
    pub destination: String,
    /// Login name (`ssh -l`); a user in `destination` wins.
    pub user: Option<String>,
    /// TCP port (`ssh -p`); a port in an `ssh://` destination wins.
    pub port: Option<u16>,
    /// Private key file (`ssh -i`, with `IdentitiesOnly=yes`, so only this key is offered).
    pub identity: Option<PathBuf>,
    /// Jump host(s), comma-separated as for `ssh -J`.
    pub jump: Option<String>,
    /// known_hosts file to check (and with `AcceptNew`, to add to); default ~/.ssh/known_hosts.
    pub known_hosts: Option<PathBuf>,
    pub host_key_check: HostKeyCheck,
    /// Extra ssh_config options (`Key`, `Value`), as `ssh -o Key=Value` would take them.
    pub options: Vec<(String, String)>,
    /// Time allowed to establish the TCP connection (whole seconds, at least one).
    pub connect_timeout: Duration,
}

impl SshTarget {
    /// A target with default settings: strict host keys, ~/.ssh/config, a 10 s connect timeout.
    pub fn new(destination: impl Into<String>) -> SshTarget {
        SshTarget {
            destination: destination.into(),
            user: None,
            port: None,
            identity: None,
            jump: None,
            known_hosts: None,
            host_key_check: HostKeyCheck::Strict,
            options: Vec::new(),
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// Parses `ssh://[user@]host[:port]` (IPv6 hosts in brackets) into a target.
    pub(crate) fn parse_url(url: &str) -> Result<SshTarget, SshError> {
        let bad = |why: &str| SshError::InvalidTarget(format!("{url:?}: {why}"));
        let rest = url
            .strip_prefix("ssh://")
            .ok_or_else(|| bad("expected ssh://[user@]host[:port]"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(bad("an ssh:// address has no path, query or fragment"));
        }
        let (user, hostport) = match rest.rsplit_once('@') {
            Some(("", _)) => return Err(bad("the user before '@' is empty")),
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, rest),
        };
        let (host, port) = split_host_port(hostport).map_err(|why| bad(&why.to_string()))?;
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        let mut target = SshTarget::new(host);
        target.user = user;
        target.port = port;
        target.validate()?;
        Ok(target)
    }

    /// Destination, user and port as given, with an `ssh://` destination taken apart.
    pub(crate) fn resolved(&self) -> Result<SshTarget, SshError> {
        let mut t = self.clone();
        if self.destination.starts_with("ssh://") {
            let parsed = SshTarget::parse_url(&self.destination)?;
            t.destination = parsed.destination;
            t.user = parsed.user.or(t.user);
            t.port = parsed.port.or(t.port);
        }
        t.validate()?;
        Ok(t)
    }

    /// The first jump host as a target of its own, with this target's key, known_hosts, host
    /// key checking, timeout and options: what the jump's ssh is given (see `config_text`).
    /// Used to say which hop refused a connection.
    pub(crate) fn first_jump(&self) -> Option<SshTarget> {
        let first = self.jump.as_deref()?.split(',').next()?.trim();
        let mut t = if first.starts_with("ssh://") {
            SshTarget::parse_url(first).ok()?
        } else {
            let (user, hostport) = match first.rsplit_once('@') {
                Some((u, h)) => (Some(u.to_string()), h),
                None => (None, first),
            };
            let (host, port) = split_host_port(hostport).ok()?;
            let mut t = SshTarget::new(host);
            t.user = user;
            t.port = port;
            t
        };
        t.identity = self.identity.clone();
        t.known_hosts = self.known_hosts.clone();
        t.host_key_check = self.host_key_check;
        t.options = self.options.clone();
        t.connect_timeout = self.connect_timeout;
        Some(t)
    }

    /// `user@host:port` as far as known, for messages.
    pub(crate) fn display(&self) -> String {
        let mut s = String::new();
        if let Some(u) = &self.user
            && !self.destination.contains('@')
        {
            s.push_str(u);
            s.push('@');
        }
        match self.port {
            Some(p) if !self.destination.starts_with("ssh://") => {
                // `[v6]:port`, so that `ssh://` + this is a valid ssh destination in hints.
                if self.destination.contains(':') {
                    s.push_str(&format!("[{}]:{p}", self.destination));
                } else {
                    s.push_str(&format!("{}:{p}", self.destination));
                }
            }
            _ => s.push_str(&self.destination),
        }
        s
    }

    /// Rejects values ssh would read as options, or that could break the generated config.
    fn validate(&self) -> Result<(), SshError> {
        let bad = |what: &str, v: &str, why: &str| {
            Err(SshError::InvalidTarget(format!("{what} {v:?} {why}")))
        };
        let plain = |v: &str| !v.is_empty() && !v.starts_with('-') && !v.contains(char::is_control);
        if !plain(&self.destination) || self.destination.contains(char::is_whitespace) {
            return bad(
                "destination",
                &self.destination,
                "must be a host name, user@host or ssh://user@host:port (not empty, no spaces, not starting with '-')",
            );
        }
        if let Some(u) = &self.user
            && (!plain(u) || u.contains(char::is_whitespace))
        {
            return bad(
                "user",
                u,
                "must not be empty, start with '-' or contain spaces",
            );
        }
        if self.port == Some(0) {
            return bad("port", "0", "is not a usable port");
        }
        if let Some(j) = &self.jump
            && (!plain(j) || j.contains(char::is_whitespace))
        {
            return bad(
                "jump",
                j,
                "must be host[,host...] (no spaces, not starting with '-')",
            );
        }
        for (k, v) in &self.options {
            check_option(k, v)?;
        }
        // Both paths reach ssh unescaped on the master's command line (`-i`, `-o
        // UserKnownHostsFile=`) and quoted in the generated config; ssh expands `%` tokens and
        // `${VAR}` in both, and splits a known_hosts list at spaces.
        for (what, path, spaces) in [
            ("identity", &self.identity, true),
            ("known_hosts", &self.known_hosts, false),
        ] {
            if let Some(p) = path {
                let ok = p.to_str().is_some_and(|s| {
                    !s.contains(['"', '\\', '%', '$'])
                        && !s.contains(char::is_control)
                        && (spaces || !s.contains(char::is_whitespace))
                });
                if !ok {
                    return bad(
                        what,
                        &p.display().to_string(),
                        if spaces {
                            "must be a UTF-8 path without quotes, backslashes, '%', '$' or control characters (ssh would expand or split them)"
                        } else {
                            "must be a UTF-8 path without spaces, quotes, backslashes, '%', '$' or control characters (ssh would expand or split them)"
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// The ssh_config text for `options` and jump hosts, or None when neither is set. The
    /// openssh crate's builder has no `-o` pass-through, only `-F <file>`; and `-F` replaces
    /// both the user's and the system's config. So the file sets our options first (for each
    /// keyword ssh keeps the first value it reads) and then includes both configs, keeping host
    /// aliases, agents and the rest working.
    ///
    /// A jump host is reached by a second ssh that ssh starts itself (`ProxyJump`), which
    /// inherits `-F` but none of the command line's `-i` and `-o`: the file repeats them, so
    /// the bastion gets the same key, known_hosts, host key checking and no prompts.
    pub(crate) fn config_text(&self) -> Option<String> {
        if self.options.is_empty() && self.jump.is_none() {
            return None;
        }
        let mut text = String::from("# Written by servebench for one connection.\n");
        for (k, v) in &self.options {
            text.push_str(&format!("{k} {v}\n"));
        }
        if self.jump.is_some() {
            text.push_str("# For the jump host's ssh, which reads only this file:\n");
            text.push_str("BatchMode yes\n");
            let check = match self.host_key_check {
                HostKeyCheck::Strict => "yes",
                HostKeyCheck::AcceptNew => "accept-new",
            };
            text.push_str(&format!("StrictHostKeyChecking {check}\n"));
            text.push_str(&format!(
                "ConnectTimeout {}\n",
                self.connect_timeout.as_secs().max(1)
            ));
            if let Some(k) = &self.known_hosts {
                text.push_str(&format!("UserKnownHostsFile {}\n", config_path(k)));
            }
            if let Some(k) = &self.identity {
                // As the master's `-i` does: offer this key only, not every agent key first
                // (a bastion may hang up with "Too many authentication failures").
                text.push_str(&format!(
                    "IdentityFile {}\nIdentitiesOnly yes\n",
                    config_path(k)
                ));
            }
        }
        text.push_str("Include ~/.ssh/config\nInclude /etc/ssh/ssh_config\n");
        Some(text)
    }

    /// known_hosts in messages: the configured file or ssh's default.
    pub(crate) fn known_hosts_display(&self) -> String {
        self.known_hosts
            .as_deref()
            .map(Path::display)
            .map(|d| d.to_string())
            .unwrap_or_else(|| "~/.ssh/known_hosts".into())
    }
}

/// A path as an ssh_config argument, double-quoted (spaces). `validate` has refused what ssh
/// would expand or unescape (`%`, `$`, `\\`, quotes).
fn config_path(p: &Path) -> String {
    format!("\"{}\"", p.display())
}

/// Why a `host:port` does not parse (said after the target, in [`SshError::InvalidTarget`]).
#[derive(Debug, thiserror::Error)]
enum HostPortError {
    #[error("port {0:?} is not a number from 1 to 65535")]
    Port(String),
    #[error("an IPv6 host needs a closing ']'")]
    Unclosed,
    #[error("unexpected {0:?} after the IPv6 host")]
    AfterV6(String),
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), HostPortError> {
    let parse_port = |p: &str| match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(HostPortError::Port(p.to_string())),
        Ok(n) => Ok(Some(n)),
    };
    if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or(HostPortError::Unclosed)?;
        return match after {
            "" => Ok((host.to_string(), None)),
            p => match p.strip_prefix(':') {
                Some(p) => Ok((host.to_string(), parse_port(p)?)),
                None => Err(HostPortError::AfterV6(p.to_string())),
            },
        };
    }
    match s.split_once(':') {
        Some((h, p)) => Ok((h.to_string(), parse_port(p)?)),
        None => Ok((s.to_string(), None)),
    }
}

/// Keywords the session itself owns, each with what to use instead.
const RESERVED: &[(&str, &str)] = &[
    ("batchmode", "servebench never prompts, so it is always yes"),
    (
        "stricthostkeychecking",
        "use host_key_check (strict or accept-new)",
    ),
    ("userknownhostsfile", "use known_hosts"),
    ("controlmaster", "the connection manages its own master"),
    ("controlpath", "the connection manages its own master"),
    ("controlpersist", "the connection manages its own master"),
    (
        "host",
        "options apply to this target only; put Host blocks in ~/.ssh/config",
    ),
    (
        "match",
        "options apply to this target only; put Match blocks in ~/.ssh/config",
    ),
    ("include", "put Include lines in ~/.ssh/config"),
];

fn check_option(key: &str, value: &str) -> Result<(), SshError> {
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(SshError::InvalidTarget(format!(
            "ssh option name {key:?} must be a keyword such as ServerAliveInterval"
        )));
    }
    if let Some((_, instead)) = RESERVED.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)) {
        return Err(SshError::InvalidTarget(format!(
            "ssh option {key} cannot be set here: {instead}"
        )));
    }
    if value.trim().is_empty() || value.contains(char::is_control) {
        return Err(SshError::InvalidTarget(format!(
            "ssh option {key} needs a one-line value, got {value:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_parts() {
        let t = SshTarget::parse_url("ssh://alice@gpu-01:2222").unwrap();
        assert_eq!(
            (t.destination.as_str(), t.user.as_deref(), t.port),
            ("gpu-01", Some("alice"), Some(2222))
        );
        let t = SshTarget::parse_url("ssh://gpu-01").unwrap();
        assert_eq!((t.user, t.port), (None, None));
        let t = SshTarget::parse_url("ssh://[::1]:22/").unwrap();
        assert_eq!((t.destination.as_str(), t.port), ("::1", Some(22)));
        assert_eq!(t.host_key_check, HostKeyCheck::Strict);
    }

    #[test]
    fn bad_urls_say_why() {
        for (url, why) in [
            ("gpu-01", "expected ssh://"),
            ("ssh://", "host is empty"),
            ("ssh://@h", "user before '@' is empty"),
            ("ssh://h:0", "1 to 65535"),
            ("ssh://h:99999", "1 to 65535"),
            ("ssh://h:ssh", "1 to 65535"),
            ("ssh://h/path", "no path"),
            ("ssh://-oProxyCommand=x", "not starting with '-'"),
            ("ssh://[::1", "closing ']'"),
        ] {
            let e = SshTarget::parse_url(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn option_injection_is_refused() {
        let mut t = SshTarget::new("-oProxyCommand=touch /tmp/x");
        assert!(t.resolved().is_err());
        t.destination = "host".into();
        t.jump = Some("-oProxyCommand=x".into());
        assert!(t.resolved().is_err());
        t.jump = None;
        t.options = vec![("ServerAliveInterval".into(), "5\nProxyCommand x".into())];
        assert!(t.resolved().unwrap_err().to_string().contains("one-line"));
        t.options = vec![("StrictHostKeyChecking".into(), "no".into())];
        assert!(
            t.resolved()
                .unwrap_err()
                .to_string()
                .contains("host_key_check")
        );
        t.options = vec![("Host".into(), "*".into())];
        assert!(t.resolved().is_err());
    }

    #[test]
    fn options_go_before_the_included_configs() {
        let mut t = SshTarget::new("h");
        assert_eq!(t.config_text(), None);
        t.options = vec![("ServerAliveInterval".into(), "5".into())];
        let text = t.config_text().unwrap();
        let opt = text.find("ServerAliveInterval 5").unwrap();
        assert!(opt < text.find("Include ~/.ssh/config").unwrap());
        assert!(text.contains("Include /etc/ssh/ssh_config"));
        assert!(!text.contains("BatchMode"), "{text}");
    }

    #[test]
    fn display_is_a_valid_ssh_url_body() {
        let mut t = SshTarget::new("::1");
        t.port = Some(2222);
        t.user = Some("bob".into());
        assert_eq!(t.display(), "bob@[::1]:2222");
        let mut t = SshTarget::new("gpu-1");
        t.port = Some(22);
        assert_eq!(t.display(), "gpu-1:22");
    }

    #[test]
    fn a_jump_host_gets_the_targets_key_known_hosts_and_checking() {
        let mut t = SshTarget::new("h");
        t.jump = Some("bastion".into());
        t.identity = Some("/keys/my key".into());
        t.known_hosts = Some("/kh/known".into());
        t.host_key_check = HostKeyCheck::AcceptNew;
        let text = t.config_text().unwrap();
        for line in [
            "BatchMode yes\n",
            "StrictHostKeyChecking accept-new\n",
            "UserKnownHostsFile \"/kh/known\"\n",
            "IdentityFile \"/keys/my key\"\nIdentitiesOnly yes\n",
            "ConnectTimeout 10\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        assert!(text.find("BatchMode").unwrap() < text.find("Include ~/.ssh/config").unwrap());
        let j = SshTarget {
            jump: Some("ops@bastion:2222,next".into()),
            ..t.clone()
        }
        .first_jump()
        .unwrap();
        assert_eq!(
            (j.destination.as_str(), j.user.as_deref(), j.port, j.jump),
            ("bastion", Some("ops"), Some(2222), None)
        );
        assert_eq!(j.known_hosts, t.known_hosts);
        for bad in ["/keys/a\"b", "/keys/%d", "/keys/${HOME}", "/keys/a\\b"] {
            t.identity = Some(bad.into());
            let e = t.resolved().unwrap_err().to_string();
            assert!(e.contains("would expand or split"), "{bad}: {e}");
        }
        t.identity = Some("/keys/my key".into());
        t.known_hosts = Some("/kh/my known".into());
        assert!(
            t.resolved()
                .unwrap_err()
                .to_string()
                .contains("without spaces")
        );
    }

    #[test]
    fn an_ssh_url_destination_is_taken_apart() {
        let mut t = SshTarget::new("ssh://bob@h:2200");
        t.user = Some("ignored".into());
        let r = t.resolved().unwrap();
        assert_eq!(
            (r.destination.as_str(), r.user.as_deref(), r.port),
            ("h", Some("bob"), Some(2200))
        );
        assert_eq!(SshTarget::new("alice@h").display(), "alice@h");
    }
}
