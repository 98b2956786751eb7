//! Remote processes: started detached in their own session and process group, watched and
//! stopped as a whole group, like `host::local` does on this machine.

use std::time::Duration;

use indexmap::IndexMap;

use super::{SshError, SshHost};
use crate::host::local::StopOutcome;

/// A process started with [`SshHost::spawn_detached`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteProcess {
    /// The command's pid.
    pub pid: i32,
    /// Its process group (and session): a small launcher shell that waits for the command and
    /// records its exit status; the command and everything it starts are in this group.
    pub pgid: i32,
    /// File holding `pid`; `<pid_path>.pgid` holds `pgid`, `<pid_path>.exit` the exit status
    /// once the command ends by itself.
    pub pid_path: String,
    /// stdout and stderr of the command, appended.
    pub log_path: String,
    /// When the group's leader started, in clock ticks since the host's boot (`/proc/PID/stat`
    /// field 22); None where the host has no /proc.
    pub leader_start: Option<u64>,
    /// The host's boot id at launch.
    pub boot_id: Option<String>,
}

/// Launches "$@" detached. Inputs: $1 workdir ('' for none), $2 log, $3 pid file, $4 number
/// of NAME=value words to export, then those words, then the command. The inner shell (the
/// group leader after setsid) writes its own pid, runs the command in the background so it
/// can record the command's pid and, after `wait`, its exit status. Prints "PID PGID START
/// BOOT": the leader's start time (clock ticks since boot) and the boot id, `-` when unknown.
const LAUNCH: &str = r#"
workdir=$1 log=$2 pidfile=$3 nenv=$4
shift 4
while [ "$nenv" -gt 0 ]; do export "$1" || exit 3; shift; nenv=$((nenv - 1)); done
command -v setsid >/dev/null 2>&1 || { echo "setsid is not installed on the host (it is in util-linux)" >&2; exit 3; }
if [ -n "$workdir" ]; then cd "$workdir" || exit 3; fi
rm -f "$pidfile" "$pidfile.pgid" "$pidfile.exit" "$pidfile.tmp"
: >> "$log" || exit 3
setsid sh -c '
pidfile=$1; shift
echo $$ > "$pidfile.pgid"
"$@" &
child=$!
echo "$child" > "$pidfile.tmp" && mv -f "$pidfile.tmp" "$pidfile"
wait "$child"
echo $? > "$pidfile.exit"
' sh "$pidfile" "$@" < /dev/null >> "$log" 2>&1 &
i=0
while [ ! -s "$pidfile" ]; do
  i=$((i + 1))
  if [ "$i" -gt 200 ]; then echo "the process did not start: no pid in $pidfile after 10 s" >&2; exit 3; fi
  sleep 0.05 2>/dev/null || sleep 1
done
pg=$(cat "$pidfile.pgid")
start=$(sed 's/.*) //' "/proc/$pg/stat" 2>/dev/null | cut -d' ' -f20)
boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
echo "$(cat "$pidfile") $pg ${start:--} ${boot:--}"
"#;

/// $1 pgid, $2 the recorded leader start ('' when unknown). Prints what the host says about
/// the group now: "LEADER_STATE LEADER_START LIVE OLDER BOOT" (`-` for no leader or no boot
/// id): the leader's state and start when it is still in the group, how many of its
/// processes are not zombies, how many of those started before the recorded leader.
const GROUP_FACTS: &str = r#"
g=$1 start=$2
leader=$(sed 's/.*) //' "/proc/$g/stat" 2>/dev/null | awk -v g="$g" '$3 == g { print $1, $20 }')
counts=$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v g="$g" -v start="$start" '
  { sub(/^[^(]*\(.*\) /, "") }
  $3 == g && $1 != "Z" { live++; if (start != "" && $20 + 0 < start + 0) older++ }
  END { print live + 0, older + 0 }')
boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
[ -d /proc/self ] || { echo "no-proc"; exit 0; }
echo "${leader:-- -} $counts ${boot:--}"
"#;

/// Shell functions: is pid $1 / group $1 alive? Zombies do not count (a container's init may
/// not reap them promptly); without `ps`, `kill -0` alone decides.
const ALIVE_FNS: &str = r#"
pid_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  command -v ps >/dev/null 2>&1 || return 0
  case $(ps -o stat= -p "$1" 2>/dev/null) in Z*) return 1 ;; esac
  return 0
}
group_alive() {
  kill -0 "-$1" 2>/dev/null || return 1
  command -v ps >/dev/null 2>&1 || return 0
  ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'
}
"#;

/// $1 pgid, $2 grace in tenths of a second. Prints gone | term | kill | survived.
const STOP: &str = r#"
g=$1 tenths=$2
pause() { sleep 0.1 2>/dev/null || sleep 1; }
group_alive "$g" || { echo gone; exit 0; }
kill -TERM "-$g" 2>/dev/null
i=0
while [ "$i" -lt "$tenths" ]; do
  group_alive "$g" || { echo term; exit 0; }
  pause; i=$((i + 1))
done
group_alive "$g" || { echo term; exit 0; }
kill -KILL "-$g" 2>/dev/null
i=0
while [ "$i" -lt 50 ]; do
  group_alive "$g" || { echo kill; exit 0; }
  pause; i=$((i + 1))
done
echo survived
"#;

const EXIT_CODE: &str = r#"[ -f "$1" ] || exit 0; cat "$1""#;

impl SshHost {
    /// Starts `argv` on the host, detached from the connection in its own session and process
    /// group (setsid): stdin from /dev/null, stdout and stderr appended to `log_path`, its pid
    /// written to `pid_path`. `env` is added to the environment and `workdir` is the working
    /// directory (None: the login directory). Paths are used as given (no `~` expansion).
    ///
    /// Not retried after a reconnection, so it never starts twice: the master is checked
    /// first instead. The command ignores SIGINT (POSIX shells do that for background
    /// commands); stop it with [`stop_group`](Self::stop_group).
    pub async fn spawn_detached<S: AsRef<str>>(
        &self,
        argv: &[S],
        env: &IndexMap<String, String>,
        workdir: Option<&str>,
        log_path: &str,
        pid_path: &str,
    ) -> Result<RemoteProcess, SshError> {
        let program = argv.first().map(AsRef::as_ref).unwrap_or("");
        if program.is_empty() {
            return Err(SshError::InvalidArgument(
                "no program given to launch".into(),
            ));
        }
        let mut args = vec![
            workdir.unwrap_or("").to_string(),
            log_path.to_string(),
            pid_path.to_string(),
            env.len().to_string(),
        ];
        for (name, value) in env {
            check_env_name(name)?;
            args.push(format!("{name}={value}"));
        }
        args.extend(argv.iter().map(|a| a.as_ref().to_string()));
        self.ensure_connected().await?;
        let s = self.session();
        let out = super::command(&s, &super::script_argv(LAUNCH, &args))
            .output()
            .await
            .map_err(|e| self.command_error("launching", e))?;
        let stdout = self.checked(&format!("launching {program}"), out)?;
        let text = String::from_utf8_lossy(&stdout);
        let launched = parse_launched(&text).ok_or_else(|| SshError::Remote {
            host: self.name().to_string(),
            what: format!("launching {program}"),
            message: format!("the launcher printed {text:?}, not a pid and a process group"),
        })?;
        Ok(RemoteProcess {
            pid: launched.pid,
            pgid: launched.pgid,
            pid_path: pid_path.to_string(),
            log_path: log_path.to_string(),
            leader_start: launched.leader_start,
            boot_id: launched.boot_id,
        })
    }

    /// True while process `pid` exists (and is not a zombie).
    pub async fn alive(&self, pid: i32) -> Result<bool, SshError> {
        check_pid(pid, 0)?;
        let script = format!("{ALIVE_FNS}\npid_alive \"$1\"");
        let out = self.run_script(&script, &[pid.to_string()]).await?;
        Ok(out.status.success())
    }

    /// What the host says about recorded group `id` now (see [`crate::host::judge`]). None
    /// when the host has no /proc (the caller falls back to the program name).
    pub(crate) async fn group_facts(
        &self,
        id: &crate::host::GroupIdentity,
    ) -> Result<Option<crate::host::GroupFacts>, SshError> {
        check_pid(id.pgid, 1)?;
        let start = id.leader_start.map(|s| s.to_string()).unwrap_or_default();
        let stdout = self
            .script_checked(
                "looking at a process group",
                GROUP_FACTS,
                &[id.pgid.to_string(), start],
            )
            .await?;
        Ok(parse_group_facts(&String::from_utf8_lossy(&stdout)))
    }

    /// True while any process of group `pgid` exists (zombies aside).
    pub async fn group_alive(&self, pgid: i32) -> Result<bool, SshError> {
        check_pid(pgid, 1)?;
        let script = format!("{ALIVE_FNS}\ngroup_alive \"$1\"");
        let out = self.run_script(&script, &[pgid.to_string()]).await?;
        Ok(out.status.success())
    }

    /// True while process `pid` exists and still leads or belongs to group `pgid`: a check
    /// before signalling a group whose id came from an earlier report (ids are reused).
    pub(crate) async fn pid_in_group(&self, pid: i32, pgid: i32) -> Result<bool, SshError> {
        check_pid(pid, 1)?;
        check_pid(pgid, 1)?;
        // Field 5 of /proc/PID/stat, counted after the `(comm)` field, which may hold spaces.
        let script = r#"g=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f3)
[ -n "$g" ] || g=$(ps -o pgid= -p "$1" 2>/dev/null | tr -d ' ')
[ "$g" = "$2" ]"#;
        let out = self
            .run_script(script, &[pid.to_string(), pgid.to_string()])
            .await?;
        Ok(out.status.success())
    }

    /// SIGTERM to the whole group, up to `grace` for it to go, then SIGKILL, and confirms it
    /// is gone (all on the host, in one command). An error if it survives even SIGKILL.
    pub async fn stop_group(&self, pgid: i32, grace: Duration) -> Result<StopOutcome, SshError> {
        check_pid(pgid, 1)?;
        let tenths = grace.as_millis().div_ceil(100).to_string();
        let script = format!("{ALIVE_FNS}\n{STOP}");
        let stdout = self
            .script_checked(
                "stopping a process group",
                &script,
                &[pgid.to_string(), tenths],
            )
            .await?;
        match String::from_utf8_lossy(&stdout).trim() {
            "gone" => Ok(StopOutcome::AlreadyExited(format!(
                "no process of group {pgid} was left"
            ))),
            "term" => Ok(StopOutcome::Terminated),
            "kill" => Ok(StopOutcome::Killed),
            other => Err(SshError::Remote {
                host: self.name().to_string(),
                what: format!("stopping process group {pgid}"),
                message: match other {
                    "survived" => "it is still there 5 s after SIGKILL (a process stuck in the kernel, e.g. in a GPU driver call?)".into(),
                    o => format!("unexpected answer {o:?}"),
                },
            }),
        }
    }

    /// The command's exit status once it has ended by itself; None while it runs, or when it
    /// was killed together with its launcher.
    pub async fn exit_code(&self, process: &RemoteProcess) -> Result<Option<i32>, SshError> {
        let path = format!("{}.exit", process.pid_path);
        let stdout = self
            .script_checked("reading the exit status", EXIT_CODE, &[path])
            .await?;
        Ok(String::from_utf8_lossy(&stdout).trim().parse().ok())
    }
}

/// What the launch script printed, read back.
#[derive(Debug, PartialEq)]
struct Launched {
    pid: i32,
    pgid: i32,
    leader_start: Option<u64>,
    boot_id: Option<String>,
}

/// `PID PGID` (an older script) or `PID PGID START BOOT`, `-` for an unknown start or boot id.
fn parse_launched(text: &str) -> Option<Launched> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() != 2 && words.len() != 4 {
        return None;
    }
    let (pid, pgid): (i32, i32) = (words[0].parse().ok()?, words[1].parse().ok()?);
    if pid <= 1 || pgid <= 1 {
        return None;
    }
    let known = |i: usize| words.get(i).filter(|w| **w != "-");
    Some(Launched {
        pid,
        pgid,
        leader_start: known(2).and_then(|w| w.parse().ok()),
        boot_id: known(3).map(|w| w.to_string()),
    })
}

/// `LEADER_STATE LEADER_START LIVE OLDER BOOT` from [`GROUP_FACTS`]; None for `no-proc` or
/// anything unreadable.
fn parse_group_facts(text: &str) -> Option<crate::host::GroupFacts> {
    let w: Vec<&str> = text.split_whitespace().collect();
    if w.len() != 5 {
        return None;
    }
    let leader = match (w[0], w[1]) {
        ("-", _) | (_, "-") => None,
        (state, start) => Some((state.chars().next()?, start.parse().ok()?)),
    };
    Some(crate::host::GroupFacts {
        leader,
        live: w[2].parse().ok()?,
        older: w[3].parse().ok()?,
        boot_id: (w[4] != "-").then(|| w[4].to_string()),
    })
}

/// `kill -TERM -1` would signal every process of the user: only real ids pass.
fn check_pid(id: i32, min_exclusive: i32) -> Result<(), SshError> {
    if id > min_exclusive {
        Ok(())
    } else {
        Err(SshError::InvalidArgument(format!(
            "refusing to signal process id {id}"
        )))
    }
}

fn check_env_name(name: &str) -> Result<(), SshError> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(SshError::InvalidArgument(format!(
            "environment variable name {name:?} must be letters, digits and '_', not starting with a digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_output_is_two_real_ids_and_the_leaders_identity() {
        let ids = |t: &str| parse_launched(t).map(|l| (l.pid, l.pgid));
        assert_eq!(ids("123 120\n"), Some((123, 120)));
        assert_eq!(ids("123\n"), None);
        assert_eq!(ids("123 1"), None);
        assert_eq!(ids("0 5"), None);
        assert_eq!(ids("12 13 14"), None);
        assert_eq!(
            parse_launched("123 120 98765 0b1c-boot\n"),
            Some(Launched {
                pid: 123,
                pgid: 120,
                leader_start: Some(98765),
                boot_id: Some("0b1c-boot".into()),
            })
        );
        let unknown = parse_launched("123 120 - -").unwrap();
        assert_eq!((unknown.leader_start, unknown.boot_id), (None, None));
    }

    #[test]
    fn group_facts_are_read_back() {
        assert_eq!(
            parse_group_facts("S 4000 3 0 boot-a\n"),
            Some(crate::host::GroupFacts {
                leader: Some(('S', 4000)),
                live: 3,
                older: 0,
                boot_id: Some("boot-a".into()),
            })
        );
        let f = parse_group_facts("- - 0 0 -").unwrap();
        assert_eq!((f.leader, f.live, f.boot_id), (None, 0, None));
        assert_eq!(parse_group_facts("no-proc"), None);
    }

    #[test]
    fn dangerous_ids_and_names_are_refused() {
        assert!(check_pid(1, 1).is_err());
        assert!(check_pid(-5, 1).is_err());
        assert!(check_pid(2, 1).is_ok());
        assert!(check_env_name("HF_TOKEN").is_ok());
        for bad in ["", "1A", "A=B", "A B", "$(x)"] {
            assert!(check_env_name(bad).is_err(), "{bad}");
        }
    }
}
