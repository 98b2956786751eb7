//! How long a plan will take, before running it: from an earlier run's measured point times
//! (`plan --from RUN_DIR`), or from a simulator profile's timing model (the spec's own
//! profile for `engine: sim`, `plan --profile NAME` for a real engine).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use super::Plan;
use crate::prompt::PromptSource;
use servebench_model::results::records::RequestRecord;
use servebench_model::results::rundir::{RunDir, RunDirError};
use servebench_model::spec::Point;
use servebench_model::spec::types::{CachePolicy, Engine, Experiment, Measure, PromptSpec, Server};
use sim::{SimArgError, SimConfig};

/// Full-length requests one prompt calibration is assumed to take when tokens are counted by
/// generating (chat prompts: the chat template counts too). Each is a prefill and one decode
/// step. The two short probes that learn the tokenizer's ratio cost next to nothing, and
/// every engine servebench knows counts other prompts with its tokenize endpoint, no prefill.
const CALIBRATION_ATTEMPTS: f64 = 2.0;

/// Why a source gives no estimate. `plan` prints it after "estimate: none: " (or exits 2
/// when the source was named), so each message says what to give instead.
#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    /// The earlier run could not be read.
    #[error(transparent)]
    Run(#[from] RunDirError),
    /// A group's server has no timing model: a real engine or an external server, and no
    /// `--profile` was given.
    #[error(
        "{group}: the server is {} and has no timing model; give `--profile NAME` (a sim profile shaped like its hardware) or `--from RUN_DIR` (an earlier run)",
        if *.external { "external (url:)" } else { "a real engine" }
    )]
    NoModel {
        /// The server group, `g1`, `g2`, ...
        group: String,
        /// True for a server given by `url:` (not launched by servebench).
        external: bool,
    },
    /// `server.args` cannot be turned into flags (an invalid flag name).
    #[error(transparent)]
    Flags(#[from] crate::engine::LaunchError),
    /// The flags (with the profile) do not make a simulator configuration.
    #[error("the timing model: {0}")]
    Model(#[source] SimArgError),
    /// A simulated vLLM or llama.cpp server's flags do not make a simulator configuration
    /// (the engine's own parser's message).
    #[error("the timing model: {0}")]
    EngineModel(#[source] sim::EngineArgsError),
    /// The engine has no simulated surface to read its flags with.
    #[error("the timing model: no simulator for {engine}")]
    NoSimulator { engine: Engine },
}

/// The estimate for one point; None when the source has nothing for it.
#[derive(Debug, Clone, PartialEq)]
pub struct PointEstimate {
    pub id: String,
    pub seconds: Option<f64>,
}

/// One server group: its launch (to ready) and its points.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupEstimate {
    pub id: String,
    pub launch_s: Option<f64>,
    pub points: Vec<PointEstimate>,
}

/// A whole plan's estimate and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Said next to the total, e.g. "the timing model of sim profile `fast`".
    pub source: String,
    pub groups: Vec<GroupEstimate>,
}

impl Estimate {
    /// Sum of every known launch and point time.
    pub fn total_s(&self) -> f64 {
        self.groups
            .iter()
            .map(|g| {
                g.launch_s.unwrap_or(0.0) + g.points.iter().filter_map(|p| p.seconds).sum::<f64>()
            })
            .sum()
    }

    /// Points the source had nothing for (left out of the total).
    pub fn unknown_points(&self) -> Vec<&str> {
        self.groups
            .iter()
            .flat_map(|g| &g.points)
            .filter(|p| p.seconds.is_none())
            .map(|p| p.id.as_str())
            .collect()
    }

    /// The seconds estimated for point `id`.
    pub fn point(&self, id: &str) -> Option<f64> {
        self.groups
            .iter()
            .flat_map(|g| &g.points)
            .find(|p| p.id == id)
            .and_then(|p| p.seconds)
    }
}

/// From an earlier run of (a version of) this experiment: each planned point takes what the
/// run's point with the same sweep values took (its first to last request, calibration and
/// flushes included when the run recorded them), each launch the mean time-to-ready there.
pub fn from_run(plan: &Plan, run_dir: &Path) -> Result<Estimate, EstimateError> {
    let dir = RunDir::open(run_dir)?;
    let meta = dir.read_meta()?;
    let points = dir.read_points()?;
    let spans = request_spans(&dir, &points)?;
    let ready: Vec<f64> = meta
        .servers
        .iter()
        .filter_map(|s| s.ready_after_s)
        .collect();
    let launch = (!ready.is_empty()).then(|| ready.iter().sum::<f64>() / ready.len() as f64);
    let groups = plan
        .groups
        .iter()
        .map(|g| GroupEstimate {
            id: g.id.clone(),
            launch_s: if g.server.url.is_some() {
                Some(0.0)
            } else {
                launch
            },
            points: g
                .points
                .iter()
                .map(|p| {
                    // A point that measured nothing (it failed before its first request
                    // finished) took no time worth repeating: it gives no estimate.
                    let took = |r: &servebench_model::results::records::PointRecord| {
                        if r.ok == 0 {
                            return None;
                        }
                        r.wall
                            .as_ref()
                            .map(|w| w.ended_at - w.started_at)
                            .or_else(|| spans.get(&r.id).map(|(first, last)| last - first))
                    };
                    let seconds = match &p.experiment.search {
                        // A search: its bound of probes, each as long as its longest recorded
                        // probe (a search with the same other values).
                        Some(s) => points
                            .iter()
                            .filter(|r| {
                                !r.incomplete
                                    && r.search.is_some()
                                    && same_values_but(&r.values, &p.values, &s.over.to_string())
                            })
                            .filter_map(took)
                            .reduce(f64::max)
                            .map(|t| t * search_bound(p) as f64),
                        None => points
                            .iter()
                            .filter(|r| !r.incomplete && same_values(&r.values, &p.values))
                            .find_map(took),
                    };
                    PointEstimate {
                        id: p.id.clone(),
                        seconds,
                    }
                })
                .collect(),
        })
        .collect();
    Ok(Estimate {
        source: format!("the point times measured in {}", run_dir.display()),
        groups,
    })
}

/// The best estimate there is without being told: the timing model when every group has one
/// (`engine: sim`), else the newest earlier run of this experiment under `runs_root/name/`
/// that measured something (other than `except`, the run in progress).
pub(crate) fn best(
    plan: &Plan,
    spec_dir: &Path,
    runs_root: &Path,
    name: &str,
    except: Option<&Path>,
) -> Result<Estimate, EstimateError> {
    let model_error = match from_model(plan, None, spec_dir) {
        Ok(e) => return Ok(e),
        Err(e) => e,
    };
    let mut runs: Vec<std::path::PathBuf> = std::fs::read_dir(runs_root.join(name))
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    runs.sort();
    runs.into_iter()
        .rev()
        .filter(|d| Some(d.as_path()) != except)
        .find(|d| {
            std::fs::metadata(d.join("points.jsonl")).is_ok_and(|m| m.len() > 0)
                && d.join("meta.json").is_file()
        })
        .map_or(Err(model_error), |d| from_run(plan, &d))
}

/// Sweep values equal regardless of key order.
fn same_values(
    a: &IndexMap<String, serde_json::Value>,
    b: &IndexMap<String, serde_json::Value>,
) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

/// How long an open-loop rate point's schedule lasts at least: its warm-up and measured
/// requests at its rate (or the phases' durations); 0 for other points. A search's probe
/// is never shorter than its schedule, whatever the server's speed.
fn schedule_s(e: &Experiment) -> f64 {
    let Some(load) = e.open_loop() else {
        return 0.0;
    };
    let Some(rate) = load
        .rate()
        .map(|r| r.per_second())
        .filter(|r| r.is_finite())
    else {
        return 0.0;
    };
    let phase =
        |requests: Option<u32>, duration: Option<std::time::Duration>| match (requests, duration) {
            (Some(n), Some(d)) => (n as f64 / rate).min(d.as_secs_f64()),
            (Some(n), None) => n as f64 / rate,
            (None, Some(d)) => d.as_secs_f64(),
            (None, None) => 0.0,
        };
    let warmup = e
        .warmup
        .as_ref()
        .map_or(0.0, |w| phase(w.requests, w.duration));
    let measured = e
        .stop
        .as_ref()
        .map_or(0.0, |s| phase(s.requests, s.duration));
    warmup + measured
}

/// Sweep values equal but for `skip` (the searched dimension, which a probe adds).
fn same_values_but(
    a: &IndexMap<String, serde_json::Value>,
    b: &IndexMap<String, serde_json::Value>,
    skip: &str,
) -> bool {
    let n = |m: &IndexMap<String, serde_json::Value>| m.keys().filter(|k| *k != skip).count();
    n(a) == n(b) && b.iter().all(|(k, v)| k == skip || a.get(k) == Some(v))
}

/// The most probes the search a point starts can take (1 for an ordinary point).
pub(crate) fn search_bound(p: &Point) -> usize {
    p.experiment
        .search
        .as_ref()
        .map_or(1, |s| super::search::probe_bound(&s.into()))
}

/// First send and last byte (Unix seconds) of each point's requests, for the points without
/// wall times (runs that predate them); `requests.jsonl` is read line by line, and not at
/// all when every point has its wall time.
fn request_spans(
    dir: &RunDir,
    points: &[servebench_model::results::records::PointRecord],
) -> Result<HashMap<String, (f64, f64)>, EstimateError> {
    let mut spans: HashMap<String, (f64, f64)> = HashMap::new();
    let wanted: HashSet<&str> = points
        .iter()
        .filter(|p| p.wall.is_none())
        .map(|p| p.id.as_str())
        .collect();
    if wanted.is_empty() {
        return Ok(spans);
    }
    dir.visit_requests(|r: RequestRecord| {
        if wanted.contains(r.point.as_str()) {
            add_span(&mut spans, &r);
        }
    })?;
    Ok(spans)
}

/// Widens the span of `r`'s point to its send and its last byte (its end, else its last
/// chunk, for a request cut off).
fn add_span(spans: &mut HashMap<String, (f64, f64)>, r: &RequestRecord) {
    let last = r.chunks.last().map(|c| c.t_s);
    let end = r.sent_at + r.end_s.or(last).unwrap_or(0.0);
    match spans.get_mut(&r.point) {
        Some((first, latest)) => {
            *first = first.min(r.sent_at);
            *latest = latest.max(end);
        }
        None => {
            spans.insert(r.point.clone(), (r.sent_at, end));
        }
    }
}

/// From a simulator profile's timing model: the spec's own for `engine: sim`, or `profile`
/// (a built-in name or a file) for every group, with the group's flags (chunk size, running
/// requests, speculative decoding, time scale) applied. External servers (`url:`) are not
/// modelled unless `profile` is given.
pub fn from_model(
    plan: &Plan,
    profile: Option<&str>,
    spec_dir: &Path,
) -> Result<Estimate, EstimateError> {
    let mut calibrated: HashSet<String> = HashSet::new();
    // A prompt file is read and counted once, however many points use it.
    let mut file_tokens: HashMap<PathBuf, Option<u64>> = HashMap::new();
    let mut names: Vec<String> = Vec::new();
    let mut groups = Vec::new();
    for g in &plan.groups {
        let Some(cfg) = model_config(&g.server, profile)? else {
            return Err(EstimateError::NoModel {
                group: g.id.clone(),
                external: g.server.url.is_some(),
            });
        };
        if !names.contains(&cfg.profile.name) {
            names.push(cfg.profile.name.clone());
        }
        let launch_s = if g.server.url.is_some() || cfg.skip_warmup {
            0.0
        } else {
            cfg.profile.warmup().as_secs_f64()
        };
        let points =
            g.points
                .iter()
                .map(|p| {
                    let tokens = match &p.experiment.workload.prompt {
                        PromptSpec::File { path } => *file_tokens
                            .entry(spec_dir.join(path))
                            .or_insert_with(|| prompt_tokens(p, spec_dir)),
                        _ => prompt_tokens(p, spec_dir),
                    };
                    let calibrate = calibration_key(p).is_some_and(|k| calibrated.insert(k));
                    // A search: its bound of probes, each as long as the first (the lowest load:
                    // a fixed count of requests takes longest at the lowest rate).
                    let (at, probes) = match &p.experiment.search {
                        Some(s) => (
                            super::search::probe_point(p, s.over, s.start, 1),
                            search_bound(p),
                        ),
                        None => (p.clone(), 1),
                    };
                    let seconds = match (&p.experiment.search, p.experiment.open_loop()) {
                        // Agent sessions last as their trace's think time and the server's
                        // speed at their contexts make them: not modelled, but under a
                        // preset they replay until the duration (set by the preset) ends them.
                        _ if p.experiment.agentic().is_some() => {
                            servebench_model::spec::agentx::preset_of(&p.experiment)
                                .and(p.experiment.stop.as_ref())
                                .and_then(|s| s.duration)
                                .map(|d| d.as_secs_f64() * probes as f64)
                        }
                        // So do conversations from a file, with their recorded delays.
                        _ if p.experiment.sessions().is_some_and(|s| s.file.is_some()) => None,
                        // An open-loop search: the probes the model's capacity makes it take.
                        (Some(s), Some(_)) => tokens
                            .and_then(|t| model_load_search(&cfg, p, s, t, calibrate, spec_dir)),
                        (None, Some(_)) => tokens.and_then(|t| {
                            model_load_point(&cfg, &p.experiment, t, calibrate, spec_dir)
                        }),
                        _ => tokens.map(|t| {
                            let modelled = model_point(&cfg, &at.experiment, t, calibrate);
                            let one = if probes > 1 {
                                modelled.max(schedule_s(&at.experiment))
                            } else {
                                modelled
                            };
                            one * probes as f64
                        }),
                    };
                    PointEstimate {
                        id: p.id.clone(),
                        seconds,
                    }
                })
                .collect();
        groups.push(GroupEstimate {
            id: g.id.clone(),
            launch_s: Some(launch_s),
            points,
        });
    }
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    Ok(Estimate {
        source: format!(
            "the timing model of sim profile {} (model time only: add a little per request for HTTP and the client)",
            quoted.join(", ")
        ),
        groups,
    })
}

/// The simulator configuration a group's flags give, or None when it has no model.
fn model_config(
    server: &Server,
    profile: Option<&str>,
) -> Result<Option<SimConfig>, EstimateError> {
    if server.url.is_some() && profile.is_none() {
        return Ok(None);
    }
    // A simulated engine is modelled from its own flags, as its simulator parses them.
    if server.simulate && server.engine != Engine::Sim && server.url.is_none() {
        return simulated_engine_config(server, profile).map(Some);
    }
    if profile.is_none() && server.engine != Engine::Sim {
        return Ok(None);
    }
    let mut args = server.args.clone();
    if let Some(p) = profile {
        args.shift_remove("profile");
        args.insert(
            "profile".into(),
            servebench_model::spec::types::ArgValue::Str(p.into()),
        );
    }
    let argv = crate::engine::flag_args(&args).map_err(EstimateError::Flags)?;
    SimConfig::from_args(&argv)
        .map(Some)
        .map_err(EstimateError::Model)
}

/// The configuration `servebench sim --api ENGINE` would run with for a `simulate: true`
/// server: its launch command's arguments after the program, `sim` and `--api`.
fn simulated_engine_config(
    server: &Server,
    profile: Option<&str>,
) -> Result<SimConfig, EstimateError> {
    let mut server = server.clone();
    if let Some(p) = profile {
        server.args.shift_remove("profile");
        server.args.insert(
            "profile".into(),
            servebench_model::spec::types::ArgValue::Str(p.into()),
        );
        server.engine_args.values_mut().for_each(|a| {
            a.shift_remove("profile");
        });
    }
    let command = crate::engine::launch_command(&server, "servebench", 1)?;
    let adapter = crate::engine::adapter(server.engine);
    let api = sim::Api::parse(adapter.sim_api).ok_or(EstimateError::NoSimulator {
        engine: server.engine,
    })?;
    let args: Vec<String> = match command.args.iter().position(|a| a == "--api") {
        Some(i) => command.args[i + 2..].to_vec(),
        None => command.args.iter().skip(1).cloned().collect(),
    };
    SimConfig::from_engine_args(api, &args)
        .map(|(config, _)| config)
        .map_err(EstimateError::EngineModel)
}

/// The prompt length a point sends: its target when calibrated; otherwise the sim
/// tokenizer's count of the text the runner sends (generated at the calibrator's starting
/// characters per token, as the runner does), or of its file prompts (their mean).
fn prompt_tokens(p: &Point, spec_dir: &Path) -> Option<u64> {
    match PromptSource::load(&p.experiment.workload.prompt, spec_dir).ok()? {
        PromptSource::Generated {
            target_tokens,
            calibrate: true,
            ..
        } => Some(target_tokens),
        PromptSource::Generated {
            generator,
            target_tokens,
            calibrate: false,
        } => {
            let chars = (target_tokens as f64
                * crate::prompt::Calibrator::default().initial_chars_per_token)
                as usize;
            Some(sim::tokenize(&generator.text(chars)).len().max(1) as u64)
        }
        PromptSource::Fixed(list) if !list.is_empty() => {
            let total: usize = list.iter().map(|t| sim::tokenize(t).len()).sum();
            Some((total / list.len()).max(1) as u64)
        }
        PromptSource::Fixed(_) | PromptSource::Dataset { .. } => None,
        PromptSource::SharedPrefix {
            prefix_tokens,
            suffix_tokens,
            ..
        } => Some(prefix_tokens + suffix_tokens),
        // A drawn length's mean stands for the point's requests.
        PromptSource::Drawn { .. } => match &p.experiment.workload.prompt {
            servebench_model::spec::types::PromptSpec::Random { tokens, .. } => {
                Some(tokens.nominal())
            }
            _ => None,
        },
    }
}

/// Calibration is paid once per run for each (api, prompt spec): the key, or None when the
/// point's prompt is not calibrated.
fn calibration_key(p: &Point) -> Option<String> {
    use servebench_model::spec::types::PromptSpec;
    let w = &p.experiment.workload;
    match &w.prompt {
        PromptSpec::Repeat {
            calibrate: true, ..
        }
        | PromptSpec::Random {
            calibrate: true, ..
        } => Some(format!(
            "{:?}|{:?}|{:?}",
            p.experiment.server.model, w.api, w.prompt
        )),
        _ => None,
    }
}

/// Model seconds of one point: calibration, then per round a prime (warm) and the requests in
/// waves of the batch the server runs at once.
fn model_point(cfg: &SimConfig, exp: &Experiment, tokens: u64, calibrate: bool) -> f64 {
    let m = Model::new(cfg);
    let requests = exp.requests.max(1) as u64;
    let batch = (exp.concurrency as u64)
        .min(requests)
        .min(cfg.max_running_requests.max(1) as u64)
        .max(1);
    let waves = requests.div_ceil(batch) as f64;
    let out = exp.workload.output_tokens.nominal();
    let cached = exp.cache.policy != CachePolicy::Cold;
    // Warm and as-is prompts hit the cache once it holds them (after the prime, or the first).
    let measured_prefill = if cached {
        m.prefill(tokens, tokens.saturating_sub(1))
    } else {
        m.prefill(tokens, 0)
    };
    let per_round = match exp.method.resolve() {
        // Sessions: users talk at once (as many as run at once per wave); each turn prefills
        // its new message (the history is cached) and decodes beside the other users, its
        // context grown by a message and a reply per turn; the users think between turns.
        _ if let Some(s) = exp.sessions() => {
            let turns = u64::from(s.turns.unwrap_or(1).max(1));
            let users = u64::from(s.users.max(1));
            let at_once = users.min(cfg.max_running_requests.max(1) as u64);
            let turn = |t: u64| {
                let ctx = t * (tokens + out) + tokens;
                at_once as f64 * m.prefill(ctx, ctx - tokens) + m.decode(at_once, ctx, out)
            };
            let talk: f64 = (0..turns).map(turn).sum();
            users.div_ceil(at_once) as f64 * (talk + (turns - 1) as f64 * s.think.as_secs_f64())
        }
        Measure::Streaming => {
            waves * (batch as f64 * measured_prefill + m.decode(batch, tokens, out))
        }
        // Pairs go one request at a time (a, [flush under cold], b on the same prompt), so b
        // prefills in full only when the flush emptied the cache.
        Measure::TwoPoint { a, b } => {
            let b_prefill = if cached {
                m.prefill(tokens, tokens.saturating_sub(1))
            } else {
                m.prefill(tokens, 0)
            };
            requests as f64
                * (measured_prefill
                    + m.decode(1, tokens, a as u64)
                    + b_prefill
                    + m.decode(1, tokens, b as u64))
        }
    };
    let prime = match exp.cache.policy {
        CachePolicy::Warm => m.prefill(tokens, 0) + m.decode(1, tokens, out),
        // The first as-is request is a full prefill.
        CachePolicy::AsIs => m.prefill(tokens, 0) - measured_prefill,
        CachePolicy::Cold => 0.0,
    };
    let calibration =
        if calibrate && exp.workload.api == servebench_model::spec::types::Api::OpenaiChat {
            CALIBRATION_ATTEMPTS * (m.prefill(tokens, 0) + m.decode(1, tokens, 1))
        } else {
            0.0
        };
    calibration + exp.repeat.max(1) as f64 * (prime + per_round)
}

/// Model seconds of an open-loop point: its schedule (made as the run makes it, so its
/// arrivals, phases and count are the run's) replayed through the timing model's continuous
/// batching ([`replay`]): from the first arrival to the last request's end, so a server that
/// cannot keep up is paid for its backlog. None when the schedule cannot be made.
fn model_load_point(
    cfg: &SimConfig,
    exp: &Experiment,
    tokens: u64,
    calibrate: bool,
    spec_dir: &Path,
) -> Option<f64> {
    let schedule = crate::load::Schedule::of(exp, spec_dir).ok()?;
    let m = Model::new(cfg);
    let cap = (cfg.max_running_requests.max(1) as u64)
        .min(schedule.max_in_flight.map_or(u64::MAX, u64::from))
        .max(1);
    let out = exp.workload.output_tokens.nominal().max(1);
    let served = replay(&m, schedule.iter().map(|s| s.at_s), cap, tokens, out);
    let calibration =
        if calibrate && exp.workload.api == servebench_model::spec::types::Api::OpenaiChat {
            CALIBRATION_ATTEMPTS * (m.prefill(tokens, 0) + m.decode(1, tokens, 1))
        } else {
            0.0
        };
    // The pacer's lead before the first arrival (`run::point::scheduled`).
    Some(calibration + 0.02 + served)
}

/// Seconds from the first arrival (offsets in seconds, in order) to the end of the last
/// request, on a server running at most `cap` requests at once: each step admits the
/// arrivals due (each a full prefill of `tokens`, in chunks) while there is room, then
/// decodes every running request by a token (or a speculative step's worth).
fn replay(m: &Model, arrivals: impl Iterator<Item = f64>, cap: u64, tokens: u64, out: u64) -> f64 {
    let mut arrivals = arrivals.peekable();
    let (mut t, mut waiting) = (0.0f64, 0u64);
    // Each running request's output tokens still to come.
    let mut running: Vec<f64> = Vec::new();
    let prefill = m.prefill(tokens, 0);
    let steps_per_token = 1.0 / m.tokens_per_step;
    loop {
        while arrivals.next_if(|&at| at <= t).is_some() {
            waiting += 1;
        }
        let room = cap.saturating_sub(running.len() as u64).min(waiting);
        if room > 0 {
            t += room as f64 * prefill;
            waiting -= room;
            running.extend(std::iter::repeat_n(out as f64, room as usize));
            continue;
        }
        if running.is_empty() {
            match arrivals.peek() {
                Some(&at) => t = t.max(at),
                None => return t,
            }
            continue;
        }
        let batch = running.len() as u64;
        let ctx: f64 = running
            .iter()
            .map(|left| tokens as f64 + (out as f64 - left))
            .sum();
        // The batch decodes until its shortest request ends or the next arrival is due,
        // in one sum: a step at a time would be millions of steps for a long schedule.
        let step = m.decode_step(batch, ctx as u64);
        let shortest = running.iter().copied().fold(f64::INFINITY, f64::min);
        let mut steps = (shortest * steps_per_token).ceil().max(1.0);
        if let Some(&at) = arrivals.peek()
            && at > t
            && (running.len() as u64) < cap
        {
            steps = steps.min(((at - t) / step).ceil().max(1.0));
        }
        t += steps * step;
        let done = steps * m.tokens_per_step;
        running.iter_mut().for_each(|left| *left -= done);
        running.retain(|&left| left > 1e-9);
    }
}

/// Model seconds of an open-loop capacity search: the probes it takes when a probe passes
/// exactly while its rate is within the model's capacity (the most requests a second its
/// full batch completes), each probe replayed as [`model_load_point`]; at most its bound of
/// probes, as the run.
fn model_load_search(
    cfg: &SimConfig,
    p: &Point,
    s: &servebench_model::spec::search::SearchSpec,
    tokens: u64,
    calibrate: bool,
    spec_dir: &Path,
) -> Option<f64> {
    use super::search::{CapacitySearch, Next, Probe};
    let m = Model::new(cfg);
    let out = p.experiment.workload.output_tokens.nominal().max(1);
    let batch = cfg.max_running_requests.max(1) as u64;
    let capacity =
        batch as f64 / (batch as f64 * m.prefill(tokens, 0) + m.decode(batch, tokens, out));
    let mut search = CapacitySearch::new(s.into());
    let mut total = 0.0;
    for k in 1..=search_bound(p) {
        let Next::Probe(value) = search.next() else {
            break;
        };
        let probe = super::search::probe_point(p, s.over, value, k);
        total += model_load_point(
            cfg,
            &probe.experiment,
            tokens,
            calibrate && k == 1,
            spec_dir,
        )?;
        search.record(Probe {
            value,
            passes: value <= capacity,
            throughput: value.min(capacity),
        });
    }
    Some(total)
}

/// The simulator's timing model, in seconds.
struct Model<'a> {
    cfg: &'a SimConfig,
    tokens_per_step: f64,
    step_overhead_ms: f64,
}

impl<'a> Model<'a> {
    fn new(cfg: &'a SimConfig) -> Self {
        let (tokens_per_step, step_overhead_ms) =
            cfg.speculative.as_ref().map_or((1.0, 0.0), |s| {
                (s.accept_length_mean.max(1.0), s.step_overhead_ms)
            });
        Model {
            cfg,
            tokens_per_step,
            step_overhead_ms,
        }
    }

    /// Prefill of a `tokens` prompt whose first `cached` tokens are in the cache, in chunks.
    fn prefill(&self, tokens: u64, cached: u64) -> f64 {
        let chunk = self.cfg.chunked_prefill_size.unwrap_or(u64::MAX).max(1);
        let mut start = cached.min(tokens.saturating_sub(1));
        let mut s = 0.0;
        while start < tokens {
            let n = chunk.min(tokens - start);
            s += self.cfg.profile.prefill_time(&[(start, n)]).as_secs_f64();
            start += n;
        }
        s
    }

    /// One decode step of `batch` requests holding `ctx` tokens of context in all.
    fn decode_step(&self, batch: u64, ctx: u64) -> f64 {
        self.cfg
            .profile
            .decode_time(batch, ctx, self.step_overhead_ms)
            .as_secs_f64()
    }

    /// Decoding `out` tokens for `batch` requests of `tokens`-token prompts, together.
    fn decode(&self, batch: u64, tokens: u64, out: u64) -> f64 {
        let steps = (out as f64 / self.tokens_per_step).ceil() as u64;
        // The context grows by a token per request per step: the mean step sees half of it.
        let ctx = batch * (tokens + out / 2);
        steps as f64
            * self
                .cfg
                .profile
                .decode_time(batch, ctx, self.step_overhead_ms)
                .as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::spec::types::{Method, MethodName};

    fn cfg(args: &[&str]) -> SimConfig {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        SimConfig::from_args(&argv).unwrap()
    }

    fn exp(requests: u32, concurrency: u32, out: u32) -> Experiment {
        let mut e: Experiment = serde_json::from_value(serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 1000}, "output_tokens": out},
        }))
        .unwrap();
        e.requests = requests;
        e.concurrency = concurrency;
        e
    }

    /// The fast profile's formulas, by hand: prefill 0.3 ms + 1.2 us/token + 0.002 ns/pair;
    /// decode 1.2 ms + 2 us/seq + 0.5 ns/context token.
    fn prefill_ms(start: f64, n: f64) -> f64 {
        0.3 + 1.2 * n / 1e3 + 0.002 * (n * start + n * (n - 1.0) / 2.0) / 1e6
    }
    fn step_ms(batch: f64, ctx: f64) -> f64 {
        1.2 + 2.0 * batch / 1e3 + 0.5 * ctx / 1e6
    }

    #[test]
    fn a_point_is_its_prefills_and_decode_steps_and_a_chat_calibration() {
        let c = cfg(&["--profile", "fast", "--chunked-prefill-size", "600"]);
        let e = exp(4, 2, 10);
        // Chunks of 600 then 400; two waves of 2 requests: 2 prefills + 10 steps at batch 2.
        let prefill = prefill_ms(0.0, 600.0) + prefill_ms(600.0, 400.0);
        let wave = 2.0 * prefill + 10.0 * step_ms(2.0, 2.0 * 1005.0);
        // Calibrated through the tokenize endpoint: no prefill.
        let got = model_point(&c, &e, 1000, true) * 1e3;
        assert!((got - 2.0 * wave).abs() < 1e-6, "{got} vs {}", 2.0 * wave);
        let no_cal = model_point(&c, &e, 1000, false) * 1e3;
        assert!((no_cal - 2.0 * wave).abs() < 1e-6);
        // A chat prompt is counted by generating: two prefills and a decode step each.
        let mut chat = e.clone();
        chat.workload.api = servebench_model::spec::types::Api::OpenaiChat;
        let calibration = 2.0 * (prefill + step_ms(1.0, 1000.0));
        let got = model_point(&c, &chat, 1000, true) * 1e3;
        let want = calibration + 2.0 * wave;
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn time_scale_speculation_and_the_method_count() {
        let e = exp(1, 1, 8);
        let base = model_point(&cfg(&["--profile", "fast"]), &e, 1000, false);
        let slow = model_point(
            &cfg(&["--profile", "fast", "--sim-time-scale", "3"]),
            &e,
            1000,
            false,
        );
        assert!((slow / base - 3.0).abs() < 1e-9);
        // Speculative decoding: 8 tokens at an accept length of 2.5 take 4 steps, not 8.
        let spec = cfg(&["--profile", "fast", "--speculative-algorithm", "EAGLE"]);
        let m = Model::new(&spec);
        let step = spec.profile.decode_time(1, 1004, 0.0).as_secs_f64();
        assert!((m.decode(1, 1000, 8) - 4.0 * step).abs() < 1e-9);
        // Two-point sends a then b (1 and 17 tokens by default), one request at a time even
        // at concurrency 4, each a full prefill under cold.
        let mut two = exp(2, 4, 8);
        two.method = Method::Named(MethodName::TwoPoint);
        let c = cfg(&["--profile", "fast"]);
        let m = Model::new(&c);
        let pair = 2.0 * m.prefill(1000, 0) + m.decode(1, 1000, 1) + m.decode(1, 1000, 17);
        assert!((model_point(&c, &two, 1000, false) - 2.0 * pair).abs() < 1e-12);
    }

    #[test]
    fn an_uncalibrated_prompt_is_as_long_as_the_text_the_runner_sends() {
        let spec = |calibrate: bool| {
            servebench_model::spec::load_str(
                "t.yaml",
                &format!(
                    "name: t\nserver: {{ engine: sim }}\nworkload:\n  prompt: {{ kind: repeat, tokens: 4096, calibrate: {calibrate} }}\n  output_tokens: 4\n"
                ),
            )
            .unwrap()
        };
        let calibrated = spec(true);
        assert_eq!(
            prompt_tokens(&calibrated.points[0], Path::new(".")),
            Some(4096)
        );
        // Four characters per token, counted by the sim's tokenizer: not the target.
        let text = crate::prompt::TextGenerator::Repeat {
            text: "The quick brown fox jumps over the lazy dog. ".into(),
        }
        .text(4096 * 4);
        let sent = sim::tokenize(&text).len() as u64;
        assert_ne!(sent, 4096);
        let raw = spec(false);
        assert_eq!(prompt_tokens(&raw.points[0], Path::new(".")), Some(sent));
    }

    /// First send to last byte of `point`'s requests, as [`request_spans`] folds them.
    fn request_span(requests: &[RequestRecord], point: &str) -> Option<f64> {
        let mut spans = HashMap::new();
        requests.iter().for_each(|r| add_span(&mut spans, r));
        spans.get(point).map(|(first, last)| last - first)
    }

    #[test]
    fn an_old_run_without_point_spans_uses_its_requests() {
        let rec = |point: &str, sent_at: f64, end_s: Option<f64>, last_chunk: f64| {
            let mut v = serde_json::json!({
                "point": point, "round": 0, "index": 0, "role": "measure",
                "api": "sglang-generate", "sent_at": sent_at, "max_tokens": 4,
                "chunks": [{"t_s": last_chunk / 2.0, "tokens": 1}, {"t_s": last_chunk, "tokens": 1}],
                "token_source": "meta-info",
            });
            if let Some(e) = end_s {
                v["end_s"] = e.into();
            }
            serde_json::from_value::<RequestRecord>(v).unwrap()
        };
        let requests = [
            rec("p001", 100.0, Some(2.0), 1.5),
            // Cut off: its last chunk marks its end.
            rec("p001", 101.0, None, 3.0),
            rec("p002", 200.0, Some(9.0), 9.0),
        ];
        assert_eq!(request_span(&requests, "p001"), Some(4.0));
        assert_eq!(request_span(&requests, "p002"), Some(9.0));
        assert_eq!(request_span(&requests, "p003"), None);
    }

    #[test]
    fn a_warm_prefill_is_the_uncached_tail_only() {
        let c = cfg(&["--profile", "fast"]);
        let m = Model::new(&c);
        assert!(m.prefill(8000, 7999) < m.prefill(8000, 0) / 10.0);
    }
}
