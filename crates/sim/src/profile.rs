//! Timing profiles: data files that say how long the simulated GPU takes.
//!
//! Profiles ship in `profiles/*.yaml` and are embedded in the binary, so `--profile fast` works
//! from any directory; `--profile path/to/file.yaml` loads a file instead.

use serde::Deserialize;
use std::time::Duration;

/// Profiles embedded in the binary: (name, YAML text).
pub(crate) const BUILTIN: &[(&str, &str)] = &[
    ("fast", include_str!("../profiles/fast.yaml")),
    ("fast-spec", include_str!("../profiles/fast-spec.yaml")),
    (
        "h100-llama8b",
        include_str!("../profiles/h100-llama8b.yaml"),
    ),
    (
        "kimi-k2.6-8x-rtxpro6000",
        include_str!("../profiles/kimi-k2.6-8x-rtxpro6000.yaml"),
    ),
    (
        "l4-qwen2.5-0.5b",
        include_str!("../profiles/l4-qwen2.5-0.5b.yaml"),
    ),
];

/// A timing profile. Durations are model time, multiplied by `time_scale`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name, shown in `--help` and `/server_info`.
    pub name: String,
    /// One line saying what the profile models.
    #[serde(default)]
    pub description: String,
    /// Multiplier on every modelled duration (0.1 = ten times faster than written).
    #[serde(default = "one")]
    pub time_scale: f64,
    /// Seconds from start-up until `/health` answers 200 and the ready line is logged.
    pub warmup_s: f64,
    /// Seconds SGLang's `/health` sleeps between looks at its one-token generation (1 s in
    /// SGLang, so every answer takes at least this).
    #[serde(default = "one")]
    pub health_poll_s: f64,
    /// Context length in tokens when `--context-length` is not given.
    pub context_length: u64,
    /// Default for `--max-running-requests`.
    pub max_running_requests: u64,
    /// Milliseconds from a request's arrival until the scheduler may admit it: the API
    /// server's own work (parsing, tokenizing), not GPU time, so requests overlap in it.
    #[serde(default)]
    pub frontend_ms: f64,
    /// Default for `--chunked-prefill-size` (tokens; -1 disables chunking).
    pub chunked_prefill_size: i64,
    /// The memory model that sizes the KV pool when `--max-total-tokens` is not given.
    pub memory: MemoryModel,
    /// Prefill iteration cost.
    pub prefill: PrefillCost,
    /// Decode step cost.
    pub decode: DecodeCost,
    /// Speculative decoding; used when `enabled` or when `--speculative-algorithm` is given.
    #[serde(default)]
    pub speculative: Option<SpecModel>,
    /// A prefill batch with more new tokens than this crashes the server with SGLang's
    /// out-of-memory log lines and a non-zero exit. None = never.
    #[serde(default)]
    pub oom_prefill_tokens: Option<u64>,
    /// Milliseconds `/stop_profile` takes to write its trace before it answers (a slow
    /// trace export, to test a runner that cannot wait for it). None = at once.
    #[serde(default)]
    pub profiler_stop_ms: Option<f64>,
    /// Seed for speculative accept-length draws and generated tokens.
    #[serde(default)]
    pub seed: u64,
    /// Wrong output on purpose, to test output validity checks (none by default).
    #[serde(default)]
    pub faults: Faults,
    /// The model and GPU the profile models, for grading a run of it against the hardware's
    /// bound (the simulator itself does not read them).
    #[serde(default)]
    pub facts: Option<ProfileFacts>,
    /// A thinking model: each request's first output tokens are thinking (none by default).
    #[serde(default)]
    pub thinking: Thinking,
}

/// What a profile models: the model's Hugging Face `config.json` and the GPU, so a run of the
/// profile is graded against the bound as a run on that hardware would be.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProfileFacts {
    /// A GPU catalogue id (`h100-sxm`, `rtx-pro-6000`; `servebench bound --help` lists them).
    pub gpu: String,
    /// Tensor-parallel ranks the timings are for (1 by default; a run's own `--tp-size` is
    /// what its grade uses).
    #[serde(default = "one_rank")]
    pub tp: u32,
    /// The model's `config.json`, its fields inline.
    pub model_config: serde_json::Map<String, serde_json::Value>,
}

/// How long a thinking model thinks: a request's first `tokens` output tokens (give or take
/// `spread`, drawn per request from its id) are thinking, written between `<think>` and
/// `</think>`, and the answer follows. A request with fewer `max_tokens` runs out while
/// thinking. `--sim-thinking-tokens` overrides `tokens`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    #[serde(default)]
    pub tokens: u64,
    #[serde(default)]
    pub spread: u64,
}

/// Output faults: the simulator answers garbage (`!` tokens, like vLLM #42426 past a context
/// length) where these say, and right everywhere else.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// A prompt longer than this many tokens is answered with garbage only.
    #[serde(default)]
    pub garbage_past_tokens: Option<u64>,
    /// Tokens decoded while more than this many requests run in the batch are garbage.
    #[serde(default)]
    pub garbage_above_batch: Option<u64>,
}

impl Faults {
    /// Whether a prompt of `tokens` is answered with garbage.
    pub(crate) fn garbled_prompt(&self, tokens: u64) -> bool {
        self.garbage_past_tokens.is_some_and(|n| tokens > n)
    }
}

/// GPU memory, used to derive the KV pool size like SGLang does.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryModel {
    /// GB of memory per GPU.
    pub gpu_gb: f64,
    /// GB of model weights, split evenly over tensor-parallel ranks.
    pub weight_gb: f64,
    /// Bytes of KV cache per token, split evenly over tensor-parallel ranks.
    pub kv_bytes_per_token: f64,
    /// Default for `--mem-fraction-static`.
    pub mem_fraction_static: f64,
    /// GB reported for CUDA graphs in `/server_info`.
    #[serde(default)]
    pub graph_gb: f64,
    /// Prefill activation spikes against the memory left outside the static pool; absent =
    /// spikes never run out of memory.
    #[serde(default)]
    pub activation: Option<ActivationModel>,
}

/// Activation memory of a prefill iteration (see `sim::memory`). Free memory per GPU for
/// activations = `gpu_gb` x (1 - mem_fraction_static) - `runtime_overhead_mib`; an iteration's
/// spike = `bytes_per_token` x new tokens + `bytes_per_token_ctx` x new tokens x context length
/// at the end of the chunk, summed over the batch.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivationModel {
    /// MiB per GPU the runtime holds outside the static pool (CUDA context, CUDA graphs, NCCL).
    pub runtime_overhead_mib: f64,
    /// Bytes per GPU per new token (hidden states, MoE buffers).
    pub bytes_per_token: f64,
    /// Bytes per GPU per (new token x context token): attention workspace.
    #[serde(default)]
    pub bytes_per_token_ctx: f64,
}

/// Prefill iteration time = `base_ms` + `per_token_us` x new tokens
/// + `attention_ns` x sum over new tokens of their position in the context.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefillCost {
    /// Milliseconds per prefill iteration.
    pub base_ms: f64,
    /// Microseconds per new (uncached) prompt token.
    pub per_token_us: f64,
    /// Nanoseconds per (new token, context position) pair: the quadratic attention term.
    pub attention_ns: f64,
}

/// Decode step time = `base_ms` + `per_seq_us` x batch size + `per_ctx_token_ns` x context tokens,
/// and never under `min_step_ms`.
/// A profile gives `base_ms` and `per_ctx_token_ns` directly, or declares the memory traffic they
/// come from (`bandwidth:`), which a grader can then recover from a context sweep.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "DecodeCostSpec")]
pub struct DecodeCost {
    /// Milliseconds per decode step.
    pub base_ms: f64,
    /// Microseconds per running request in the batch.
    pub per_seq_us: f64,
    /// Nanoseconds per context token (prompt + generated) summed over the batch.
    pub per_ctx_token_ns: f64,
    /// The declared memory traffic `base_ms` and `per_ctx_token_ns` were derived from.
    pub bandwidth: Option<DecodeBandwidth>,
    /// No decode step is shorter (milliseconds, before the verify overhead): the weights' read
    /// at the GPU's bandwidth, where a line fitted at long contexts would fall below it at
    /// short ones. 0: no such floor.
    pub min_step_ms: f64,
}

/// A decode step as the reads it does, per GPU: the weights once a step and each token of
/// context's KV cache, each at a declared fraction of the GPU's peak bandwidth. `base_ms` =
/// `weight_bytes` / (`peak_gb_s` x `weight_efficiency`) + `overhead_ms`; `per_ctx_token_ns` =
/// `kv_bytes_per_token` / (`peak_gb_s` x `kv_efficiency`) (bytes over GB/s is nanoseconds).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DecodeBandwidth {
    /// The GPU's peak memory bandwidth, GB/s (its datasheet's).
    pub peak_gb_s: f64,
    /// Weight bytes each GPU reads per decode step.
    pub weight_bytes: f64,
    /// Fraction of peak the weight read reaches (0 to 1].
    pub weight_efficiency: f64,
    /// KV-cache bytes per token of context each GPU reads per step.
    pub kv_bytes_per_token: f64,
    /// Fraction of peak attention reads the cache at (0 to 1].
    pub kv_efficiency: f64,
    /// Milliseconds per step beyond the reads (launches, sampling).
    #[serde(default)]
    pub overhead_ms: f64,
}

impl DecodeBandwidth {
    /// The effective bandwidth the KV cache is read at, GB/s.
    pub(crate) fn kv_read_gb_s(&self) -> f64 {
        self.peak_gb_s * self.kv_efficiency
    }

    /// The effective bandwidth the weights are read at, GB/s.
    pub(crate) fn weight_read_gb_s(&self) -> f64 {
        self.peak_gb_s * self.weight_efficiency
    }

    fn problem(&self) -> Option<&'static str> {
        let positive = [self.peak_gb_s, self.weight_bytes, self.kv_bytes_per_token];
        let fractions = [self.weight_efficiency, self.kv_efficiency];
        if !positive.iter().all(|x| x.is_finite() && *x > 0.0) {
            return Some(
                "decode.bandwidth: peak_gb_s, weight_bytes and kv_bytes_per_token must be positive numbers",
            );
        }
        if !fractions
            .iter()
            .all(|x| x.is_finite() && *x > 0.0 && *x <= 1.0)
        {
            return Some(
                "decode.bandwidth: weight_efficiency and kv_efficiency must be fractions of peak, over 0 and at most 1",
            );
        }
        if !(self.overhead_ms.is_finite() && self.overhead_ms >= 0.0) {
            return Some("decode.bandwidth.overhead_ms must be a non-negative number");
        }
        None
    }
}

/// `decode:` as written: the two costs, or the bandwidth they come from (not both).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeCostSpec {
    #[serde(default)]
    base_ms: Option<f64>,
    per_seq_us: f64,
    #[serde(default)]
    per_ctx_token_ns: Option<f64>,
    #[serde(default)]
    bandwidth: Option<DecodeBandwidth>,
    #[serde(default)]
    min_step_ms: f64,
}

impl TryFrom<DecodeCostSpec> for DecodeCost {
    type Error = String;

    fn try_from(d: DecodeCostSpec) -> Result<Self, Self::Error> {
        let (base_ms, per_ctx_token_ns) = match (&d.bandwidth, d.base_ms, d.per_ctx_token_ns) {
            (Some(b), None, None) => {
                if let Some(problem) = b.problem() {
                    return Err(problem.into());
                }
                (
                    b.weight_bytes / (b.weight_read_gb_s() * 1e9) * 1e3 + b.overhead_ms,
                    b.kv_bytes_per_token / b.kv_read_gb_s(),
                )
            }
            (Some(_), _, _) => {
                return Err("decode: give either `bandwidth:` or base_ms and per_ctx_token_ns, not both (the bandwidth derives them)".into());
            }
            (None, Some(base), Some(ctx)) => (base, ctx),
            (None, _, _) => {
                return Err(
                    "decode: give base_ms and per_ctx_token_ns, or `bandwidth:` to derive them"
                        .into(),
                );
            }
        };
        if !(d.min_step_ms.is_finite() && d.min_step_ms >= 0.0) {
            return Err("decode.min_step_ms must be a non-negative number".into());
        }
        Ok(DecodeCost {
            base_ms,
            per_seq_us: d.per_seq_us,
            per_ctx_token_ns,
            bandwidth: d.bandwidth,
            min_step_ms: d.min_step_ms,
        })
    }
}

/// Speculative decoding: each verify step emits 1..=[`max_tokens`](SpecModel::max_tokens)
/// tokens per request, on average [`accept_mean_at`](SpecModel::accept_mean_at) its context,
/// and costs [`verify_overhead_ms`](SpecModel::verify_overhead_ms) on top of a plain decode
/// step.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecModel {
    /// Tokens verified per request per step (SGLang `--speculative-num-draft-tokens`): the
    /// verify pass's width, which its cost grows with.
    pub num_draft_tokens: u32,
    /// Draft steps per verify (SGLang `--speculative-num-steps`): at most this + 1 tokens are
    /// accepted per step. None = `num_draft_tokens - 1` (a chain: every verified token can be
    /// accepted).
    #[serde(default)]
    pub num_steps: Option<u32>,
    /// Mean tokens emitted per request per step (the bonus token included), when
    /// `accept_length_by_context` is empty.
    pub accept_length_mean: f64,
    /// Mean tokens per step against the request's context (prompt + generated tokens):
    /// `[context, mean]` points in increasing context order, interpolated linearly between
    /// them and held flat past either end. Empty = `accept_length_mean` at every context.
    #[serde(default)]
    pub accept_length_by_context: Vec<[f64; 2]>,
    /// Extra milliseconds per verify step for drafting and verifying, whatever the batch.
    #[serde(default)]
    pub step_overhead_ms: f64,
    /// Extra microseconds per verified token per request in the batch: the verify pass's work,
    /// so a step of `b` requests costs `b` x `num_draft_tokens` x this more, and speculation
    /// stops paying once the batch is large.
    #[serde(default)]
    pub per_draft_token_us: f64,
    /// On even without `--speculative-algorithm`.
    #[serde(default)]
    pub enabled: bool,
}

impl Default for SpecModel {
    fn default() -> Self {
        SpecModel {
            num_draft_tokens: 4,
            num_steps: None,
            accept_length_mean: 2.5,
            accept_length_by_context: Vec::new(),
            step_overhead_ms: 0.0,
            per_draft_token_us: 0.0,
            enabled: false,
        }
    }
}

impl SpecModel {
    /// Most tokens one verify step emits per request: the draft depth + 1, at most the tokens
    /// verified.
    pub(crate) fn max_tokens(&self) -> u32 {
        let depth = self
            .num_steps
            .map_or(self.num_draft_tokens, |s| s.saturating_add(1));
        depth.min(self.num_draft_tokens).max(1)
    }

    /// Mean tokens per step for a request holding `context` tokens, within 1..=max_tokens.
    pub(crate) fn accept_mean_at(&self, context: u64) -> f64 {
        let mean = interpolate(&self.accept_length_by_context, context as f64)
            .unwrap_or(self.accept_length_mean);
        mean.clamp(1.0, f64::from(self.max_tokens()))
    }

    /// Milliseconds a verify step of `batch` requests adds to the plain decode step.
    pub fn verify_overhead_ms(&self, batch: u64) -> f64 {
        self.step_overhead_ms
            + self.per_draft_token_us * f64::from(self.num_draft_tokens) * batch as f64 / 1e3
    }

    /// Why the model is unusable, if it is.
    fn problem(&self) -> Option<&'static str> {
        let max = f64::from(self.max_tokens());
        let in_range = |m: f64| m.is_finite() && (1.0..=max).contains(&m);
        if self.num_draft_tokens == 0 || self.num_steps == Some(0) {
            return Some("speculative.num_draft_tokens and num_steps must be at least 1");
        }
        if !in_range(self.accept_length_mean) {
            return Some(
                "speculative.accept_length_mean must be between 1 and the most tokens a step emits (num_steps + 1, at most num_draft_tokens)",
            );
        }
        let points = &self.accept_length_by_context;
        if points.len() > 64
            || points
                .iter()
                .any(|[c, m]| !(c.is_finite() && *c >= 0.0 && in_range(*m)))
            || points.windows(2).any(|w| w[1][0] <= w[0][0])
        {
            return Some(
                "speculative.accept_length_by_context must list at most 64 [context, mean] points, contexts increasing from 0 up, means between 1 and the most tokens a step emits",
            );
        }
        if ![self.step_overhead_ms, self.per_draft_token_us]
            .iter()
            .all(|x| x.is_finite() && *x >= 0.0)
        {
            return Some(
                "speculative.step_overhead_ms and per_draft_token_us must be non-negative numbers",
            );
        }
        None
    }
}

/// The piecewise-linear function through `points` at `x`, flat past either end; None without
/// points.
fn interpolate(points: &[[f64; 2]], x: f64) -> Option<f64> {
    let first = points.first()?;
    let last = points[points.len() - 1];
    if x <= first[0] {
        return Some(first[1]);
    }
    if x >= last[0] {
        return Some(last[1]);
    }
    points.windows(2).find_map(|w| {
        let ([x0, y0], [x1, y1]) = (w[0], w[1]);
        (x >= x0 && x <= x1).then(|| y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    })
}

fn one() -> f64 {
    1.0
}

fn one_rank() -> u32 {
    1
}

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Neither a built-in name nor a readable file.
    #[error("unknown profile {0:?}: use one of {names} or a path to a YAML file", names = builtin_names().join(", "))]
    Unknown(String),
    /// The file could not be read.
    #[error("cannot read profile {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The YAML does not describe a profile.
    #[error("invalid profile {path}: {message}")]
    Invalid {
        /// The name or path given.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Names of the embedded profiles.
pub(crate) fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

impl Profile {
    /// Loads a built-in profile by name, or a YAML file when `name_or_path` is not a built-in name.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(name_or_path, text);
        }
        let path = std::path::Path::new(name_or_path);
        if !path.exists() {
            return Err(ProfileError::Unknown(name_or_path.to_string()));
        }
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: name_or_path.to_string(),
            source,
        })?;
        Self::parse(name_or_path, &text)
    }

    /// Parses profile YAML; `origin` names it in errors.
    pub(crate) fn parse(origin: &str, text: &str) -> Result<Profile, ProfileError> {
        let p: Profile = serde_saphyr::from_str(text).map_err(|e| ProfileError::Invalid {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        if !(p.time_scale > 0.0 && p.time_scale.is_finite()) {
            return Err(ProfileError::Invalid {
                path: origin.to_string(),
                message: "time_scale must be a positive number".into(),
            });
        }
        if let Some(message) = p.speculative.as_ref().and_then(SpecModel::problem) {
            return Err(ProfileError::Invalid {
                path: origin.to_string(),
                message: message.into(),
            });
        }
        if let Some(a) = &p.memory.activation
            && ![
                a.runtime_overhead_mib,
                a.bytes_per_token,
                a.bytes_per_token_ctx,
            ]
            .iter()
            .all(|x| x.is_finite() && *x >= 0.0)
        {
            return Err(ProfileError::Invalid {
                path: origin.to_string(),
                message: "memory.activation values must be non-negative numbers".into(),
            });
        }
        Ok(p)
    }

    /// The built-in `fast` profile.
    pub fn fast() -> Profile {
        Self::load("fast").expect("the embedded fast profile parses")
    }

    /// Scales a model duration in milliseconds to wall-clock time.
    fn scaled_ms(&self, ms: f64) -> Duration {
        Duration::from_secs_f64((ms * self.time_scale / 1000.0).max(0.0))
    }

    /// How long `/stop_profile` takes before it writes and answers ([`profiler_stop_ms`](Self::profiler_stop_ms), scaled).
    pub(crate) fn profiler_stop(&self) -> Duration {
        self.scaled_ms(self.profiler_stop_ms.unwrap_or(0.0))
    }

    /// The front end's delay before a request can be scheduled.
    pub(crate) fn frontend(&self) -> Duration {
        self.scaled_ms(self.frontend_ms)
    }

    /// Wall-clock warmup delay.
    /// [`health_poll_s`](Self::health_poll_s), scaled.
    pub(crate) fn health_poll(&self) -> Duration {
        self.scaled_ms(self.health_poll_s * 1000.0)
    }

    pub fn warmup(&self) -> Duration {
        self.scaled_ms(self.warmup_s * 1000.0)
    }

    /// Time of one prefill iteration. `segments` lists, per request in the batch, the context
    /// position of its first new token and how many new tokens it computes: cached tokens are
    /// not recomputed but are attended to, hence the start offset.
    pub fn prefill_time(&self, segments: &[(u64, u64)]) -> Duration {
        let c = &self.prefill;
        let mut new = 0.0;
        let mut pairs = 0.0;
        for &(start, n) in segments {
            let (start, n) = (start as f64, n as f64);
            new += n;
            // sum of positions start..start+n-1
            pairs += n * start + n * (n - 1.0) / 2.0;
        }
        self.scaled_ms(c.base_ms + c.per_token_us * new / 1e3 + c.attention_ns * pairs / 1e6)
    }

    /// Time of one decode step for `batch` requests holding `ctx_tokens` tokens in total.
    pub fn decode_time(&self, batch: u64, ctx_tokens: u64, spec_overhead_ms: f64) -> Duration {
        let c = &self.decode;
        let line = c.base_ms
            + c.per_seq_us * batch as f64 / 1e3
            + c.per_ctx_token_ns * ctx_tokens as f64 / 1e6;
        self.scaled_ms(line.max(c.min_step_ms) + spec_overhead_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The h100-llama8b profile declares its reads: Llama 3.1 8B's 16.06 GB of bf16 weights at
    /// 56.4% of an H100 SXM's 3,350 GB/s, and 131,072 KV bytes per token at 97.8%. Derived by
    /// hand: 16.06e9 / (3,350e9 x 0.564) = 8.500 ms; 131,072 / (3,350 x 0.978) = 40.0 ns.
    #[test]
    fn a_declared_bandwidth_gives_the_step_costs_it_implies() {
        let p = Profile::load("h100-llama8b").unwrap();
        let b = p.decode.bandwidth.as_ref().expect("declared");
        assert_eq!(b.peak_gb_s, 3350.0);
        assert!(
            (p.decode.base_ms - 8.5).abs() < 0.01,
            "{}",
            p.decode.base_ms
        );
        assert!(
            (p.decode.per_ctx_token_ns - 40.0).abs() < 0.05,
            "{}",
            p.decode.per_ctx_token_ns
        );
        let exact = 16.06e9 / (3350e9 * 0.564) * 1e3;
        assert!((p.decode.base_ms - exact).abs() < 1e-12);
        assert!((p.decode.per_ctx_token_ns - 131072.0 / (3350.0 * 0.978)).abs() < 1e-12);
    }

    #[test]
    fn a_decode_cost_given_twice_or_not_at_all_is_refused() {
        let base = Profile::fast();
        let with = |decode: &str| {
            let text = include_str!("../profiles/fast.yaml");
            let start = text.find("\ndecode:").expect("a decode block") + 1;
            let end = start + text[start..].find("\n# ").expect("a comment after decode");
            format!("{}{decode}{}", &text[..start], &text[end..])
        };
        let both = with(
            "decode: { base_ms: 1.0, per_seq_us: 0, per_ctx_token_ns: 1.0, bandwidth: { peak_gb_s: 100, weight_bytes: 1e9, weight_efficiency: 0.5, kv_bytes_per_token: 1000, kv_efficiency: 0.5 } }",
        );
        let err = Profile::parse("both", &both).unwrap_err().to_string();
        assert!(err.contains("not both"), "{err}");
        let neither = with("decode: { per_seq_us: 0 }");
        let err = Profile::parse("neither", &neither).unwrap_err().to_string();
        assert!(err.contains("give base_ms and per_ctx_token_ns"), "{err}");
        let over = with(
            "decode: { per_seq_us: 0, bandwidth: { peak_gb_s: 100, weight_bytes: 1e9, weight_efficiency: 1.5, kv_bytes_per_token: 1000, kv_efficiency: 0.5 } }",
        );
        let err = Profile::parse("over", &over).unwrap_err().to_string();
        assert!(err.contains("fractions of peak"), "{err}");
        // 1e9 bytes at 50 GB/s is 20 ms; 1,000 bytes at 50 GB/s is 20 ns.
        let ok = with(
            "decode: { per_seq_us: 0, bandwidth: { peak_gb_s: 100, weight_bytes: 1e9, weight_efficiency: 0.5, kv_bytes_per_token: 1000, kv_efficiency: 0.5, overhead_ms: 0.5 } }",
        );
        let p = Profile::parse("ok", &ok).unwrap();
        assert!((p.decode.base_ms - 20.5).abs() < 1e-9);
        assert!((p.decode.per_ctx_token_ns - 20.0).abs() < 1e-9);
        assert!(base.decode.bandwidth.is_none());
    }

    #[test]
    fn builtins_parse() {
        for name in builtin_names() {
            Profile::load(name).unwrap();
        }
    }

    #[test]
    fn fast_profile_is_fast() {
        let p = Profile::fast();
        let prefill = p.prefill_time(&[(0, 1000)]);
        assert!(prefill < Duration::from_millis(5), "{prefill:?}");
        let step = p.decode_time(1, 1000, 0.0);
        assert!(step >= Duration::from_millis(1) && step <= Duration::from_millis(2));
    }

    #[test]
    fn cached_prefix_is_attended_not_recomputed() {
        let p = Profile::load("h100-llama8b").unwrap();
        let cold = p.prefill_time(&[(0, 8000)]);
        let warm_tail = p.prefill_time(&[(8000, 100)]);
        let short = p.prefill_time(&[(0, 100)]);
        assert!(warm_tail > short && warm_tail < cold);
    }

    fn spec(yaml: &str) -> Result<SpecModel, ProfileError> {
        let base = BUILTIN[0].1;
        let text = format!("{base}\nspeculative:\n{yaml}");
        Profile::parse("test", &text).map(|p| p.speculative.unwrap())
    }

    #[test]
    fn accept_length_follows_the_context_table_flat_past_its_ends() {
        let s = Profile::load("fast-spec").unwrap().speculative.unwrap();
        assert_eq!(s.max_tokens(), 4);
        assert_eq!(s.accept_mean_at(0), 3.0);
        assert!((s.accept_mean_at(2048) - 2.5).abs() < 1e-12);
        assert!((s.accept_mean_at(10240) - 1.65).abs() < 1e-12);
        assert_eq!(s.accept_mean_at(100_000), 1.3);
    }

    #[test]
    fn verify_cost_grows_with_the_batch_and_the_tokens_verified() {
        let s = Profile::load("fast-spec").unwrap().speculative.unwrap();
        assert!((s.verify_overhead_ms(1) - (0.3 + 0.136)).abs() < 1e-12);
        assert!((s.verify_overhead_ms(16) - (0.3 + 0.034 * 4.0 * 16.0)).abs() < 1e-12);
    }

    #[test]
    fn the_fast_spec_profile_pays_at_batch_one_and_not_at_batch_sixteen() {
        // The profile's stated crossover: tokens per step x plain step / verify step.
        let p = Profile::load("fast-spec").unwrap();
        let s = p.speculative.clone().unwrap();
        let speedup = |b: u64, ctx: u64| {
            let plain = p.decode_time(b, b * ctx, 0.0).as_secs_f64();
            let verify = p
                .decode_time(b, b * ctx, s.verify_overhead_ms(b))
                .as_secs_f64();
            s.accept_mean_at(ctx) * plain / verify
        };
        assert!(speedup(1, 1056) > 1.9, "{}", speedup(1, 1056));
        assert!(speedup(8, 1056) > 1.0);
        assert!(speedup(16, 1056) < 1.0);
        assert!(speedup(1, 16384) < 1.0);
    }

    #[test]
    fn speculative_models_out_of_range_are_refused() {
        for bad in [
            "  num_draft_tokens: 4\n  accept_length_mean: 4.5\n",
            "  num_draft_tokens: 4\n  num_steps: 1\n  accept_length_mean: 2.5\n",
            "  num_draft_tokens: 4\n  accept_length_mean: 2\n  accept_length_by_context: [[100, 2], [50, 2]]\n",
            "  num_draft_tokens: 4\n  accept_length_mean: 2\n  accept_length_by_context: [[0, 0.5]]\n",
            "  num_draft_tokens: 4\n  accept_length_mean: 2\n  per_draft_token_us: -1\n",
        ] {
            assert!(spec(bad).is_err(), "{bad}");
        }
        let ok = spec("  num_draft_tokens: 8\n  num_steps: 3\n  accept_length_mean: 4\n").unwrap();
        assert_eq!(ok.max_tokens(), 4);
    }

    #[test]
    fn unknown_profile_names_builtins() {
        let e = Profile::load("nope").unwrap_err().to_string();
        assert!(e.contains("fast") && e.contains("h100-llama8b"), "{e}");
    }
}
