//! The engine's own profiler around a point's measured window (`profiler:`): SGLang's
//! `/start_profile` with a `ProfileReq` body (output dir, steps, activities, profile id) and
//! `/stop_profile`, which writes the traces before it answers; vLLM's bodiless pair, present
//! only on a server launched with `--profiler-config` (the engine adapter adds it). The start
//! is sent beside the first measured request, never in its way; the stop after the last
//! measured request ended. Where the traces went is the run's business (`run::traces`).

use std::time::Duration;

use serde_json::Value;

use crate::client::Client;
use crate::engine::ProfilerApi;
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, ProfilerCapture};
use servebench_model::spec::types::Experiment;

use crate::run::interrupt::Interrupt;

use super::WindowState;

/// How long `/start_profile` may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long what is left of a capture's end may take once the run is interrupted. The stop is
/// still sent, so the server is not left profiling (filling its disk, slowing whoever uses it
/// next), but someone who pressed Ctrl-C is not held `profile.stop_timeout` (10 min by
/// default) for the traces of a window the interrupt cut short.
const INTERRUPTED_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Most bytes of a refusal kept in the record.
const MESSAGE_BYTES: usize = 300;

/// One capture in progress.
pub(crate) struct Capture {
    client: Client,
    api: ProfilerApi,
    body: Option<Value>,
    stop_timeout: Duration,
    started: Option<tokio::task::JoinHandle<Result<f64, CallError>>>,
    record: ProfilerCapture,
    /// The run's stop request: once it is set, the capture's end is held to
    /// [`INTERRUPTED_STOP_TIMEOUT`].
    interrupt: Interrupt,
}

/// Why a profiler endpoint did not do what was asked.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error(
        "404, the server has no {path} (vLLM serves it only when launched with --profiler-config): {text}"
    )]
    NoEndpoint { path: String, text: String },
    /// Another status than 2xx, with the server's words.
    #[error("{status}: {text}")]
    Refused { status: u16, text: String },
    #[error(transparent)]
    Client(#[from] crate::client::ClientError),
}

impl Capture {
    /// The capture `profiler:` asks of `round` of point `id`: None when it asks none; a record
    /// with its error when the server cannot be profiled. `dir`: where the server is to
    /// write, on its host (None: its own default).
    pub(crate) fn plan(
        client: &Client,
        exp: &Experiment,
        id: &str,
        round: u32,
        dir: Option<&str>,
        interrupt: &Interrupt,
    ) -> Option<Result<Capture, ProfilerCapture>> {
        let spec = exp.profiler.as_ref()?;
        // The first round only: a trace per round would multiply the traces, not the insight.
        if round != 0 || !spec.covers(id) {
            return None;
        }
        let mut record = ProfilerCapture {
            round,
            dir: dir.map(str::to_string),
            ..ProfilerCapture::default()
        };
        let api = match crate::engine::adapter(exp.server.engine).profiler {
            Ok(api) => api,
            Err(why) => {
                record.engine = format!("{}", exp.server.engine);
                record.error = Some(why.to_string());
                return Some(Err(record));
            }
        };
        record.engine = api.engine().into();
        let profile_id = format!("{id}-r{round}-{}", std::process::id());
        let body = api.start_body(spec, &profile_id, dir);
        if api == ProfilerApi::Sglang {
            record.profile_id = Some(profile_id);
            record.steps = spec.steps;
        }
        Some(Ok(Capture {
            client: client.clone(),
            api,
            body,
            stop_timeout: spec.stop_timeout,
            started: None,
            record,
            interrupt: interrupt.clone(),
        }))
    }

    /// Sends `/start_profile` on a task of its own (the request it goes beside is not held
    /// up). A second call does nothing.
    pub(crate) fn start(&mut self) {
        if self.started.is_some() {
            return;
        }
        let (client, body) = (self.client.clone(), self.body.clone());
        self.started = Some(tokio::spawn(async move {
            answer(&client, "/start_profile", body, START_TIMEOUT).await?;
            Ok(crate::client::unix_now())
        }));
    }

    /// Ends the capture: waits for the start's answer, then `/stop_profile` (which answers
    /// once the traces are written). SGLang stops itself after `num_steps`: its refusal of
    /// the stop then means the capture ended, not that it failed. Once the run is
    /// interrupted, both waits together get [`INTERRUPTED_STOP_TIMEOUT`] from then; a capture
    /// not ended by that time is recorded as cut short by the interrupt.
    pub(crate) async fn stop(mut self) -> ProfilerCapture {
        let Some(mut started) = self.started.take() else {
            self.record.error =
                Some("the measured window never opened: nothing was profiled".into());
            return self.record;
        };
        let interrupt = self.interrupt.clone();
        let cut = async move {
            interrupt.wait().await;
            tokio::time::sleep(INTERRUPTED_STOP_TIMEOUT).await;
        };
        tokio::pin!(cut);
        let start = tokio::select! {
            r = &mut started => r,
            () = &mut cut => {
                started.abort();
                self.record.error = Some(self.cut_short("/start_profile"));
                return self.record;
            }
        };
        match start {
            Ok(Ok(at)) => self.record.started_at = Some(at),
            Ok(Err(why)) => {
                self.record.error = Some(format!("/start_profile failed: {why}"));
                return self.record;
            }
            Err(e) => {
                self.record.error = Some(format!("/start_profile was not sent: {e}"));
                return self.record;
            }
        }
        let body = self.api.stop_body();
        let stop = tokio::select! {
            r = answer(&self.client, "/stop_profile", body, self.stop_timeout) => r,
            () = &mut cut => {
                self.record.error = Some(self.cut_short("/stop_profile"));
                return self.record;
            }
        };
        match stop {
            Ok(()) => self.record.stopped_at = Some(crate::client::unix_now()),
            // SGLang raises "Profiling is not in progress" for a stop after `num_steps`
            // ended the capture, which FastAPI answers with a bare 500: whether the capture
            // worked is what its directory holds, which the run looks at next.
            Err(CallError::Refused { status: 500, .. }) if self.record.steps.is_some() => {
                self.record.stopped_at = Some(crate::client::unix_now());
            }
            Err(why) => self.record.error = Some(format!("/stop_profile failed: {why}")),
        }
        self.record
    }

    /// Why a capture the interrupt cut short has no traces: `path` had not answered.
    fn cut_short(&self, path: &str) -> String {
        let cause = self
            .interrupt
            .cause()
            .map_or_else(|| "interrupted".to_string(), |c| c.to_string());
        format!(
            "{cause}: {path} did not answer within {} s of it, so the capture was given up (its traces, if any, are not looked for)",
            INTERRUPTED_STOP_TIMEOUT.as_secs()
        )
    }
}

/// POSTs `path`; Ok on a 2xx, else the status and the server's words.
async fn answer(
    client: &Client,
    path: &str,
    body: Option<Value>,
    timeout: Duration,
) -> Result<(), CallError> {
    let (status, bytes) = client.call("POST", path, body, timeout).await?;
    if (200..300).contains(&status) {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&bytes);
    let text = servebench_model::text::truncate(text.trim(), MESSAGE_BYTES);
    Err(if status == 404 {
        CallError::NoEndpoint {
            path: path.to_string(),
            text,
        }
    } else {
        CallError::Refused { status, text }
    })
}

/// The flags a finished capture puts on its point: `profiled` when the profiler ran in the
/// measured window, `profile-failed` with the reason when it did not or its traces are lost.
pub(crate) fn flags(capture: &ProfilerCapture) -> Vec<Flag> {
    let mut out = Vec::new();
    if capture.started_at.is_some() {
        out.push(Flag::new(
            FlagKind::Profiled,
            format!(
                "{}'s profiler ran during the measured window{}: these numbers include its overhead",
                capture.engine,
                capture
                    .steps
                    .map(|n| format!(" (its first {n} forward steps)"))
                    .unwrap_or_default()
            ),
        ));
    }
    if let Some(why) = &capture.error {
        out.push(Flag::new(FlagKind::ProfileFailed, why.clone()));
    } else if capture.started_at.is_some() && capture.dir.is_none() {
        out.push(Flag::new(
            FlagKind::ProfileFailed,
            "the traces are in the server's own default directory on its host (SGLang: SGLANG_TORCH_PROFILER_DIR, else /tmp), not looked for: servebench did not start this server; name `profile.dir` to have them brought back",
        ));
    } else if capture.started_at.is_some() && capture.files.is_empty() {
        out.push(Flag::new(
            FlagKind::ProfileFailed,
            format!(
                "the profiler stopped and no trace file appeared in {}",
                capture
                    .dir
                    .as_deref()
                    .unwrap_or("the server's default directory")
            ),
        ));
    }
    out
}

/// The profiler probe: the capture `profiler:` asks of a point's first round, started as its
/// measured window opens and stopped as it closes (on a task of its own, so neither holds up
/// a request), kept in the point's record.
pub(crate) struct Profiler {
    exp: Experiment,
    /// Where the server writes its traces, on its host; None: its own default.
    dir: Option<String>,
    interrupt: Interrupt,
    running: Option<tokio::task::JoinHandle<ProfilerCapture>>,
    captured: Option<ProfilerCapture>,
}

impl Profiler {
    pub(crate) fn new(exp: Experiment, dir: Option<String>, interrupt: Interrupt) -> Profiler {
        Profiler {
            exp,
            dir,
            interrupt,
            running: None,
            captured: None,
        }
    }
}

impl super::Probe for Profiler {
    fn open<'a>(
        &'a mut self,
        round: super::RoundStart<'a>,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        let planned = Capture::plan(
            round.client,
            &self.exp,
            round.point,
            round.round,
            self.dir.as_deref(),
            &self.interrupt,
        );
        match planned {
            None => {}
            // An engine without a profiler: recorded at once.
            Some(Err(record)) => self.captured = Some(record),
            Some(Ok(mut capture)) => {
                let mut window = round.window.watch();
                self.running = Some(tokio::spawn(async move {
                    let opened = window
                        .wait_for(|s| *s != WindowState::Pending)
                        .await
                        .is_ok_and(|s| *s == WindowState::Open);
                    if opened {
                        capture.start();
                        let _ = window.wait_for(|s| *s == WindowState::Closed).await;
                    }
                    capture.stop().await
                }));
            }
        }
        Box::pin(async {})
    }

    fn close<'a>(
        &'a mut self,
        _completed: usize,
        _unmeasured: &'a mut servebench_report::measure::server_view::Finished,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(task) = self.running.take() {
                self.captured = Some(task.await.unwrap_or_else(|e| ProfilerCapture {
                    engine: format!("{}", self.exp.server.engine),
                    error: Some(format!("the capture's task died: {e}")),
                    ..ProfilerCapture::default()
                }));
            }
        })
    }

    fn fill(
        self: Box<Self>,
        _end: &super::PointEnd<'_>,
        record: &mut servebench_model::results::records::PointRecord,
    ) {
        record.profiler = self.captured;
    }
}
