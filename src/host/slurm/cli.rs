//! Slurm's own commands, run on this machine or on a login node over SSH ([`Runner`]) with
//! argument vectors (quoted one by one for the login node's shell, never joined from input),
//! and their output read into types: `sbatch --parsable`, `scontrol show job -o`, `scontrol show
//! hostnames`, `scontrol show node -o`, `squeue --steps`, `scancel`, `sacct`.

use std::process::Output;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::host::ssh::{SshError, SshHost};
use servebench_model::catalog::Failure;

use super::error::{COMMAND_TIMEOUT, SlurmError};

/// Where Slurm's commands run: this machine, or a login node reached over SSH (its host key
/// checked as for every SSH host).
#[derive(Clone, Default)]
pub enum Runner {
    #[default]
    Local,
    Login(Arc<SshHost>),
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Runner {
    /// `this machine` or `the login node user@host:port`, for messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Runner::Local => "this machine".into(),
            Runner::Login(ssh) => format!("the login node {}", ssh.name()),
        }
    }

    /// The login node's name as runs record it (`user@host:port`); None for this machine.
    pub(crate) fn login_name(&self) -> Option<String> {
        match self {
            Runner::Local => None,
            Runner::Login(ssh) => Some(ssh.name().to_string()),
        }
    }

    /// A process that runs `program args` where Slurm's commands run: the program itself, or
    /// `ssh` through the login node's connection (the remote process is not stopped by ending
    /// this one: stop steps with `scancel`). Its stdin is null; output is the caller's.
    pub(crate) fn command(
        &self,
        program: &str,
        args: &[String],
    ) -> Result<std::process::Command, SlurmError> {
        match self {
            Runner::Local => {
                let mut cmd = std::process::Command::new(program);
                cmd.args(args).stdin(std::process::Stdio::null());
                Ok(cmd)
            }
            Runner::Login(ssh) => {
                let mut argv = vec![program.to_string()];
                argv.extend(args.iter().cloned());
                ssh.std_command(&argv).map_err(|e| login_error(ssh, e))
            }
        }
    }
}

fn login_error(ssh: &SshHost, source: SshError) -> SlurmError {
    SlurmError::Login {
        host: ssh.name().to_string(),
        source: Box::new(source),
    }
}

/// Runs `program args` where `runner` runs Slurm's commands and returns its output
/// (whatever its exit status).
pub(crate) async fn output(
    runner: &Runner,
    program: &str,
    args: &[String],
) -> Result<Output, SlurmError> {
    let mut cmd = tokio::process::Command::from(runner.command(program, args)?);
    cmd.kill_on_drop(true);
    match tokio::time::timeout(COMMAND_TIMEOUT, cmd.output()).await {
        // ssh says 127 for a program the login node's shell cannot find.
        Ok(Ok(out)) if matches!(runner, Runner::Login(_)) && out.status.code() == Some(127) => {
            Err(SlurmError::Missing {
                program: program.to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "not found on {}: {}",
                        runner.describe(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                ),
            })
        }
        Ok(Ok(out)) if matches!(runner, Runner::Login(_)) && out.status.code() == Some(255) => {
            Err(SlurmError::Failed {
                command: shown(program, args),
                status: format!("ssh to {} failed", runner.describe()),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
        Ok(Ok(out)) => Ok(out),
        Ok(Err(source)) => Err(SlurmError::Missing {
            program: match runner {
                Runner::Local => program.to_string(),
                Runner::Login(_) => "ssh".into(),
            },
            source,
        }),
        Err(_) => Err(SlurmError::Timeout {
            command: shown(program, args),
        }),
    }
}

/// Runs `program args`; its stdout when it succeeds.
pub(crate) async fn run(
    runner: &Runner,
    program: &str,
    args: &[String],
) -> Result<String, SlurmError> {
    let out = output(runner, program, args).await?;
    if !out.status.success() {
        return Err(SlurmError::Failed {
            command: shown(program, args),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The command as a person would type it (for messages only; never run through a shell).
fn shown(program: &str, args: &[String]) -> String {
    let mut argv = vec![program.to_string()];
    argv.extend(args.iter().cloned());
    servebench_model::text::shell_join(&argv)
}

/// `sbatch --parsable` prints `JOBID` or `JOBID;CLUSTER`.
pub(crate) fn parse_job_id(stdout: &str) -> Option<u64> {
    stdout.trim().split(';').next()?.trim().parse().ok()
}

/// A job as `scontrol show job -o` describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JobInfo {
    /// `PENDING`, `RUNNING`, `COMPLETED`, `CANCELLED`, `TIMEOUT`, ...
    pub state: String,
    /// `Priority`, `Resources`, `TimeLimit`, ...; None for `None`.
    pub reason: Option<String>,
    /// `vm`, `gpu[01-02]`; None before it runs.
    pub node_list: Option<String>,
    pub partition: Option<String>,
    /// `0:15`.
    pub exit_code: Option<String>,
    pub submit_time: Option<String>,
    pub start_time: Option<String>,
}

impl JobInfo {
    /// True while the job holds (or may still get) its allocation.
    pub(crate) fn is_active(&self) -> bool {
        is_active_state(&self.state)
    }

    /// Seconds between submission and start, from Slurm's own timestamps.
    pub(crate) fn queued_s(&self) -> Option<f64> {
        let parse = |t: &Option<String>| {
            chrono::NaiveDateTime::parse_from_str(t.as_deref()?, "%Y-%m-%dT%H:%M:%S").ok()
        };
        let (s, t) = (parse(&self.submit_time)?, parse(&self.start_time)?);
        Some((t - s).num_milliseconds() as f64 / 1000.0).filter(|d| *d >= 0.0)
    }
}

/// States in which a job still holds or waits for its allocation.
pub(crate) fn is_active_state(state: &str) -> bool {
    matches!(
        state,
        "PENDING"
            | "RUNNING"
            | "CONFIGURING"
            | "COMPLETING"
            | "SUSPENDED"
            | "REQUEUED"
            | "RESIZING"
            | "SIGNALING"
            | "STAGE_OUT"
            | "STOPPED"
    )
}

/// The `Key=Value` fields of one `scontrol ... -o` line. Values end at the next space: the
/// fields read here (states, node lists, times) never hold one.
pub(crate) fn parse_fields(line: &str) -> IndexMap<String, String> {
    line.split_whitespace()
        .filter_map(|tok| tok.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `scontrol show job -o JOB`'s line as a [`JobInfo`].
pub(crate) fn parse_job(line: &str) -> Option<JobInfo> {
    let f = parse_fields(line);
    let some = |k: &str| {
        f.get(k)
            .filter(|v| !v.is_empty() && *v != "(null)" && *v != "None" && *v != "Unknown")
            .cloned()
    };
    Some(JobInfo {
        state: f.get("JobState")?.clone(),
        reason: some("Reason"),
        node_list: some("NodeList"),
        partition: some("Partition"),
        exit_code: some("ExitCode"),
        submit_time: some("SubmitTime"),
        start_time: some("StartTime"),
    })
}

/// The job as slurmctld knows it now; None once it forgot the job (`MinJobAge` after its end)
/// or never knew it.
pub(crate) async fn job(runner: &Runner, job_id: u64) -> Result<Option<JobInfo>, SlurmError> {
    let args = vec![
        "show".to_string(),
        "job".into(),
        "-o".into(),
        job_id.to_string(),
    ];
    let out = output(runner, "scontrol", &args).await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("Invalid job id") {
            return Ok(None);
        }
        return Err(SlurmError::Failed {
            command: shown("scontrol", &args),
            status: out.status.to_string(),
            stderr: stderr.trim().to_string(),
        });
    }
    match stdout.lines().find(|l| l.contains("JobState=")) {
        Some(line) => Ok(parse_job(line)),
        None => Err(SlurmError::Unreadable {
            command: shown("scontrol", &args),
            text: stdout.chars().take(300).collect(),
        }),
    }
}

/// A job's state from accounting (`sacct`), when the cluster keeps it: `(state, exit code)`.
/// None when accounting is disabled (the one-node test cluster) or knows nothing of the job.
pub(crate) async fn sacct_state(runner: &Runner, job_id: u64) -> Option<(String, Option<String>)> {
    let args: Vec<String> = [
        "-j",
        &job_id.to_string(),
        "-X",
        "-n",
        "-P",
        "-o",
        "State,ExitCode",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = run(runner, "sacct", &args).await.ok()?;
    parse_sacct(&out)
}

/// `sacct -X -n -P -o State,ExitCode`: `CANCELLED by 0|0:15`, first line.
pub(crate) fn parse_sacct(text: &str) -> Option<(String, Option<String>)> {
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let (state, code) = line.split_once('|').unwrap_or((line, ""));
    // `CANCELLED by 1000`: the state is its first word.
    let state = state.split_whitespace().next()?.to_string();
    Some((
        state,
        Some(code.trim().to_string()).filter(|c| !c.is_empty()),
    ))
}

/// Each host name in a Slurm node list (`gpu[01-02]` → `gpu01`, `gpu02`).
pub(crate) async fn hostnames(runner: &Runner, node_list: &str) -> Result<Vec<String>, SlurmError> {
    let out = run(
        runner,
        "scontrol",
        &["show".into(), "hostnames".into(), node_list.to_string()],
    )
    .await?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// The address slurmd reaches `node` at (`NodeAddr`), which the runner uses to reach a server
/// there.
pub(crate) async fn node_addr(runner: &Runner, node: &str) -> Result<String, SlurmError> {
    let args = vec![
        "show".to_string(),
        "node".into(),
        "-o".into(),
        node.to_string(),
    ];
    let out = run(runner, "scontrol", &args).await?;
    parse_fields(&out)
        .get("NodeAddr")
        .cloned()
        .ok_or_else(|| SlurmError::Unreadable {
            command: shown("scontrol", &args),
            text: out.chars().take(300).collect(),
        })
}

/// The job's steps by name: `(step id "12.0", name)`.
pub(crate) async fn steps(
    runner: &Runner,
    job_id: u64,
) -> Result<Vec<(String, String)>, SlurmError> {
    let out = run(
        runner,
        "squeue",
        &[
            "--steps".into(),
            "--jobs".into(),
            job_id.to_string(),
            "--noheader".into(),
            "--format=%i|%j".into(),
        ],
    )
    .await?;
    Ok(out
        .lines()
        .filter_map(|l| l.trim().split_once('|'))
        .map(|(i, n)| (i.to_string(), n.to_string()))
        .collect())
}

/// `scancel [--signal=SIG] TARGET` (a job `12` or a step `12.0`).
pub(crate) async fn cancel(
    runner: &Runner,
    target: &str,
    signal: Option<&str>,
) -> Result<(), SlurmError> {
    let mut args = Vec::new();
    if let Some(s) = signal {
        args.push(format!("--signal={s}"));
    }
    args.push(target.to_string());
    run(runner, "scancel", &args).await.map(|_| ())
}

/// The same as [`cancel`] without waiting on a runtime (for `Drop`).
pub(crate) fn cancel_blocking(runner: &Runner, target: &str) {
    if let Ok(mut cmd) = runner.command("scancel", &[target.to_string()]) {
        let _ = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Slurm's own reason for a server's end, from the job's state, or from the lines Slurm
/// writes into a step's output (`slurmstepd: error: *** STEP 12.0 ON vm CANCELLED AT ...
/// DUE TO TIME LIMIT ***`, `Detected 1 oom_kill event`). None when Slurm did not end it.
pub(crate) fn failure_of(state: Option<&str>, log_tail: &str) -> Option<Failure> {
    let from_state = match state {
        Some("TIMEOUT" | "DEADLINE") => Some(Failure::TimeLimit),
        Some("PREEMPTED") => Some(Failure::Preempted),
        Some("NODE_FAIL" | "BOOT_FAIL") => Some(Failure::NodeFailure),
        Some("OUT_OF_MEMORY") => Some(Failure::OomKilled),
        _ => None,
    };
    from_state.or_else(|| {
        let lines: &[(&str, Failure)] = &[
            ("DUE TO TIME LIMIT", Failure::TimeLimit),
            ("DUE TO PREEMPTION", Failure::Preempted),
            ("DUE TO NODE FAILURE", Failure::NodeFailure),
            ("oom_kill event", Failure::OomKilled),
            ("oom-kill event", Failure::OomKilled),
        ];
        lines
            .iter()
            .find(|(l, _)| log_tail.contains(l))
            .map(|(_, f)| *f)
            .or_else(|| {
                (state == Some("CANCELLED")
                    || (log_tail.contains("slurmstepd") && log_tail.contains("CANCELLED AT")))
                .then_some(Failure::JobCancelled)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // As Slurm 22.05 prints them (captured on the one-node test cluster).
    const TIMED_OUT: &str = "JobId=3 JobName=sb-t UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 Nice=0 Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:08 TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-11-30T20:24:00 EligibleTime=2026-11-30T20:24:00 AccrueTime=2026-11-30T20:24:00 StartTime=2026-11-30T20:24:01 EndTime=2026-11-30T20:25:09 Deadline=N/A Partition=debug NodeList=vm BatchHost=vm";
    const PENDING: &str = "JobId=7 JobName=servebench-x-g1 JobState=PENDING Reason=Priority Dependency=(null) ExitCode=0:0 SubmitTime=2026-11-30T20:24:00 StartTime=Unknown Partition=debug NodeList=(null)";

    #[test]
    fn scontrol_lines_are_read() {
        let j = parse_job(TIMED_OUT).unwrap();
        assert_eq!(j.state, "TIMEOUT");
        assert_eq!(j.reason.as_deref(), Some("TimeLimit"));
        assert_eq!(j.node_list.as_deref(), Some("vm"));
        assert_eq!(j.exit_code.as_deref(), Some("0:15"));
        assert_eq!(j.queued_s(), Some(1.0));
        assert!(!j.is_active());
        let p = parse_job(PENDING).unwrap();
        assert!(p.is_active());
        assert_eq!(p.reason.as_deref(), Some("Priority"));
        assert_eq!(p.node_list, None);
        assert_eq!(p.queued_s(), None);
        assert_eq!(parse_job("slurm_load_jobs error"), None);
    }

    #[test]
    fn job_ids_and_accounting_are_read() {
        assert_eq!(parse_job_id("42\n"), Some(42));
        assert_eq!(parse_job_id("42;cluster\n"), Some(42));
        assert_eq!(parse_job_id("Submitted batch job 42"), None);
        assert_eq!(
            parse_sacct("CANCELLED by 0|0:15\n"),
            Some(("CANCELLED".into(), Some("0:15".into())))
        );
        assert_eq!(parse_sacct("\n"), None);
    }

    #[test]
    fn slurms_own_failures_are_classified() {
        assert_eq!(failure_of(Some("TIMEOUT"), ""), Some(Failure::TimeLimit));
        assert_eq!(failure_of(Some("PREEMPTED"), ""), Some(Failure::Preempted));
        assert_eq!(
            failure_of(Some("NODE_FAIL"), ""),
            Some(Failure::NodeFailure)
        );
        assert_eq!(
            failure_of(Some("OUT_OF_MEMORY"), ""),
            Some(Failure::OomKilled)
        );
        assert_eq!(
            failure_of(Some("CANCELLED"), ""),
            Some(Failure::JobCancelled)
        );
        // The job lives on (one allocation per run); the step's output tells.
        assert_eq!(
            failure_of(
                Some("RUNNING"),
                "slurmstepd: error: *** STEP 12.0 ON vm CANCELLED AT 2026-11-30T20:25:09 DUE TO TIME LIMIT ***"
            ),
            Some(Failure::TimeLimit)
        );
        assert_eq!(
            failure_of(
                Some("RUNNING"),
                "slurmstepd: error: Detected 1 oom_kill event in StepId=12.0."
            ),
            Some(Failure::OomKilled)
        );
        assert_eq!(
            failure_of(
                Some("RUNNING"),
                "slurmstepd: error: *** STEP 12.0 ON vm CANCELLED AT 2026-11-30T20:25:09 ***"
            ),
            Some(Failure::JobCancelled)
        );
        // A server that crashed on its own is the engine's to classify.
        assert_eq!(
            failure_of(Some("RUNNING"), "torch.OutOfMemoryError: CUDA"),
            None
        );
        assert_eq!(failure_of(None, ""), None);
    }
}
