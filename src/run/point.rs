//! Measuring one point: cache preparation, prompts, requests with bounded concurrency, and the
//! point's aggregate with its validity flags.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::catalog::FlagKind;
use crate::client::{Client, FlushOutcome, GenerationRequest};
use crate::prompt::{Calibrated, Calibrator, PromptSource, TextGenerator, nonce};
use crate::results::records::{Flag, PointRecord, RequestRecord, RequestRole};
use crate::results::rundir::RunDir;
use crate::spec::Point;
use crate::spec::types::{ArgValue, CachePolicy, Experiment, Measure};

use super::Interrupt;
use super::progress::Progress;

/// How long to keep retrying `/flush_cache` while the server says requests are pending.
const FLUSH_RETRY_FOR: Duration = Duration::from_secs(60);

/// Where each request record goes as it completes: `requests.jsonl` in the run directory, or
/// the remote agent's stdout.
pub type RecordSink = Arc<dyn Fn(&RequestRecord) -> std::io::Result<()> + Send + Sync>;

/// The sink that appends to a run directory's `requests.jsonl`.
pub fn run_dir_sink(dir: Arc<RunDir>) -> RecordSink {
    Arc::new(move |r: &RequestRecord| dir.append_request(r))
}

/// Shared state for measuring points within a run.
pub struct PointRunner {
    pub sink: RecordSink,
    pub progress: Progress,
    pub interrupt: Interrupt,
    pub spec_dir: PathBuf,
    /// Calibrated text lengths, by (model, generator, target tokens): calibration is paid once.
    calibrations: HashMap<String, Calibrated>,
}

/// A measured point and whether the run was interrupted during it.
pub struct PointOutcome {
    pub record: PointRecord,
    pub interrupted: bool,
}

impl PointOutcome {
    /// A point that could not send its measured requests: flagged and marked incomplete.
    fn abandoned(
        mut record: PointRecord,
        kind: FlagKind,
        message: String,
        interrupted: bool,
    ) -> Self {
        record.flags.push(Flag::new(kind, message));
        record.incomplete = true;
        record.status = Some(crate::results::records::PointStatus::Failed);
        PointOutcome {
            record,
            interrupted,
        }
    }
}

impl PointRunner {
    pub fn new(
        sink: RecordSink,
        progress: Progress,
        interrupt: Interrupt,
        spec_dir: PathBuf,
    ) -> Self {
        PointRunner {
            sink,
            progress,
            interrupt,
            spec_dir,
            calibrations: HashMap::new(),
        }
    }

    /// Measures `point` against the server at `client` (all rounds).
    pub async fn measure(&mut self, client: &Client, point: &Point, group: &str) -> PointOutcome {
        self.measure_with(client, point, group, None).await
    }

    /// Like [`measure`](Self::measure), with the prompts given instead of read from the spec's
    /// prompt file (the remote agent has no access to the user's files).
    pub async fn measure_with(
        &mut self,
        client: &Client,
        point: &Point,
        group: &str,
        prompts: Option<Vec<String>>,
    ) -> PointOutcome {
        let started_at = crate::client::unix_now();
        let mut outcome = self.measure_inner(client, point, group, prompts).await;
        outcome.record.wall = Some(crate::results::records::Wall {
            started_at,
            ended_at: crate::client::unix_now(),
        });
        outcome
    }

    async fn measure_inner(
        &mut self,
        client: &Client,
        point: &Point,
        group: &str,
        prompts: Option<Vec<String>>,
    ) -> PointOutcome {
        let exp = &point.experiment;
        let mut record = PointRecord::empty(point, group);
        self.progress.point_started(&point.label());
        let mut flags: Vec<Flag> = Vec::new();
        let prompts = match self.prompts(client, exp, prompts, &mut flags).await {
            Ok(p) => p,
            Err((kind, message)) => {
                let interrupted = self.interrupt.is_set();
                return PointOutcome::abandoned(record, kind, message, interrupted);
            }
        };
        record.requested_prompt_tokens = prompts.source.target_tokens();

        let mut measured: Vec<RequestRecord> = Vec::new();
        let mut interrupted = false;
        for round in 0..exp.repeat {
            if self.interrupt.is_set() {
                interrupted = true;
                break;
            }
            let (records, stopped) = self
                .measure_round(client, point, round, &prompts, &mut flags)
                .await;
            measured.extend(records);
            if stopped {
                interrupted = true;
                break;
            }
        }

        let summary = crate::measure::summary::summarize(exp, &measured, flags, interrupted);
        record.ok = summary.ok;
        record.errors = summary.errors;
        record.error_kinds = summary.error_kinds;
        record.metrics = summary.metrics;
        record.flags = summary.flags;
        record.incomplete = summary.incomplete;
        record.status = Some(summary.status);
        self.progress
            .point_finished(&point.id, &super::progress::point_line(point, &record));
        PointOutcome {
            record,
            interrupted,
        }
    }

    /// The point's prompts: read from its file (or given), or generated and calibrated to the
    /// server's token count. Fails with the flag that abandons the point.
    async fn prompts(
        &mut self,
        client: &Client,
        exp: &Experiment,
        given: Option<Vec<String>>,
        flags: &mut Vec<Flag>,
    ) -> Result<Prompts, (FlagKind, String)> {
        let source = match given {
            Some(list) => PromptSource::Fixed(list),
            None => PromptSource::load(&exp.workload.prompt, &self.spec_dir)
                .map_err(|e| (FlagKind::PromptError, e.to_string()))?,
        };
        let model = request_model(exp);
        let body = match &source {
            PromptSource::Generated {
                generator,
                target_tokens,
                calibrate,
            } => {
                let (text, flag) = self
                    .body_text(client, exp, generator, *target_tokens, *calibrate, &model)
                    .await
                    .map_err(|e| (FlagKind::CalibrationFailed, e))?;
                flags.extend(flag);
                Some(text)
            }
            PromptSource::Fixed(_) => None,
        };
        Ok(Prompts {
            source,
            body,
            model,
        })
    }

    /// One round: prepares the cache as the policy says (a flush, or a priming request), then
    /// sends the round's measured requests. Returns their records and whether an interrupt
    /// stopped it.
    async fn measure_round(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
        prompts: &Prompts,
        flags: &mut Vec<Flag>,
    ) -> (Vec<RequestRecord>, bool) {
        let exp = &point.experiment;
        let policy = exp.cache.policy;
        if policy == CachePolicy::Cold
            && let Err(e) = flush(client, &self.interrupt).await
        {
            flags.push(Flag::new(FlagKind::FlushFailed, e));
        }
        // Warm: one nonce per point and round, so points do not share prefixes; primed once.
        let warm_prefix = nonce();
        if policy == CachePolicy::Warm {
            let prompt = format!("{warm_prefix}{}", prompts.text(0));
            let req = generation_request(exp, prompt, &prompts.model);
            let m = tokio::select! {
                m = client.stream(&req, exp.request_timeout) => m,
                _ = self.interrupt.wait() => return (Vec::new(), true),
            };
            let rec = m.into_record(
                &point.id,
                round,
                0,
                RequestRole::Prime,
                exp.workload.api,
                exp.workload.output_tokens,
                prompts.source.target_tokens(),
            );
            self.append(&rec, flags);
        }
        let texts: Vec<String> = (0..exp.requests)
            .map(|i| match policy {
                CachePolicy::Cold if exp.cache.nonce => format!("{}{}", nonce(), prompts.text(i)),
                CachePolicy::Cold => prompts.text(i),
                CachePolicy::Warm => format!("{warm_prefix}{}", prompts.text(i)),
                CachePolicy::AsIs => prompts.text(i),
            })
            .collect();
        let requested = prompts.source.target_tokens();
        match exp.method.resolve() {
            Measure::Streaming => {
                self.send_all(client, point, round, exp, texts, &prompts.model, requested)
                    .await
            }
            Measure::TwoPoint { a, b } => {
                self.send_pairs(
                    client,
                    point,
                    round,
                    (a, b),
                    texts,
                    &prompts.model,
                    requested,
                    flags,
                )
                .await
            }
        }
    }

    fn append(&self, rec: &RequestRecord, flags: &mut Vec<Flag>) {
        if let Err(e) = (self.sink)(rec) {
            flags.push(Flag {
                kind: FlagKind::WriteFailed,
                message: format!("could not write requests.jsonl: {e}"),
            });
        }
    }

    /// Sends the prompts with at most `concurrency` in flight; records each as it completes.
    /// Returns the records and whether an interrupt stopped it.
    #[allow(clippy::too_many_arguments)]
    async fn send_all(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
        exp: &Experiment,
        prompts: Vec<String>,
        model: &Option<String>,
        requested: Option<u64>,
    ) -> (Vec<RequestRecord>, bool) {
        let concurrency = exp.concurrency.max(1) as usize;
        // The connections the round needs are opened before its first request is released, so
        // no measured request shares the client's time with the others' handshakes.
        prepare(client, concurrency.min(prompts.len())).await;
        let sem = Arc::new(Semaphore::new(concurrency));
        let mut tasks: JoinSet<RequestRecord> = JoinSet::new();
        let mut records = Vec::new();
        let mut stopped = false;
        for (i, prompt) in prompts.into_iter().enumerate() {
            let permit = tokio::select! {
                p = sem.clone().acquire_owned() => p,
                _ = self.interrupt.wait() => { stopped = true; break; }
            };
            let Ok(permit) = permit else { break };
            let req = generation_request(exp, prompt, model);
            let (client, sink, progress) =
                (client.clone(), self.sink.clone(), self.progress.clone());
            let (pid, api, max_tokens, timeout) = (
                point.id.clone(),
                exp.workload.api,
                exp.workload.output_tokens,
                exp.request_timeout,
            );
            tasks.spawn(async move {
                progress.request_started();
                let m = client.stream(&req, timeout).await;
                drop(permit);
                let rec = m.into_record(
                    &pid,
                    round,
                    i as u32,
                    RequestRole::Measure,
                    api,
                    max_tokens,
                    requested,
                );
                if let Err(e) = sink(&rec) {
                    progress.line(&format!("warning: could not write requests.jsonl: {e}"));
                }
                progress.request_finished();
                rec
            });
        }
        loop {
            tokio::select! {
                next = tasks.join_next() => match next {
                    Some(Ok(rec)) => records.push(rec),
                    Some(Err(_)) => {}
                    None => break,
                },
                _ = self.interrupt.wait(), if !stopped => {
                    // Requests still in flight are abandoned: they never finished, so they are
                    // not measurements. The server aborts them when the connection drops.
                    stopped = true;
                    tasks.abort_all();
                }
            }
        }
        records.sort_by_key(|r| r.index);
        (records, stopped)
    }

    /// Two-point method: per prompt, request a (`max_tokens` a), then, under the cold policy,
    /// a cache flush, then request b with the same prompt. One pair at a time: a flush is
    /// refused while requests run. Returns the records (both of each pair) and whether an
    /// interrupt stopped it.
    #[allow(clippy::too_many_arguments)]
    async fn send_pairs(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
        (a, b): (u32, u32),
        prompts: Vec<String>,
        model: &Option<String>,
        requested: Option<u64>,
        flags: &mut Vec<Flag>,
    ) -> (Vec<RequestRecord>, bool) {
        let exp = &point.experiment;
        let mut records = Vec::new();
        prepare(client, 1).await;
        for (i, prompt) in prompts.into_iter().enumerate() {
            for (role, max_tokens) in [(RequestRole::TwoPointA, a), (RequestRole::TwoPointB, b)] {
                if role == RequestRole::TwoPointB
                    && exp.cache.policy == CachePolicy::Cold
                    && let Err(e) = flush(client, &self.interrupt).await
                {
                    flags.push(Flag {
                        kind: FlagKind::FlushFailed,
                        message: e,
                    });
                }
                let mut req = generation_request(exp, prompt.clone(), model);
                req.max_tokens = max_tokens;
                self.progress.request_started();
                let m = tokio::select! {
                    m = client.stream(&req, exp.request_timeout) => m,
                    _ = self.interrupt.wait() => return (records, true),
                };
                let rec = m.into_record(
                    &point.id,
                    round,
                    i as u32,
                    role,
                    exp.workload.api,
                    max_tokens,
                    requested,
                );
                self.append(&rec, flags);
                self.progress.request_finished();
                let failed = rec.error.is_some();
                records.push(rec);
                if failed {
                    // Without its first request a pair has no t_a; move on to the next prompt.
                    break;
                }
            }
        }
        (records, false)
    }

    async fn body_text(
        &mut self,
        client: &Client,
        exp: &Experiment,
        generator: &TextGenerator,
        target: u64,
        calibrate: bool,
        model: &Option<String>,
    ) -> Result<(String, Option<Flag>), String> {
        let calibrator = Calibrator::default();
        if !calibrate {
            let chars = (target as f64 * calibrator.initial_chars_per_token) as usize;
            return Ok((generator.text(chars), None));
        }
        let key = format!("{model:?}|{:?}|{generator:?}|{target}", exp.workload.api);
        let cal = match self.calibrations.get(&key) {
            Some(c) => c.clone(),
            None => {
                let api = exp.workload.api;
                let calibration =
                    calibrator.calibrate(generator, target, nonce, |prompt: String| {
                        let client = client.clone();
                        let model = model.clone();
                        async move {
                            client
                                .count_prompt_tokens(api, &prompt, model.as_deref())
                                .await
                                .map(|(n, _)| n)
                        }
                    });
                // A long prompt's calibration can take a minute on a real server: Ctrl-C must
                // not wait for it.
                let c = tokio::select! {
                    c = calibration => c,
                    _ = self.interrupt.wait() => return Err("interrupted during prompt calibration".into()),
                }
                .map_err(|e| format!("could not calibrate the prompt to {target} tokens: {e}"))?;
                self.calibrations.insert(key, c.clone());
                c
            }
        };
        let flag = (!cal.within_tolerance).then(|| Flag {
            kind: FlagKind::Calibration,
            message: format!(
                "prompt calibration reached {} tokens for a target of {target} ({:+.1}%) after {} attempts",
                cal.actual_tokens,
                (cal.actual_tokens as f64 / target as f64 - 1.0) * 100.0,
                cal.attempts
            ),
        });
        Ok((generator.text(cal.chars), flag))
    }
}

/// A point's prompt texts and the model name its requests carry.
struct Prompts {
    source: PromptSource,
    /// The calibrated text of a generated prompt (None for file prompts).
    body: Option<String>,
    model: Option<String>,
}

impl Prompts {
    /// The text of request `i` (before any nonce): file prompts in turn, or the one body.
    fn text(&self, i: u32) -> String {
        match (&self.source, &self.body) {
            (PromptSource::Fixed(list), _) => list[i as usize % list.len()].clone(),
            (_, Some(b)) => b.clone(),
            _ => String::new(),
        }
    }
}

/// The `model` field for OpenAI requests: the served model name if set, else the model.
fn request_model(exp: &Experiment) -> Option<String> {
    match exp.server.args.get("served-model-name") {
        Some(ArgValue::Str(s)) => Some(s.clone()),
        _ => exp.server.model.clone(),
    }
}

fn generation_request(
    exp: &Experiment,
    prompt: String,
    model: &Option<String>,
) -> GenerationRequest {
    GenerationRequest {
        api: exp.workload.api,
        prompt,
        max_tokens: exp.workload.output_tokens,
        ignore_eos: exp.workload.ignore_eos,
        temperature: exp.workload.temperature,
        model: model.clone(),
    }
}

/// Opens `n` connections before requests are released. A server that cannot be reached is
/// left for the requests to record (each one says why it failed).
async fn prepare(client: &Client, n: usize) {
    if let Err(e) = client.prepare(n).await {
        tracing::debug!("could not open connections ahead: {e}");
    }
}

/// Flushes the prefix cache, retrying while the server reports pending requests (HTTP 400).
async fn flush(client: &Client, interrupt: &Interrupt) -> Result<(), String> {
    let start = std::time::Instant::now();
    loop {
        match client.flush_cache().await {
            Ok(FlushOutcome::Flushed) => return Ok(()),
            Ok(FlushOutcome::Busy(text)) => {
                if start.elapsed() > FLUSH_RETRY_FOR || interrupt.is_set() {
                    return Err(format!(
                        "/flush_cache kept answering 400 for {:?} ({}); the point ran without a flush",
                        FLUSH_RETRY_FOR,
                        crate::text::truncate(&text, 100)
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                return Err(format!(
                    "/flush_cache failed: {e}; the point ran without a flush"
                ));
            }
        }
    }
}
