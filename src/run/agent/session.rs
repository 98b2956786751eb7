//! A `servebench agent` session on an SSH host or in a Slurm allocation next to rank 0
//! (`client: host`): the runner sends it points
//! as JSON lines, it measures them against the server on the host's localhost and streams each
//! request record back, which the runner appends to the run directory as it arrives. A silent
//! agent (no heartbeat) is stopped; a broken stream records the point as lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::host::remote::RemoteHost;
use crate::host::slurm::SlurmHost;
use crate::host::ssh::{PipedChild, SshHost};
use servebench_model::catalog::FlagKind;
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::Point;

use super::{AgentEvent, AgentRequest};
use crate::run::point::PointOutcome;
use crate::run::progress::Progress;

/// How long an interrupted agent may take to report its partial point.
const AGENT_STOP_WAIT: Duration = Duration::from_secs(30);

/// An agent that sends nothing (heartbeats included) for this long is frozen: it is stopped
/// and the point recorded as lost. SERVEBENCH_AGENT_SILENCE_S overrides it (tests).
const AGENT_SILENCE_LIMIT: Duration = Duration::from_secs(60);

/// The agent's heartbeat: every 5 s, or a quarter of a shorter silence limit.
fn heartbeat_for(silence_limit: Duration) -> Duration {
    (silence_limit / 4).clamp(Duration::from_millis(10), Duration::from_secs(5))
}

fn agent_silence_limit() -> Duration {
    std::env::var("SERVEBENCH_AGENT_SILENCE_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(AGENT_SILENCE_LIMIT, Duration::from_secs_f64)
}

/// Why an agent could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AgentError {
    #[error(transparent)]
    Host(#[from] crate::host::HostError),
    #[error(transparent)]
    Ssh(#[from] crate::host::ssh::SshError),
    #[error("the agent has no {0}")]
    NoPipe(&'static str),
    #[error("no Slurm allocation runs to start the agent in")]
    NoAllocation,
    #[error("cannot start srun for the agent: {0}")]
    Srun(#[source] std::io::Error),
}

/// Where the agent runs.
#[derive(Clone)]
pub(crate) enum AgentPlace {
    /// On the SSH host, through the run's connection.
    Ssh(Arc<RemoteHost>),
    /// As a step of the Slurm allocation the server runs in, on rank 0's node.
    Slurm(Arc<SlurmHost>),
}

/// The agent's process as this machine holds it.
enum AgentLink {
    /// The remote command over SSH; a frozen agent is stopped on the host.
    Ssh {
        ssh: Arc<SshHost>,
        child: PipedChild,
    },
    /// The `srun` that runs the agent as a job step; stopping it stops the step.
    Step(tokio::process::Child),
}

type AgentInput = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;
type AgentOutput = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// `servebench agent` on the host, measuring points against the server on localhost.
pub(crate) struct AgentSession {
    link: AgentLink,
    /// From the agent's hello: its pid and group, to stop if it goes silent. Until a hello
    /// with heartbeats arrives (an older agent sends none), silence is not timed.
    hello: Option<(i32, i32)>,
    /// The protocol its hello named (0 before it, or from an agent that names none).
    protocol: u32,
    silence_limit: Duration,
    stdin: Option<AgentInput>,
    lines: tokio::io::Lines<tokio::io::BufReader<AgentOutput>>,
    /// The end of the agent's stderr (drained, so a chatty agent never blocks on a full pipe),
    /// quoted when its stream breaks.
    stderr_tail: Arc<std::sync::Mutex<String>>,
    /// The task draining stderr: awaited (briefly) when stdout ends, so an agent's last words,
    /// written just before it exited, are read before they are quoted.
    stderr_drain: Option<tokio::task::JoinHandle<()>>,
}

/// How often the router's log is looked at for sends to relay to the agent.
const RELAY_EVERY: Duration = Duration::from_millis(50);

/// Most sends relayed in one line (a log that grew by more is relayed in several).
const RELAY_BATCH: usize = 4096;

/// How late a relayed send may reach the agent past the copy's own lag: a look, and the
/// line's way to the host.
pub(crate) const RELAY_LAG: Duration = Duration::from_millis(500);

/// How long a broken stream waits for the agent's stderr to end before quoting what it has.
const STDERR_GRACE: Duration = Duration::from_secs(1);

/// Bytes of the agent's stderr kept for error messages.
const STDERR_TAIL: usize = 2000;

impl AgentSession {
    pub(crate) async fn start(place: &AgentPlace) -> Result<AgentSession, AgentError> {
        let silence_limit = agent_silence_limit();
        let heartbeat_ms = heartbeat_for(silence_limit).as_millis().to_string();
        let (link, stdin, stdout, stderr): (
            AgentLink,
            AgentInput,
            AgentOutput,
            Option<AgentOutput>,
        ) = match place {
            AgentPlace::Ssh(host) => {
                let bin = host.binary().await?;
                let mut child = host
                    .ssh
                    .spawn_piped(&[bin.as_str(), "agent", "--heartbeat-ms", &heartbeat_ms])
                    .await?;
                let stdin = child.stdin().take().ok_or(AgentError::NoPipe("stdin"))?;
                let stdout = child.stdout().take().ok_or(AgentError::NoPipe("stdout"))?;
                let stderr = child.stderr().take().map(|e| Box::new(e) as AgentOutput);
                (
                    AgentLink::Ssh {
                        ssh: host.ssh.clone(),
                        child,
                    },
                    Box::new(stdin),
                    Box::new(stdout),
                    stderr,
                )
            }
            AgentPlace::Slurm(host) => {
                let mut cmd = host
                    .agent_command(&heartbeat_ms)
                    .await
                    .ok_or(AgentError::NoAllocation)?;
                cmd.stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .kill_on_drop(true);
                let mut child = cmd.spawn().map_err(AgentError::Srun)?;
                let stdin = child.stdin.take().ok_or(AgentError::NoPipe("stdin"))?;
                let stdout = child.stdout.take().ok_or(AgentError::NoPipe("stdout"))?;
                let stderr = child.stderr.take().map(|e| Box::new(e) as AgentOutput);
                (
                    AgentLink::Step(child),
                    Box::new(stdin),
                    Box::new(stdout),
                    stderr,
                )
            }
        };
        let stderr_tail = Arc::new(std::sync::Mutex::new(String::new()));
        let stderr_drain = stderr.map(|stderr| {
            let tail = stderr_tail.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                    t.push_str(&line);
                    t.push('\n');
                    if t.len() > STDERR_TAIL {
                        let cut =
                            servebench_model::text::ceil_char_boundary(&t, t.len() - STDERR_TAIL);
                        t.drain(..cut);
                    }
                }
            })
        });
        Ok(AgentSession {
            link,
            hello: None,
            protocol: 0,
            silence_limit,
            stdin: Some(stdin),
            lines: tokio::io::BufReader::new(stdout).lines(),
            stderr_tail,
            stderr_drain,
        })
    }

    /// Measures one point on the host. Records are appended to the run directory as they
    /// arrive, so a dropped connection loses nothing that was measured. On an interrupt the
    /// agent's stdin is closed: it abandons in-flight requests and reports the partial point.
    /// Tells the agent to stop its point, its stdin left open; false when it could not be
    /// told so.
    async fn send_stop(&mut self) -> bool {
        let Some(stdin) = self.stdin.as_mut() else {
            return false;
        };
        let w = async {
            stdin.write_all(super::STOP_LINE.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await
        };
        w.await.is_ok()
    }

    /// Relays the sends the router's log gained to the agent (whose point waits for them);
    /// a write that fails is left to the point's own reading of the agent to report.
    async fn relay_sends(&mut self, tail: &mut crate::run::server::routing::LogTail) {
        let mut sends = Vec::new();
        if !tail.read_new(&mut sends) {
            return;
        }
        let Some(stdin) = self.stdin.as_mut() else {
            return;
        };
        // A log that grew without a send still counts as a pull the agent waits through.
        let batches: Vec<Vec<_>> = if sends.is_empty() {
            vec![Vec::new()]
        } else {
            sends.chunks(RELAY_BATCH).map(<[_]>::to_vec).collect()
        };
        for routed in batches {
            let Ok(line) = serde_json::to_string(&super::RoutedLine { routed }) else {
                return;
            };
            let w = async {
                stdin.write_all(line.as_bytes()).await?;
                stdin.write_all(b"\n").await?;
                stdin.flush().await
            };
            if w.await.is_err() {
                return;
            }
        }
    }

    pub(crate) async fn measure(
        &mut self,
        req: AgentRequest,
        run_dir: &RunDir,
        progress: &Progress,
        interrupt: &crate::run::interrupt::Interrupt,
        mut relay: Option<&mut crate::run::server::routing::LogTail>,
    ) -> PointOutcome {
        let point = point_of(&req);
        progress.point_started(&point.id, &point.label());
        if let Err(e) = self.send_point(&req).await {
            return lost(
                &req,
                0,
                format!("could not send the point to the agent: {e}"),
            );
        }
        let mut reading = PointReading {
            req: &req,
            run_dir,
            progress,
            interrupt,
            received: 0,
            garbled: None,
            interrupted: false,
        };
        // After an interrupt the agent has this long to report its partial point.
        let mut give_up = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
        let mut heard = tokio::time::Instant::now();
        let mut relay_tick = tokio::time::interval(RELAY_EVERY);
        relay_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                // In this order: an interrupt (once), the relay, then lines, then the timers, so that
                // after the runner itself was paused, queued heartbeats count before the
                // silence timer does.
                biased;
                _ = interrupt.wait(), if !reading.interrupted => {
                    reading.interrupted = true;
                    self.ask_to_stop(relay.is_some()).await;
                    give_up = tokio::time::Instant::now() + AGENT_STOP_WAIT;
                    continue;
                }
                // Before the agent's lines: while records stream back without a pause, the
                // router's sends still reach the agent (its records wait for them).
                _ = relay_tick.tick(), if relay.is_some() && self.protocol >= 3 => {
                    if let Some(tail) = relay.as_deref_mut() {
                        self.relay_sends(tail).await;
                    }
                    continue;
                }
                l = self.lines.next_line() => l,
                _ = tokio::time::sleep_until(give_up) => {
                    let stopped = self.stop_frozen().await;
                    let mut out = lost(&req, reading.received, format!("the agent did not report after the interrupt; {stopped}"));
                    out.interrupted = true;
                    return out;
                }
                _ = tokio::time::sleep_until(heard + self.silence_limit), if self.hello.is_some() => {
                    return self.silent(&reading).await;
                }
            };
            heard = tokio::time::Instant::now();
            let ended = match next {
                Ok(Some(line)) => self.take_line(&line, &mut reading),
                Ok(None) | Err(_) => Some(self.dropped(&reading).await),
            };
            if let Some(outcome) = ended {
                return outcome;
            }
        }
    }

    /// Tells the agent to stop its point and report it: EOF on its stdin stops it like
    /// Ctrl-C. While a relay runs (`relaying`), a stop line does it instead: the records
    /// finished just before still get the router's sends they wait for.
    async fn ask_to_stop(&mut self, relaying: bool) {
        if !(relaying && self.protocol >= 3 && self.send_stop().await) {
            self.stdin = None;
        }
    }

    /// One line from the agent, taken in: its point's outcome when the line ends the point.
    fn take_line(&mut self, line: &str, reading: &mut PointReading<'_>) -> Option<PointOutcome> {
        let Ok(event) = serde_json::from_str::<AgentEvent>(line) else {
            // Not ours (a login banner, a stray print, a cut line): skipped, but counted and
            // shown on the point.
            let head: String = line.chars().take(200).collect();
            match &mut reading.garbled {
                Some((n, _)) => *n += 1,
                None => reading.garbled = Some((1usize, head)),
            }
            return None;
        };
        match event {
            AgentEvent::Hello {
                pid,
                pgid,
                protocol,
            } => {
                if protocol >= 2 {
                    self.hello = Some((pid, pgid));
                }
                self.protocol = protocol;
            }
            AgentEvent::Heartbeat => {}
            // A scrape that cannot be written is lost, not fatal, as in-process: the server's
            // view is a side channel.
            AgentEvent::Metrics(m) => {
                let _ = reading.run_dir.append_metrics(&m);
            }
            AgentEvent::Gpu(g) => {
                let _ = reading.run_dir.append_gpu(&g);
            }
            AgentEvent::Request(r) => reading.record(&r),
            AgentEvent::Point {
                point,
                interrupted: agent_interrupted,
            } => {
                let end = (agent_interrupted, reading.interrupted);
                let garbled = reading.garbled.as_ref();
                return Some(self.point_came(reading.req, point, end, garbled, reading.progress));
            }
            AgentEvent::Error(e) => {
                return Some(lost(
                    reading.req,
                    reading.received,
                    format!("the agent reported: {e}"),
                ));
            }
        }
        None
    }

    /// The point, lost to an agent that went silent (no heartbeat either): it is stopped.
    async fn silent(&mut self, reading: &PointReading<'_>) -> PointOutcome {
        let stopped = self.stop_frozen().await;
        let mut out = lost(
            reading.req,
            reading.received,
            format!(
                "the host's agent sent nothing, not even its heartbeat (every {:.1} s), for {:.1} s: frozen or stopped; {stopped}",
                heartbeat_for(self.silence_limit).as_secs_f64(),
                self.silence_limit.as_secs_f64()
            ),
        );
        out.interrupted = reading.interrupted;
        out
    }

    /// The point, lost to the agent's output ending before it.
    async fn dropped(&mut self, reading: &PointReading<'_>) -> PointOutcome {
        let mut out = lost(reading.req, reading.received, self.why_dropped().await);
        out.interrupted = reading.interrupted;
        out
    }

    /// Writes the point's request to the agent as one line.
    async fn send_point(&mut self, req: &AgentRequest) -> std::io::Result<()> {
        match (self.stdin.as_mut(), serde_json::to_string(req)) {
            (Some(stdin), Ok(line)) => {
                stdin.write_all(line.as_bytes()).await?;
                stdin.write_all(b"\n").await?;
                stdin.flush().await
            }
            (None, _) => Err(std::io::Error::other("the agent's input is closed")),
            (_, Err(e)) => Err(std::io::Error::other(e)),
        }
    }

    /// The agent's point came: flagged when lines from the agent were not servebench's
    /// (`garbled`: how many, the first) or when its Slurm step was stopped from outside.
    /// `(agent_interrupted, interrupted)`: the agent heard an interrupt; the runner sent one.
    fn point_came(
        &self,
        req: &AgentRequest,
        mut point: servebench_model::results::records::PointRecord,
        (agent_interrupted, interrupted): (bool, bool),
        garbled: Option<&(usize, String)>,
        progress: &Progress,
    ) -> PointOutcome {
        if let Some((n, first)) = garbled {
            // A line we could not read may have been a request record.
            point.flags.push(servebench_model::results::records::Flag::new(
                FlagKind::AgentGarbled,
                format!(
                    "{} from the host's agent {} not servebench output and {} skipped (first: {first}); requests.jsonl may lack a request this point counted",
                    servebench_model::text::count_s(*n, "line"),
                    if *n == 1 { "was" } else { "were" },
                    if *n == 1 { "was" } else { "were" },
                ),
            ));
        }
        // A Slurm step stopped by Slurm itself (scancel, a time limit) hears the signal as an
        // interrupt: the runner did not ask for it, so the point is lost there, and the
        // server's end is classified.
        let stopped_from_outside =
            agent_interrupted && !interrupted && matches!(self.link, AgentLink::Step(_));
        if stopped_from_outside {
            point.flags.push(servebench_model::results::records::Flag::new(
                FlagKind::AgentLost,
                "the agent's Slurm step was stopped by a signal servebench did not send (an scancel, a time limit, a preemption) during this point; what it measured is kept",
            ));
            point.incomplete = true;
        }
        progress.point_finished(
            &req.id,
            &crate::run::progress::point_line(&point_of(req), &point),
        );
        PointOutcome {
            record: point,
            interrupted: interrupted || (agent_interrupted && !stopped_from_outside),
        }
    }

    /// Why the agent's output ended before its point: its last words on stderr, or the
    /// dropped connection.
    async fn why_dropped(&mut self) -> String {
        if let Some(drain) = self.stderr_drain.take() {
            let _ = tokio::time::timeout(STDERR_GRACE, drain).await;
        }
        let stderr = self
            .stderr_tail
            .lock()
            .map(|t| t.trim().to_string())
            .unwrap_or_default();
        if stderr.is_empty() {
            "the SSH connection to the host's agent dropped during this point".to_string()
        } else {
            format!("the host's agent stopped during this point; its last words:\n{stderr}")
        }
    }

    /// Stops a frozen agent's process group on the host, once sure the group is still the
    /// agent's; says what happened.
    async fn stop_frozen(&mut self) -> String {
        self.stdin = None;
        let ssh = match &mut self.link {
            AgentLink::Ssh { ssh, .. } => ssh.clone(),
            AgentLink::Step(child) => {
                // srun passes SIGTERM on to the step; a step that ignores it goes with srun.
                if let Some(pid) = child.id() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGTERM,
                    );
                }
                if tokio::time::timeout(Duration::from_secs(2), child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                    return "its Slurm step was killed (srun killed)".into();
                }
                return "its Slurm step was stopped with SIGTERM".into();
            }
        };
        let Some((pid, pgid)) = self.hello.filter(|(p, g)| *p > 1 && *g > 1) else {
            return "it never said which process it is, so it could not be stopped".into();
        };
        match ssh.pid_in_group(pid, pgid).await {
            Ok(true) => {}
            Ok(false) => return format!("its process {pid} (group {pgid}) is gone from the host"),
            Err(e) => return format!("could not check its process {pid} on the host: {e}"),
        }
        match ssh.stop_group(pgid, Duration::from_secs(2)).await {
            Ok(o) => format!("its process group {pgid} on the host {o}"),
            Err(e) => format!("stopping its process group {pgid} failed: {e}"),
        }
    }

    /// Closes the agent's input and waits briefly for it to exit.
    pub(crate) async fn close(mut self) {
        self.stdin = None;
        match self.link {
            AgentLink::Ssh { child, .. } => {
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            }
            AgentLink::Step(mut child) => {
                if tokio::time::timeout(Duration::from_secs(5), child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
            }
        }
    }
}

fn point_of(req: &AgentRequest) -> Point {
    Point {
        id: req.id.clone(),
        values: req.values.clone(),
        experiment: req.experiment.clone(),
    }
}

/// One point's reading of the agent's lines: where what arrives goes, and what came so far.
struct PointReading<'a> {
    req: &'a AgentRequest,
    run_dir: &'a RunDir,
    progress: &'a Progress,
    interrupt: &'a crate::run::interrupt::Interrupt,
    /// Request records kept in requests.jsonl.
    received: usize,
    /// Lines that were not servebench's: how many, and the first (cut).
    garbled: Option<(usize, String)>,
    /// The runner interrupted the point.
    interrupted: bool,
}

impl PointReading<'_> {
    /// Appends a request record the agent sent to the run directory.
    fn record(&mut self, r: &servebench_model::results::records::RequestRecord) {
        self.progress.request_done_elsewhere();
        match self.run_dir.append_request(r) {
            Ok(()) => self.received += 1,
            // A full disk: the run stops (the agent is told through the interrupt, and
            // reports its partial point).
            Err(e) => self.interrupt.write_failed(
                &self
                    .run_dir
                    .file(servebench_model::results::rundir::REQUESTS_FILE),
                &e,
            ),
        }
    }
}

/// A point whose agent stream broke: what arrived is on disk; the point is incomplete.
fn lost(req: &AgentRequest, received: usize, why: String) -> PointOutcome {
    let message = format!(
        "{why}; {} arrived and {} kept in requests.jsonl",
        servebench_model::text::count_s(received, "request record"),
        if received == 1 { "is" } else { "are" }
    );
    PointOutcome {
        record: crate::run::records::failed_point(
            &point_of(req),
            &req.group,
            FlagKind::AgentLost,
            &message,
        ),
        interrupted: false,
    }
}
