//! The experiment spec as Rust types. These types are the single source of the JSON Schema
//! (`servebench schema`, `schemas/experiment.schema.json`): doc comments become descriptions.
//!
//! A spec is validated in its raw form (where any scalar may be a `{{ var }}` template) and then
//! expanded into one fully typed `Experiment` per sweep point.
//!
//! The top of the spec's types: the `Experiment` is made of the parts in `load_model`,
//! `search`, `workload` and `error_budget`, which never use this file (the workload's parts
//! and `ErrorBudget` are re-exported here, where their paths have always been).

use std::path::PathBuf;
use std::sync::Arc;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::error_budget::ErrorBudget;
pub use super::hardware_facts::{CustomGpu, GpuChoice, ModelFactsSource};
use super::patterns::{DURATION_PATTERN, HOST_PATTERN, SLURM_TIME_PATTERN};
pub use super::workload::{
    DatasetFormat, Length, LengthDist, SessionsFormat, SessionsSpec, ThinkDist,
};

/// One experiment: which server to run, what to send it, how to measure, and what to sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Short name, used for the run directory `runs/<name>/<UTC timestamp>/`.
    /// Letters, digits, `-`, `_` and `.` only.
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]+$"), length(min = 1, max = 100))]
    pub name: String,
    /// What the experiment is for; shown at the top of the report.
    #[serde(default)]
    pub description: String,
    /// Where the server runs. `local` (the default) starts it on this machine;
    /// `ssh://user@host[:port]` (or the structured form with identity file, jump host and ssh
    /// options) launches it on a GPU host over SSH. Host keys are checked strictly.
    #[serde(default)]
    pub host: HostSpec,
    /// A pool of hosts (each like `host`). Server groups are independent, so they run in
    /// parallel, one group per host at a time, in plan order; a multi-node server
    /// (`server.nodes`) takes that many hosts of the pool at once. When set, `host` is not used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub hosts: Vec<HostSpec>,
    /// What happens to a pool host's remaining server groups when the host fails (cannot be
    /// reached, or its link drops mid-run). `move` (the default): they go to another host of
    /// the pool, and the failed host takes no more groups. `fail`: they are recorded as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_host_failure: Option<HostFailover>,
    /// Where the measuring client runs for an SSH host. `host` (the default): servebench copies
    /// itself to the host and measures against localhost there, so network latency never
    /// enters the numbers. `local`: measure from this machine through an SSH port forward.
    #[serde(default)]
    pub client: Option<ClientPlacement>,
    /// What to do when the server dies during a point (out of memory, crash). `continue`
    /// (default): record the cause, relaunch, go on. `skip-larger`: also skip the group's
    /// remaining points with a larger context or concurrency (they would fail the same way).
    /// `abort`: stop the run.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// The inference server: the engine to launch and its flags, or the URL of one already running.
    pub server: Server,
    /// What each request sends: API, prompt generator and output length.
    pub workload: Workload,
    /// Whether measured requests may reuse the server's prefix (radix) cache, and whether to verify it.
    #[serde(default)]
    pub cache: CacheSpec,
    /// How a point is measured. `streaming` (the default): one streaming request per sample gives
    /// both TTFT (prefill) and the token stream (decode) from a single prefill.
    #[serde(default)]
    pub method: Method,
    /// Sweep dimensions; the points are their cartesian product, in the order written.
    /// A bare name (`ctx`) is a variable used elsewhere as `"{{ ctx }}"`; a dotted path
    /// (`server.args.chunked-prefill-size`) or a top-level field (`concurrency`, `requests`)
    /// sets that field directly. Dimensions under `server.` group points into server launches.
    // Shared by every point of a spec: a copy per point made memory grow with the square of
    // the sweep's length (10,000 points held 10^8 values).
    #[serde(default)]
    pub sweep: Arc<IndexMap<String, Vec<SweepValue>>>,
    /// Rounds per point: each round flushes (cold) or primes (warm) anew and sends `requests`
    /// requests; a point's numbers cover all its rounds.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1000))]
    pub repeat: u32,
    /// Measured requests per point and round.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 100000))]
    pub requests: u32,
    /// Most requests in flight at once within a point (closed loop).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 4096))]
    pub concurrency: u32,
    /// Failed measured requests a point may have and still be `ok`: a count (`2`) or a share
    /// of its requests (`5%`). Above it the point is `degraded`; a point without any successful
    /// request is `failed`. The default, 0, degrades a point on any failed request.
    #[serde(default)]
    pub error_budget: ErrorBudget,
    /// Per-request timeout, e.g. `10m`, `90s`. A request past it is recorded as a timeout error.
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub request_timeout: std::time::Duration,
    /// Published numbers to reproduce. Each is checked against the run: the report gets a
    /// Reproduction section, and `servebench check` / `run --check` exit 1 when one is off.
    #[serde(default)]
    pub expect: Vec<Expectation>,
    /// How the report is rendered.
    #[serde(default)]
    pub report: ReportSpec,
    /// How requests arrive: open loop (a rate with an arrival process, a ramp, a trace) or
    /// multi-turn sessions (`{ kind: sessions, sessions: { users, turns, think, think_dist } }`).
    /// Absent: the closed loop of `concurrency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<super::load_model::LoadSpec>,
    /// When a point's measured phase ends (the first limit reached): a `load:` point's
    /// requests or duration, and any point's `errors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<super::load_model::StopSpec>,
    /// Requests before the measured phase of a `load:` point: sent and recorded (phase
    /// `warmup`), not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<super::load_model::PhaseSpec>,
    /// Requests after the measured phase of a `load:` point, keeping the load on while the
    /// measured ones finish: recorded (phase `cooldown`), not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<super::load_model::PhaseSpec>,
    /// Service-level objectives: per-request thresholds (goodput counts the requests meeting
    /// all) and point-level targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<super::load_model::SloSpec>,
    /// A capacity search: find the highest `load.rate` (or `concurrency`) whose point meets
    /// the `slo.targets`, doubling from `start` until a probe fails, then bisecting to
    /// `resolution`. Each probe is an ordinary point; the searched dimension is not swept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<super::search::SearchSpec>,
    /// Percentiles reported for each metric, e.g. `[50, 90, 99, 99.9]` (p50, p90 and p99 are
    /// always there).
    #[serde(
        default = "super::load_model::default_percentiles",
        skip_serializing_if = "super::load_model::is_default_percentiles"
    )]
    pub percentiles: Vec<f64>,
    /// GPU telemetry while each point runs, on the server's host (`nvidia-smi` in its
    /// looping mode): memory headroom, throttling, power and the energy per token.
    #[serde(default)]
    pub telemetry: super::telemetry::TelemetrySpec,
    /// What a GPU-hour costs, for the cost per million input and output tokens of each point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<super::telemetry::CostSpec>,
    /// The engine's profiler around chosen points' measured windows (SGLang, vLLM), its
    /// traces copied back into the run directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiler: Option<super::profiler::ProfilerSpec>,
    /// Checks of the server's output at each point: known-answer canaries and consistency
    /// under load (off by default). A point that fails one is flagged `invalid-output`.
    #[serde(default, skip_serializing_if = "is_default_validity")]
    pub validity: super::validity::ValiditySpec,
}

fn is_default_validity(v: &super::validity::ValiditySpec) -> bool {
    v == &super::validity::ValiditySpec::default()
}

impl Experiment {
    /// The hosts servers run on: `hosts:` when given, else the one `host`.
    pub fn pool(&self) -> Vec<HostSpec> {
        if self.hosts.is_empty() {
            vec![self.host.clone()]
        } else {
            self.hosts.clone()
        }
    }

    /// Where the measuring client runs: `client` as given for an SSH host, else on the host
    /// (the default there, so network latency stays out of the numbers); always this machine
    /// for a local server, whatever `client` says.
    pub fn placement(&self) -> ClientPlacement {
        match (self.client, self.pool().iter().all(HostSpec::is_local)) {
            (Some(c), false) => c,
            (_, true) => ClientPlacement::Local,
            (None, false) => ClientPlacement::Host,
        }
    }

    /// The `sessions` load model, when the spec's `load` is one: the one place that reads it.
    pub fn sessions(&self) -> Option<&SessionsSpec> {
        match &self.load {
            Some(super::load_model::LoadSpec::Sessions { sessions, .. }) => Some(sessions),
            _ => None,
        }
    }

    /// The open-loop load model (`rate`, `ramp`, `trace`), when the spec's `load` is one.
    pub fn open_loop(&self) -> Option<&super::load_model::LoadSpec> {
        self.load.as_ref().filter(|l| l.open_loop().is_some())
    }

    /// The agent sessions replayed (`load: { kind: agentic }`), when the spec's `load` is one.
    pub fn agentic(&self) -> Option<&super::load_model::AgenticSpec> {
        match &self.load {
            Some(super::load_model::LoadSpec::Agentic { agentic, .. }) => Some(agentic),
            _ => None,
        }
    }
}

/// Where the server runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum HostSpec {
    /// `local`, or `ssh://user@host[:port]`.
    Url(#[schemars(regex(pattern = HOST_PATTERN))] String),
    /// An SSH host with options.
    Ssh(SshHostSpec),
    /// A Slurm cluster: each server group runs in a job allocation (`slurm: { partition, ... }`).
    Slurm(SlurmHostSpec),
}

impl Default for HostSpec {
    fn default() -> Self {
        HostSpec::Url("local".into())
    }
}

impl HostSpec {
    /// True for `local`.
    pub fn is_local(&self) -> bool {
        matches!(self, HostSpec::Url(u) if u == "local")
    }

    /// `local`, or the SSH destination as written.
    pub fn label(&self) -> String {
        match self {
            HostSpec::Url(u) => u.clone(),
            HostSpec::Ssh(s) if s.ssh.starts_with("ssh://") => s.ssh.clone(),
            HostSpec::Ssh(s) => {
                let user = match (&s.user, s.ssh.contains('@')) {
                    (Some(u), false) => format!("{u}@"),
                    _ => String::new(),
                };
                let port = s.port.map(|p| format!(":{p}")).unwrap_or_default();
                format!("ssh://{user}{}{port}", s.ssh)
            }
            HostSpec::Slurm(s) => {
                let o = &s.slurm;
                format!(
                    "slurm ({}, {} node{}{}{}{}, one job per {}{})",
                    o.partition
                        .as_ref()
                        .map_or("default partition".to_string(), |p| format!(
                            "partition {p}"
                        )),
                    o.nodes,
                    if o.nodes == 1 { "" } else { "s" },
                    o.gpus_per_node
                        .map(|g| format!(" × {g} GPUs"))
                        .unwrap_or_default(),
                    if o.ranks_per_node > 1 {
                        format!(", {} ranks per node", o.ranks_per_node)
                    } else {
                        String::new()
                    },
                    o.time
                        .as_ref()
                        .map(|t| format!(", time {t}"))
                        .unwrap_or_default(),
                    match o.allocation {
                        SlurmAllocation::Group => "server group",
                        SlurmAllocation::Run => "run",
                    },
                    o.login
                        .as_ref()
                        .map(|l| format!(
                            ", through the login node {}",
                            HostSpec::Ssh(l.clone()).label()
                        ))
                        .unwrap_or_default()
                )
            }
        }
    }

    /// The Slurm options when the host is a Slurm cluster.
    pub fn slurm(&self) -> Option<&SlurmOptions> {
        match self {
            HostSpec::Slurm(s) => Some(&s.slurm),
            _ => None,
        }
    }

    /// How many ranks of a multi-node server this host runs: one for a machine, the
    /// allocation's for a Slurm cluster ([`SlurmOptions::rank_capacity`]).
    pub fn rank_capacity(&self) -> u32 {
        self.slurm().map_or(1, SlurmOptions::rank_capacity)
    }
}

/// A Slurm cluster as the place servers run: `host: { slurm: { partition: gpu, nodes: 1 } }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlurmHostSpec {
    pub slurm: SlurmOptions,
}

/// How servebench asks Slurm for an allocation. It runs Slurm's own commands (`sbatch`,
/// `srun`, `squeue`, `scontrol`, `scancel`, `sacct`) on this machine, which must be a node
/// the cluster accepts submissions from (a login node; `SLURM_CONF` is honoured), or on the
/// `login` node over SSH.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlurmOptions {
    /// Partition (`sbatch --partition`); the cluster's default when absent.
    #[serde(default)]
    pub partition: Option<String>,
    /// Nodes per allocation (`sbatch --nodes`). A multi-node server (`server.nodes: N`)
    /// puts one rank per node, rank `i` on the allocation's node `i`, so `nodes` must be at
    /// least `server.nodes` (divided by `ranks_per_node`).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1024))]
    pub nodes: u32,
    /// Ranks of a multi-node server per node of the allocation (default 1). More than one
    /// runs several ranks on one node as steps that share its resources (`srun --overlap`,
    /// no GPUs of their own): for CPU simulations and for trying multi-node launches on a
    /// one-node cluster, not for measuring real engines.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 64))]
    pub ranks_per_node: u32,
    /// GPUs per node (`sbatch --gpus-per-node`).
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    pub gpus_per_node: Option<u32>,
    /// Time limit of each allocation (`sbatch --time`: `30`, `1:30:00`, `1-00:00:00`). Slurm
    /// counts it in whole minutes. A server still running at the limit fails its point with
    /// the cause `time-limit`.
    #[serde(default)]
    #[schemars(regex(pattern = SLURM_TIME_PATTERN))]
    pub time: Option<String>,
    /// Account to charge (`sbatch --account`).
    #[serde(default)]
    pub account: Option<String>,
    /// Quality of service (`sbatch --qos`).
    #[serde(default)]
    pub qos: Option<String>,
    /// Node features required (`sbatch --constraint`), e.g. `h100`.
    #[serde(default)]
    pub constraint: Option<String>,
    /// More `sbatch` arguments, each one argument as written (never passed through a shell),
    /// e.g. `["--exclusive", "--mem=0"]`.
    #[serde(default)]
    pub sbatch: Vec<String>,
    /// `group` (the default): one job per server group, released when the group is done.
    /// `run`: one allocation for the whole run, every group's server a step inside it.
    #[serde(default)]
    pub allocation: SlurmAllocation,
    /// The login node Slurm's commands run on, reached over SSH (the same fields as an SSH
    /// host: `{ ssh: user@login.cluster, identity: ~/.ssh/id_ed25519 }`). Absent: they run on
    /// this machine. servebench's binary is copied there (the nodes must see the login node's
    /// home directory, as they do on most clusters).
    #[serde(default)]
    pub login: Option<SshHostSpec>,
}

impl SlurmOptions {
    /// How many ranks of a multi-node server one allocation holds.
    pub fn rank_capacity(&self) -> u32 {
        self.nodes.saturating_mul(self.ranks_per_node.max(1))
    }

    /// The allocation's node (an index into its node list) rank `rank` runs on.
    pub fn node_of_rank(&self, rank: u32) -> u32 {
        rank / self.ranks_per_node.max(1)
    }
}

/// How many allocations a run asks for.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum SlurmAllocation {
    /// One job per server group.
    #[default]
    Group,
    /// One job for the whole run.
    Run,
}

/// An SSH host. servebench runs the system `ssh` with a shared (multiplexed) connection, so
/// `~/.ssh/config`, agents and keys work as they do in a terminal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SshHostSpec {
    /// Destination: `host`, `user@host` or `ssh://user@host:port` (a name from
    /// `~/.ssh/config` works too).
    #[schemars(length(min = 1, max = 500))]
    pub ssh: String,
    /// Login user (ssh -l), when not in `ssh`.
    #[serde(default)]
    pub user: Option<String>,
    /// SSH port (ssh -p), when not in `ssh`.
    #[serde(default)]
    pub port: Option<u16>,
    /// Private key file (ssh -i); `~` is expanded.
    #[serde(default)]
    pub identity: Option<String>,
    /// Jump host(s), as ssh -J takes them: `user@bastion[:port][,next]`.
    #[serde(default)]
    pub jump: Option<String>,
    /// known_hosts file to check the host key against (default: ssh's own).
    #[serde(default)]
    pub known_hosts: Option<String>,
    /// `strict` (the default): an unknown or changed host key refuses the connection.
    /// `accept-new`: a host seen for the first time is added; a changed key is still refused.
    #[serde(default)]
    pub host_key_check: HostKeyCheck,
    /// Extra ssh options (`-o Key=Value`), e.g. `{ ServerAliveInterval: 15 }`.
    #[serde(default)]
    pub options: IndexMap<String, String>,
    /// Directory on the host for server logs and servebench's files
    /// (default `~/.cache/servebench`).
    #[serde(default)]
    pub remote_dir: Option<String>,
    /// The address the run's other hosts reach this one at (a deployment's router reaching
    /// a worker here, the other ranks reaching rank 0's rendezvous). Default: the host part
    /// of `ssh`, which must then resolve there too (a `~/.ssh/config` alias may not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// How an SSH host's key is checked.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum HostKeyCheck {
    /// Refuse unknown and changed host keys.
    #[default]
    Strict,
    /// Add unknown host keys; refuse changed ones.
    AcceptNew,
}

/// What a host pool does with a failed host's remaining server groups.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum HostFailover {
    /// Move them to another host of the pool (the next one free, in plan order).
    #[default]
    Move,
    /// Record their points as failed with the host's failure.
    Fail,
}

/// Where the measuring client runs.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ClientPlacement {
    /// On the server's host, against localhost (servebench copies itself there).
    Host,
    /// On this machine (through an SSH port forward for SSH hosts).
    Local,
}

/// The policy when a server dies during a point.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum OnFailure {
    /// Record the cause, relaunch the server, go on with the next point.
    #[default]
    Continue,
    /// Relaunch, but skip the group's remaining points with a larger context or concurrency.
    SkipLarger,
    /// Stop the run (what was measured is kept).
    Abort,
}

/// A published number (or outcome) to reproduce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    /// The points it is about, by sweep values, e.g. `{ ctx: 8192 }`. Empty: every point.
    #[serde(default, rename = "where")]
    pub where_: IndexMap<String, SweepValue>,
    /// The metric: `ttft_s`, `prefill_tok_s`, `decode_tok_s`, `tpot_s`, `e2e_s`, `t_a_s`,
    /// `t_b_s`, `prompt_tokens`, ... (the point's mean is compared); or a figure the point is
    /// graded with against the hardware (needs `server.model_facts` and a known GPU; the
    /// model's values, not scaled by `sim-time-scale`): `step_s` (seconds per decode step),
    /// `step_floor_s` (the step's bytes per GPU at peak bandwidth), `effective_bandwidth_gbs`
    /// (bytes per GPU over the step, GB/s), `decode_bw_fraction` (that over peak bandwidth),
    /// `prefill_tflops` (prefill FLOPs per GPU over its time), `prefill_flops_fraction` (that
    /// over the dense peak); or a live-sessions search's answer (judged on the probe that set
    /// it): `agents_at_slo`, `agents_at_slo_per_gpu`, `agents_at_slo_per_mw`.
    #[serde(default)]
    pub metric: Option<String>,
    /// The published value, in the metric's unit.
    #[serde(default)]
    pub value: Option<f64>,
    /// Allowed difference: a percentage (`10%`) or an absolute amount in the metric's unit
    /// (`0.05`). Default 10%.
    #[serde(default)]
    pub tolerance: Option<Tolerance>,
    /// Instead of a number: the point is expected to carry this flag (e.g.
    /// `cache-reuse-suspected`), as the published run did.
    #[serde(default)]
    pub flag: Option<String>,
    /// Instead of a number: the point is expected to fail with this cause (e.g.
    /// `out-of-memory`), as the published run did.
    #[serde(default)]
    pub failure: Option<String>,
    /// Where the number comes from (shown in the report).
    #[serde(default)]
    pub source: Option<String>,
}

/// A tolerance: `10%` or an absolute number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Tolerance {
    /// Absolute, in the metric's unit.
    Absolute(f64),
    /// Percent of the published value, e.g. `10%`.
    Percent(#[schemars(regex(pattern = r"^\s*[0-9]+(\.[0-9]+)?\s*%\s*$"))] String),
}

/// A value a sweep dimension takes: a number, string or boolean.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SweepValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

/// The server under test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// `sim`: servebench's built-in SGLang-compatible simulator (no GPU needed).
    /// `sglang`: `python -m sglang.launch_server`; `vllm`: `vllm serve MODEL`; `llama.cpp`:
    /// `llama-server -m MODEL`; `command`: `launcher` is the whole command line, with
    /// `{model}`, `{host}` and `{port}` filled in (any other server: TGI, TensorRT-LLM, your own).
    #[serde(default)]
    pub engine: Engine,
    /// Model path or name, passed as the engine takes it (SGLang `--model-path`, vLLM's
    /// positional model, llama.cpp `-m`); also the `model` field of OpenAI requests.
    #[serde(default)]
    pub model: Option<String>,
    /// Port to listen on. Omit it to pick a free port.
    #[serde(default)]
    pub port: Option<u16>,
    /// Launch flags without the leading `--`, e.g. `{ tp-size: 8, chunked-prefill-size: 4096,
    /// enable-metrics: true }`. `true` is a bare flag; `false` omits it (vLLM: `--no-FLAG`).
    /// A name written with one dash is passed as written (`-np: 4` for llama.cpp).
    #[serde(default)]
    pub args: IndexMap<String, ArgValue>,
    /// Flags for one engine only, merged over `args` when that engine runs, so one spec can
    /// sweep `server.engine` with each engine's own spelling:
    /// `{ vllm: { gpu-memory-utilization: 0.85 }, sglang: { mem-fraction-static: 0.85 } }`.
    #[serde(default)]
    pub engine_args: IndexMap<Engine, IndexMap<String, ArgValue>>,
    /// Run servebench's built-in simulator speaking this engine's API, flags and log lines
    /// (`servebench sim --api ENGINE`) instead of the engine: try a vLLM or llama.cpp spec
    /// without a GPU. The simulator's `profile` and `sim-time-scale` flags apply.
    #[serde(default)]
    pub simulate: bool,
    /// A log line that means the server is ready, besides `/health` answering 200 (the
    /// engines' own ready lines are known; give one for `engine: command`).
    #[serde(default)]
    pub ready_line: Option<String>,
    /// Environment variables for the server process.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// How long to wait for the server to become ready (`/health` 200), e.g. `20m`, `90s`.
    #[serde(default = "default_ready_timeout", with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub ready_timeout: std::time::Duration,
    /// The command that starts the engine, before its flags. Default for `sglang`:
    /// `[python, -m, sglang.launch_server]`; for `sim`: servebench's own `sim` subcommand.
    #[serde(default)]
    pub launcher: Option<Vec<String>>,
    /// Working directory of the server process (on the host).
    #[serde(default)]
    pub workdir: Option<String>,
    /// URL of a server that is already running (`http://host:port`). servebench neither starts
    /// nor stops it; it records its `/server_info` when it answers.
    #[serde(default)]
    pub url: Option<String>,
    /// The workers behind `url` when it is a router (`http://host:port` each, as this machine,
    /// or the agent's host, reaches them): each one's `/metrics` is scraped before and after
    /// every round, so the report says what each worker served (requests, prompt, cached and
    /// generated tokens) and how evenly the router spread the load.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<String>,
    /// Several servers and SGLang's router in front of them, launched, watched and stopped
    /// together, measured through the router: `{ workers: 2, router: { policy: round_robin } }`,
    /// or prefill-decode disaggregated `{ prefill: 1, decode: 2 }`. Each worker is this
    /// server (`engine`, `model`, `args`, `env`) with its own flags merged over `args`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<super::deployment::Deployment>,
    /// Nodes one server spans (multi-node; default 1). The engine runs as this many ranks, one
    /// per host of `hosts:`, started, watched and stopped together; rank 0 serves HTTP. SGLang
    /// gets `--nnodes N --node-rank I --dist-init-addr HOST:PORT`; vLLM `--nnodes N --node-rank
    /// I --master-addr HOST --master-port PORT` (ranks from 1 `--headless`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub nodes: Option<u32>,
    /// The address other ranks reach rank 0's host at, for the rendezvous (default: rank 0's
    /// SSH host name; `127.0.0.1` for a local host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist_init_host: Option<String>,
    /// The model's Hugging Face `config.json`, for grading each point against the hardware's
    /// bound: a path (relative to the spec file) or the config inline. Omitted: read from
    /// `<model>/config.json` on the server's host when `model` is a directory there; when it
    /// cannot be read the report says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_facts: Option<ModelFactsSource>,
    /// The GPU to grade against: a catalogue id (`h100-sxm`, `rtx-pro-6000`; `servebench bound
    /// --help` lists them) or `{ name, bandwidth_gb_s, bf16_tflops, fp8_tflops, source }`.
    /// Omitted: the GPU the server host's nvidia-smi names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuChoice>,
}

impl Server {
    /// Hosts the server holds at once: its ranks (`nodes`, at least 1), or the nodes a
    /// deployment spreads its workers over (`deployment.nodes`).
    pub fn node_count(&self) -> u32 {
        match &self.deployment {
            Some(d) => d.node_count(),
            None => self.nodes.unwrap_or(1).max(1),
        }
    }

    /// The key that sets [`Self::node_count`], for messages: `server.nodes` or
    /// `server.deployment.nodes`.
    pub fn nodes_key(&self) -> &'static str {
        if self.deployment.is_some() {
            "server.deployment.nodes"
        } else {
            "server.nodes"
        }
    }

    /// Whether the server speaks SGLang's API (see [`Engine::speaks_sglang`]).
    pub fn speaks_sglang(&self) -> bool {
        let api = match self.args.get("api") {
            Some(ArgValue::Str(a)) => Some(a.as_str()),
            _ => None,
        };
        self.engine.speaks_sglang(api)
    }
}

pub use super::arg_value::ArgValue;

/// The server engine (each has an adapter in `src/engine`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Engine {
    /// servebench's built-in SGLang-compatible simulator.
    #[default]
    Sim,
    /// SGLang (`python -m sglang.launch_server`).
    Sglang,
    /// vLLM (`vllm serve MODEL`).
    Vllm,
    /// llama.cpp's `llama-server -m MODEL`.
    #[serde(rename = "llama.cpp")]
    #[strum(serialize = "llama.cpp")]
    LlamaCpp,
    /// Any other server: `launcher` is its command line with `{model}`, `{host}`, `{port}`.
    Command,
}

impl Engine {
    /// Whether a server of this engine speaks SGLang's API, `api` its `args.api` where that
    /// is a string: SGLang itself, or the simulator on its default (SGLang) surface. Only
    /// such a server is sent SGLang's own request fields and checked for SGLang's parsers.
    pub fn speaks_sglang(self, api: Option<&str>) -> bool {
        match self {
            Engine::Sglang => true,
            Engine::Sim => api.is_none_or(|a| a == "sglang"),
            Engine::Vllm | Engine::LlamaCpp | Engine::Command => false,
        }
    }
}

/// What each request sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The HTTP API used for requests.
    #[serde(default)]
    pub api: Api,
    /// The prompt generator.
    pub prompt: PromptSpec,
    /// Output tokens per request (`max_new_tokens` / `max_tokens`): a number, or a
    /// distribution such as `{ dist: uniform, min: 64, max: 256 }`.
    pub output_tokens: Length,
    /// Keep generating past end-of-sequence so every request yields exactly `output_tokens`.
    #[serde(default = "yes")]
    pub ignore_eos: bool,
    /// Sampling temperature; 0 is greedy.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub temperature: f64,
    /// Seed of every draw the workload makes (lengths, mix entries, think times): the same
    /// seed sends the same requests.
    #[serde(default)]
    pub seed: u64,
    /// A weighted mix of workloads in one point: each request draws an entry by weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mix: Vec<MixEntry>,
    /// Sent as the chat request's `chat_template_kwargs` (the chat API only), e.g.
    /// `{ enable_thinking: false }` to turn a Qwen3 model's thinking off (`{ thinking: false }`
    /// for DeepSeek's templates); SGLang, vLLM and llama.cpp pass it to the chat template.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub chat_template_kwargs: IndexMap<String, serde_json::Value>,
    /// Function tools sent with every chat request (the chat API only): a list of OpenAI
    /// function tools, or `{ file: path }` to a JSON file holding one. Each streamed call is
    /// checked against its declared schema (see the guide's "Tool calls").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<super::tools::ToolsSpec>,
    /// `auto`, `none`, `required`, or `{ function: NAME }` (the chat API only; the server's
    /// default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<super::tools::ToolChoice>,
}

/// One entry of a weighted mix: each request picks an entry with probability `weight / sum
/// of weights` (drawn from `workload.seed`); the entry's `prompt` and `output_tokens` replace
/// the workload's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MixEntry {
    /// Relative weight (any positive number).
    #[schemars(range(min = 0.0))]
    pub weight: f64,
    /// The entry's prompt generator (default: the workload's).
    #[serde(default)]
    pub prompt: Option<PromptSpec>,
    /// The entry's output length (default: the workload's).
    #[serde(default)]
    pub output_tokens: Option<Length>,
    /// A name for the report (default `mix-N`, N from 1).
    #[serde(default)]
    pub name: Option<String>,
}

/// The HTTP API.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Api {
    /// SGLang's native `/generate` (token counts and `cached_tokens` in `meta_info`).
    #[default]
    SglangGenerate,
    /// OpenAI-compatible `/v1/completions`.
    OpenaiCompletions,
    /// OpenAI-compatible `/v1/chat/completions`.
    OpenaiChat,
}

/// A prompt generator. Lengths are in tokens as the server counts them: without a tokenizer,
/// servebench calibrates the text against the server's reported `prompt_tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PromptSpec {
    /// A sentence repeated to the target length (the classic long-context benchmark prompt).
    Repeat {
        /// The text that is repeated.
        #[serde(default = "default_repeat_text")]
        text: String,
        /// Target prompt length in tokens.
        #[schemars(range(min = 1, max = 10000000))]
        tokens: u64,
        /// Scale the text until the server's `prompt_tokens` is within `tolerance` of the target.
        #[serde(default = "yes")]
        calibrate: bool,
    },
    /// Seeded random words to the target length (no accidental shared prefixes).
    Random {
        /// Target prompt length in tokens: a number, or a distribution drawn per request
        /// (lengths bucketed to 2% and each bucket calibrated once).
        tokens: Length,
        /// Seed of the word sequence; the same seed gives the same prompt.
        #[serde(default)]
        seed: u64,
        /// Scale the text until the server's `prompt_tokens` is within tolerance of the target.
        #[serde(default = "yes")]
        calibrate: bool,
    },
    /// Prompts read from a file: one per line (`.txt`) or a JSON list of strings (`.json`).
    /// Requests take them in order, wrapping around.
    File {
        /// Path to the file, relative to the spec file.
        path: PathBuf,
    },
    /// Requests from a dataset file in a format people already have (ShareGPT conversations,
    /// JSONL with `prompt` or `input_tokens` and `output_tokens`, AIPerf's `single_turn`,
    /// SGLang's `custom`). Read from disk, never downloaded; requests take its entries in
    /// order, wrapping around.
    Dataset {
        /// `sharegpt`, `jsonl`, `aiperf-single-turn` or `sglang-custom`.
        format: DatasetFormat,
        /// Path to the file, relative to the spec file.
        file: PathBuf,
    },
    /// SGLang's generated shared prefix: `groups` groups, each with its own prefix of
    /// `prefix_tokens` tokens, and `suffix_tokens` unique tokens after it per request.
    /// Request `i` belongs to group `i mod groups`. servebench states which requests must find
    /// their group's prefix cached (those sent after an earlier request of the group had its
    /// first token, so its prefill had ended) and verifies each against the server's
    /// `cached_tokens`, per group.
    SharedPrefix {
        #[schemars(range(min = 1, max = 10000))]
        groups: u32,
        /// Tokens of each group's prefix (a system prompt, a document).
        #[schemars(range(min = 1, max = 10000000))]
        prefix_tokens: u64,
        /// Tokens after the prefix, different in every request (the question).
        #[schemars(range(min = 1, max = 10000000))]
        suffix_tokens: u64,
        /// Seed of the text.
        #[serde(default)]
        seed: u64,
    },
}

/// Cache policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// `cold`: a unique nonce starts every measured prompt and the cache is flushed before each
    /// point. `warm`: each prompt is sent once to prime the cache, then measured. `as-is`: no
    /// intervention.
    #[serde(default)]
    pub policy: CachePolicy,
    /// Check the server's own `cached_tokens`: a cold point with cache hits, or a warm point
    /// without them, is flagged as contaminated.
    #[serde(default = "yes")]
    pub verify: bool,
    /// Start every cold prompt with a unique nonce (the default). `false` reproduces what naive
    /// benchmark scripts do (the same prompt again hits the radix cache); `verify` then flags it.
    #[serde(default = "yes")]
    pub nonce: bool,
}

impl Default for CacheSpec {
    fn default() -> Self {
        CacheSpec {
            policy: CachePolicy::Cold,
            verify: true,
            nonce: true,
        }
    }
}

/// How measured requests relate to the server's prefix cache.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum CachePolicy {
    /// Nonce-prefixed prompts and a flush before each point: every request pays a full prefill.
    #[default]
    Cold,
    /// Prime each prompt once, then measure it: prefill is served from the cache.
    Warm,
    /// No nonce, no flush; cached tokens are still recorded.
    AsIs,
}

/// The measurement method: `streaming`, `two-point`, or `{ kind: two-point, a: 1, b: 17 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Method {
    /// A method by name, with its defaults.
    Named(MethodName),
    /// A method with parameters.
    Detailed(MethodSpec),
}

impl Default for Method {
    fn default() -> Self {
        Method::Named(MethodName::Streaming)
    }
}

/// Methods by name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MethodName {
    /// One streaming request per sample: TTFT, then the token stream (one prefill).
    #[default]
    Streaming,
    /// Two requests per sample with the same prompt, `max_tokens` a = 1 then b = 17;
    /// decode = (b - a) / (t_b - t_a). Cold cache: flushed between the two.
    TwoPoint,
}

/// A method with parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum MethodSpec {
    /// One streaming request per sample.
    Streaming,
    /// Two requests per sample: `max_tokens` a, then b.
    TwoPoint {
        /// `max_tokens` of the first request.
        #[serde(default = "two_point_a")]
        #[schemars(range(min = 1, max = 100000))]
        a: u32,
        /// `max_tokens` of the second request (more than `a`).
        #[serde(default = "two_point_b")]
        #[schemars(range(min = 2, max = 100000))]
        b: u32,
    },
}

/// A method, resolved to its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    Streaming,
    TwoPoint { a: u32, b: u32 },
}

impl Method {
    /// The method's name as specs write it.
    pub fn name(&self) -> &'static str {
        match self.resolve() {
            Measure::Streaming => "streaming",
            Measure::TwoPoint { .. } => "two-point",
        }
    }

    pub fn resolve(&self) -> Measure {
        match self {
            Method::Named(MethodName::Streaming) | Method::Detailed(MethodSpec::Streaming) => {
                Measure::Streaming
            }
            Method::Named(MethodName::TwoPoint) => Measure::TwoPoint {
                a: two_point_a(),
                b: two_point_b(),
            },
            Method::Detailed(MethodSpec::TwoPoint { a, b }) => Measure::TwoPoint { a: *a, b: *b },
        }
    }
}

fn two_point_a() -> u32 {
    1
}
fn two_point_b() -> u32 {
    17
}

/// Report options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportSpec {
    /// A built-in template: `default` (every detail) or `long-context` (one compact table per
    /// server group, as in the long-context prefill/decode study); or a path, relative to the
    /// spec, to a minijinja Markdown template (`.md.j2`) that sees the report model
    /// (`schemas/report-model.schema.json`).
    #[serde(default = "default_template")]
    pub template: String,
    /// Formats other tools read, written with every report into `export/<format>/` (the same
    /// files `servebench export RUN --format FORMAT` writes): `llm-d` (llm-d's Benchmark Report
    /// v0.2, one per point) and `aiperf` (AIPerf 0.13's `profile_export.jsonl` and
    /// `profile_export_aiperf.json`, one folder per point). Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub export: Vec<ExportFormat>,
    /// An MLflow tracking server to log every run to once its report is written (the same as
    /// `servebench mlflow RUN_DIR --tracking-uri URL`): the run as a parent MLflow run, each
    /// point as a child with its metrics, the report and its page as artifacts. A token or
    /// password comes from the environment (`MLFLOW_TRACKING_TOKEN`, or
    /// `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`), never from the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<MlflowSpec>,
}

impl Default for ReportSpec {
    fn default() -> Self {
        ReportSpec {
            template: default_template(),
            export: Vec::new(),
            mlflow: None,
        }
    }
}

/// Where `report.mlflow` logs a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MlflowSpec {
    /// The tracking server, `http://host:port` (with a path prefix if it sits behind one).
    pub tracking_uri: String,
    /// The MLflow experiment, created when missing. Default: the spec's `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
}

/// A format another tool reads a run's results in.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantNames,
)]
pub enum ExportFormat {
    /// llm-d's Benchmark Report v0.2 (llm-d-benchmark's JSON Schema), one per point.
    #[serde(rename = "llm-d")]
    #[strum(serialize = "llm-d")]
    LlmD,
    /// AIPerf 0.13's export artifacts, one folder per point.
    #[serde(rename = "aiperf")]
    #[strum(serialize = "aiperf")]
    Aiperf,
}

impl ExportFormat {
    /// Every format's name, as the spec and `--format` write it.
    pub fn names() -> &'static [&'static str] {
        <Self as strum::VariantNames>::VARIANTS
    }
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_template() -> String {
    "default".into()
}
fn default_repeat_text() -> String {
    "The quick brown fox jumps over the lazy dog. ".into()
}
fn default_ready_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(600)
}
fn default_request_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(600)
}
