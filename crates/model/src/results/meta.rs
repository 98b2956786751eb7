//! `meta.json`: provenance of a run.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::spec::types::Experiment;

/// Provenance and lifecycle of a run, written at start and rewritten at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// servebench version that ran the experiment.
    pub tool_version: String,
    /// Git state of the repository holding the spec file (None outside git).
    #[serde(default)]
    pub git: Option<GitState>,
    /// The spec file as given on the command line.
    pub spec_file: String,
    /// The spec file's absolute path (symlinks resolved), so `run --resume` and `report` find
    /// it and the files it names from any working directory. None in runs recorded before it
    /// was (then `spec_file` is read relative to the working directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_path: Option<String>,
    /// SHA-256 of the spec file's bytes.
    pub spec_sha256: String,
    /// The experiment, resolved with defaults (sweep values of the first point substituted).
    pub experiment: Experiment,
    /// Names of the sweep dimensions, in order.
    pub dimensions: Vec<String>,
    /// RFC 3339 UTC.
    pub started_at: String,
    #[serde(default)]
    pub ended_at: Option<String>,
    pub status: RunStatus,
    /// Why the run is incomplete or failed.
    #[serde(default)]
    pub status_reason: Option<String>,
    /// The machine that ran the client.
    pub client_host: HostFacts,
    /// One entry per server launch (or the external server).
    #[serde(default)]
    pub servers: Vec<ServerLaunch>,
    /// The GPU host, read over SSH (hostname, OS, CPU, GPUs from nvidia-smi, SGLang version);
    /// None for local runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_host: Option<serde_json::Value>,
    /// Where the measuring client ran: `local` (this machine; through an SSH port forward for
    /// SSH hosts) or `host` (servebench's agent on the GPU host, against localhost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_placement: Option<String>,
    /// When `run --resume` continued this run (RFC 3339 UTC), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_at: Vec<String>,
    /// The hosts of a host pool (`hosts:`), each with its facts (GPU model, driver, engine
    /// version) and whether it failed; empty for a run on one host (see `server_host`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<PoolHostRecord>,
    /// Set on a run `servebench import` made from another tool's result files: which tool,
    /// what it recorded of its command, and how its method differs from servebench's. None
    /// for runs servebench measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<ImportedFrom>,
}

/// Where an imported run came from: the tool that measured it and its method, as its files say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImportedFrom {
    /// `aiperf`, `vllm-bench`.
    pub tool: String,
    /// The tool's version as its files record it; None when they do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The files read, as given.
    pub files: Vec<String>,
    /// The tool's command or configuration as its files record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
    /// Each aspect of method (`TTFT origin`, `ITL`, `warm-up`, `cache state`, `client
    /// placement`, `prompts`) and how the tool did it.
    pub method: IndexMap<String, String>,
    /// The resolved spec's settings (dotted paths) the files recorded; the rest of the
    /// imported run's `experiment` only fills what a run directory needs and is not stated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<String>,
    /// What the files hold that servebench's metrics have no place for, or lack.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One host of a pool, as recorded in `meta.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolHostRecord {
    /// How the host is named on points (`PointRecord::host`) and launches: `user@host:port`.
    pub name: String,
    /// What the host is (hostname, OS, CPU, GPUs, SGLang version), read over SSH; None for
    /// this machine or when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<serde_json::Value>,
    /// Why the host left the pool (unreachable, its link lost, a crash beyond the failure
    /// policy); None while it served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// A launched process group as recorded: where it runs, and what tells it from a later group
/// that reuses its id (`servebench down`). What a host says of a process it launched
/// (`ServerProcess::ids`), and what `meta.json` keeps of each server and rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// The SSH host it runs on; None on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its process group (the whole server tree), which teardown and `servebench down` stop
    /// as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgid: Option<i32>,
    /// The launched process's pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// When the process group's leader started, in clock ticks since the host's boot
    /// (`/proc/PID/stat` field 22): with `boot_id`, what tells this launch's group from a later
    /// one that reuses its id. None in older runs (`down` then checks the program name) and on
    /// hosts without /proc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_start: Option<u64>,
    /// The host's boot id at launch (`/proc/sys/kernel/random/boot_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// Its log on the host (SSH), mirrored into the run directory; None on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_log: Option<String>,
}

/// One rank (from 1) of a multi-node server, as launched; rank 0 is the launch itself. In a
/// routed deployment (`server.deployment`), one worker: the launch itself is the router.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankLaunch {
    pub rank: u32,
    /// A deployment's worker: its name (`worker0`, `prefill0`, `decode1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A deployment's worker: its role (`regular`, `prefill`, `decode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A deployment's worker: its URL on its host (what the router was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A prefill worker's `--disaggregation-bootstrap-port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_port: Option<u16>,
    /// The command line (secrets redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Where its process group runs and what tells it apart (`host`, `pgid`, `pid`,
    /// `leader_start`, `boot_id`, `remote_log` in the JSON).
    #[serde(flatten)]
    pub process: ProcessRecord,
    /// The port it listens on (SGLang's ranks answer `/health` there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Its log in the run directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_file: Option<String>,
    /// True once servebench confirmed its process group is gone.
    #[serde(default)]
    pub stopped: bool,
}

impl RunMeta {
    /// The spec file to read: its absolute path when recorded, else as it was given.
    pub fn spec_location(&self) -> &str {
        self.spec_path.as_deref().unwrap_or(&self.spec_file)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GitState {
    pub commit: String,
    pub dirty: bool,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum RunStatus {
    Running,
    /// Every point measured and ok.
    Complete,
    /// Every point measured with numbers, but some degraded (failed requests beyond the error
    /// budget, or a point cut short): the numbers cover fewer requests than planned.
    Degraded,
    /// Stopped early (Ctrl-C, abort, a lost host) or some point failed; what was measured is
    /// kept.
    Incomplete,
    /// No point has numbers.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HostFacts {
    pub hostname: String,
    pub os: String,
    pub cpus: usize,
}

/// A server the run used: launched by servebench, or already running at a URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ServerLaunch {
    /// Server group id (`g1`, `g2`, ...): points sharing one server configuration.
    pub group: String,
    /// `sim`, `sglang` or `external`.
    pub engine: String,
    pub url: String,
    /// The command line that started it, secrets redacted (None for an external server).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Launch flags as given in the spec, secrets redacted.
    #[serde(default)]
    pub args: IndexMap<String, serde_json::Value>,
    /// Environment given to the server, secrets redacted.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// The server's `/server_info` once ready (None if it did not answer).
    #[serde(default)]
    pub server_info: Option<serde_json::Value>,
    /// File name of the server log inside the run directory.
    #[serde(default)]
    pub log_file: Option<String>,
    /// Seconds from launch to ready.
    #[serde(default)]
    pub ready_after_s: Option<f64>,
    /// How the server ended: `stopped`, `crashed: ...`, `external`.
    #[serde(default)]
    pub outcome: Option<String>,
    /// Whether servebench reached it through an SSH port forward (a server launched on an
    /// SSH host); false on this machine, on a Slurm node reached directly, for a `url:` server.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub through_forward: bool,
    /// Where its process group runs and what tells it apart (`host`, `pgid`, `pid`,
    /// `leader_start`, `boot_id`, `remote_log` in the JSON); empty for an external server.
    #[serde(flatten)]
    pub process: ProcessRecord,
    /// The port the server listens on, on its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// True once servebench confirmed the process group is gone.
    #[serde(default)]
    pub stopped: bool,
    /// What the server offers, found by asking it once it was ready (None in runs that
    /// predate it, or when it did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<ServerSurface>,
    /// What servebench noticed about the server and what it means for the numbers (e.g. the
    /// model it serves is not the spec's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The Slurm job and step it ran in (None off Slurm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmJob>,
    /// The other ranks of a multi-node server (`server.nodes`), rank 1 first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankLaunch>,
    /// The model's `config.json` as read when the server started, for grading its points
    /// against the hardware (None in runs that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_config: Option<ModelConfigRecord>,
}

/// The model's Hugging Face `config.json`, kept in the run so the report grades offline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelConfigRecord {
    /// Where it was read: `spec file models/k2.json`, `inline in the spec`, `local:/models/x/config.json`.
    pub origin: String,
    /// The config as read (a JSON object); None when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
    /// Why it could not be read, and how to give it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// The GPU the config came with (a simulator profile's `facts.gpu`, a catalogue id): what
    /// the run is graded against when the spec names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}

/// A Slurm job as servebench saw it: its accounting, for meta.json and the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmJob {
    /// The job id (`sbatch --parsable`).
    pub job_id: u64,
    /// The job's name (`servebench-<run>-<group>`).
    pub job_name: String,
    /// The server's step in the job (`12.0`), once launched.
    #[serde(default)]
    pub step: Option<String>,
    #[serde(default)]
    pub partition: Option<String>,
    /// The allocated nodes as Slurm writes them (`gpu[01-02]`).
    #[serde(default)]
    pub node_list: Option<String>,
    /// Each node, expanded (`scontrol show hostnames`); rank 0 runs on the first.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Seconds from submission until the job started running.
    #[serde(default)]
    pub queued_s: Option<f64>,
    /// The job's last state seen: `RUNNING`, `COMPLETED`, `CANCELLED`, `TIMEOUT`,
    /// `PREEMPTED`, `NODE_FAIL`, `OUT_OF_MEMORY`, ...
    #[serde(default)]
    pub state: Option<String>,
    /// Slurm's reason with that state (`TimeLimit`, `Priority`, ...; None for `None`).
    #[serde(default)]
    pub reason: Option<String>,
    /// The job's exit code as Slurm writes it (`0:15`: exit status, then signal).
    #[serde(default)]
    pub exit_code: Option<String>,
    /// Where `state` came from: `sacct` (accounting), or `scontrol` when the cluster keeps no
    /// accounting (`sacct` then says so).
    #[serde(default)]
    pub accounting: Option<String>,
    /// True once servebench released the allocation (or found it ended).
    #[serde(default)]
    pub ended: bool,
    /// The login node Slurm's commands ran on (`user@host:port`, as the spec's
    /// `host.slurm.login` connects); None when they ran on the runner's machine.
    /// `servebench down` cancels the job there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
}

/// A Slurm job the run submitted, recorded (`slurm-jobs.jsonl`) as soon as `sbatch` gave its
/// id, before the job runs: `servebench down` cancels it even when the runner died while it
/// waited in the queue, before any server of it was recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubmittedJob {
    /// The server group it was submitted for (`run` for the run's one allocation).
    pub group: String,
    pub job_id: u64,
    pub job_name: String,
    /// The login node Slurm's commands ran on (as [`SlurmJob::login`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
}

/// What a server offers, found by asking it (never assumed from the engine's name): which
/// identity, cache-reset, tokenize and metrics endpoints answered, and what they said.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSurface {
    /// Identity endpoints that answered: `/server_info`, `/v1/models`, `/props`, `/version`.
    #[serde(default)]
    pub identity: Vec<String>,
    /// Model names the server serves (`/v1/models` ids, or `/props` model path).
    #[serde(default)]
    pub models: Vec<String>,
    /// The server's version, when an identity endpoint gave one.
    #[serde(default)]
    pub version: Option<String>,
    /// The longest prompt, in tokens, the server accepts (SGLang `max_req_input_len`, else
    /// the context length from `/server_info`, `/v1/models` `max_model_len` or llama.cpp's
    /// per-slot `n_ctx`); None when no endpoint said.
    #[serde(default)]
    pub context_length: Option<u64>,
    /// How its prefix cache is emptied before a cold point; None when it offers no way.
    #[serde(default)]
    pub cache_reset: Option<CacheReset>,
    /// The endpoint that counts a prompt's tokens without generating (`/v1/tokenize`,
    /// `/tokenize`), and its request shape.
    #[serde(default)]
    pub tokenize: Option<Tokenize>,
    /// `/metrics` answered with Prometheus text.
    #[serde(default)]
    pub metrics: bool,
    /// The server said (SGLang's `/server_info` `enable_cache_report: true`) that its OpenAI
    /// usage reports cached tokens, and SGLang leaves `prompt_tokens_details` out when the count
    /// is 0: an answered usage without it is a reported 0, not a missing count.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached_tokens_omitted_when_zero: bool,
    /// The reasoning parser the server says it runs (SGLang's `/server_info`
    /// `reasoning_parser`): how a `url:` server's thinking is told from its answer on the text
    /// APIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_parser: Option<String>,
    /// What was looked for and not found, and what that means (e.g. vLLM's cache reset needs
    /// `VLLM_SERVER_DEV_MODE=1`).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A way to empty a server's prefix cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum CacheReset {
    /// SGLang's `/flush_cache` (400 while requests run: retried).
    FlushCache,
    /// vLLM's `POST /reset_prefix_cache` (`{"success": false}` while blocks are held: retried).
    ResetPrefixCache,
    /// llama.cpp's per-slot erase, `POST /slots/{id}?action=erase`, for each slot.
    SlotErase { slots: Vec<u32> },
}

impl std::fmt::Display for CacheReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheReset::FlushCache => f.write_str("/flush_cache"),
            CacheReset::ResetPrefixCache => f.write_str("/reset_prefix_cache"),
            CacheReset::SlotErase { slots } => write!(
                f,
                "/slots/{{id}}?action=erase for {} slot{}",
                slots.len(),
                if slots.len() == 1 { "" } else { "s" }
            ),
        }
    }
}

/// A tokenize endpoint and the body it takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tokenize {
    /// `POST /v1/tokenize {"prompt"}` (SGLang) -> `count`.
    V1Prompt,
    /// `POST /tokenize {"prompt"}` (vLLM) -> `count` or `tokens`.
    Prompt,
    /// `POST /tokenize {"content", "add_special": true}` (llama.cpp) -> `tokens`.
    Content,
}
