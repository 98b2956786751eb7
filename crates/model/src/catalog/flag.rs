//! The flag catalogue: every kind of warning a point can carry.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a point's flag says. Written to `points.jsonl` as its kebab-case name; a name this
/// version does not know (a run written by a newer one) is kept as [`FlagKind::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FlagKind {
    /// Under `as-is`, some requests reused cached prompt tokens (reported, not excluded).
    CacheHits,
    /// The server did not report cached tokens, so the cache policy could not be checked.
    CacheUnverified,
    /// A cold request reported cached tokens: excluded from the point's numbers.
    ColdCacheHit,
    /// A warm request found too little of its prompt cached: excluded.
    WarmCacheMiss,
    /// A request that had to find its group's shared prefix (or its session's history) cached
    /// found less: the server evicted, flushed or never cached it. Kept in the numbers.
    PrefixCacheMiss,
    /// A request found more cached than its group could have left there (another run's or
    /// point's prompts): excluded from the point's numbers.
    UnexpectedCacheHit,
    /// Two-point: the second request of a pair skipped prefill; its decode numbers are left out.
    CacheReuseSuspected,
    /// A headline metric's samples spread widely; the mean is less certain.
    HighVariance,
    /// Some requests met a stale connection (closed by the server while idle) and were sent again
    /// on a fresh one: not errors, measured from the second attempt.
    StaleConnections,
    /// The stream gave no per-chunk token counts and its chunks held several tokens: ITL is the
    /// gap per chunk, not per token.
    ItlPerChunk,
    /// The cache could not be flushed before the point.
    FlushFailed,
    /// Some requests failed.
    Errors,
    /// The run was interrupted during the point.
    Interrupted,
    /// A request record could not be written.
    WriteFailed,
    /// Prompt calibration ended outside its tolerance.
    Calibration,
    /// Prompt calibration failed, so the point sent no measured request.
    CalibrationFailed,
    /// The point's prompts could not be read.
    PromptError,
    /// A `load:` point's arrival schedule could not be made (its trace file unreadable, or
    /// too long), so it sent nothing.
    ScheduleFailed,
    /// The server died during the point.
    ServerCrashed,
    /// The server did not start for the point's group.
    ServerFailed,
    /// Skipped: a smaller point crashed the server (`on_failure: skip-larger`).
    Skipped,
    /// servebench's agent could not be started on the host.
    AgentFailed,
    /// servebench's agent on the host went silent or its stream broke.
    AgentLost,
    /// The agent sent lines that were not records.
    AgentGarbled,
    /// The point did not run to completion (implied by the record, shown by the report).
    Incomplete,
    /// A `load:` point whose client sent requests later than their schedule (lag p99 above
    /// `load.lag_limit`): its latencies describe the client, not the server.
    ClientLimited,
    /// A `load:` point stopped sending when its failed requests passed `stop.errors`.
    StoppedOnErrors,
    /// A point with `slo.targets` that does not meet them (informational: the numbers are
    /// right, the deployment is not within its SLO at this load).
    SloMissed,
    /// A point with `slo.targets` some of which had too few measured requests to be judged
    /// (a p99 needs 100): neither met nor missed (informational, like `slo-missed`).
    SloUnjudged,
    /// The server's own `/metrics` counters over the point (prompt or cached tokens, finished
    /// requests) differ from the client's records by more than 2%.
    ServerDisagrees,
    /// A thread or task of the client died during the point (the pacer, a request's task):
    /// part of its requests were never sent or never recorded, so the point failed.
    ClientFailed,
    /// The server stopped answering during the point (its process ended, or nothing listens
    /// at its address any more): no more requests were sent to it.
    ServerLost,
    /// A process of the launched server's group that had run for a while ended during the
    /// point and the server still answered its health check: a helper (a JIT compiler, a
    /// compile worker going idle), not a part it serves with, so the point went on
    /// (informational: the message names the processes).
    ServerPartEnded,
    /// A request's TTFT was shorter than the server's own prompt processing time for it: the
    /// client's send stamp came late (the client was descheduled), so that TTFT is too short.
    TtftBelowServer,
    /// Some request's bytes waited in the kernel for the client longer than that request's
    /// shortest gap between tokens: a read returns the newest bytes' arrival stamp, so tokens
    /// that arrived while the client was this late share the later one's time, and their TTFT
    /// and ITL are off by up to the wait.
    ClientReadLate,
    /// Speculative decoding ran but its mean accept length stayed under 1.1 tokens per verify
    /// step: every step pays for drafting and verifying and buys almost nothing over plain
    /// decoding (informational: the numbers are right, the draft model or its settings are not).
    SpecLowAcceptance,
    /// A GPU of the server's host reported clock event (throttle) reasons other than idle
    /// inside the measured window (power cap, thermal or hardware slowdown, a power brake,
    /// application clocks): the numbers describe a GPU running below its clocks.
    GpuThrottled,
    /// A GPU's free memory came within `telemetry.memory_margin_gib` of zero during the point:
    /// a little more context or concurrency may run out of memory (informational).
    GpuMemoryTight,
    /// The engine's profiler ran during the point's measured window (`profiler:`): its numbers
    /// include the profiler's overhead.
    Profiled,
    /// The point was to be profiled and was not (or its traces could not be kept): the
    /// numbers are not in doubt, the capture is (informational).
    ProfileFailed,
    /// `validity:` found the server's output wrong at this point: a known-answer canary was
    /// not answered, or the same greedy prompt answered under the point's load differed from
    /// its answer alone. The numbers measure a server that answers wrongly, so the point is
    /// degraded and kept out of capacity answers, Pareto frontiers and `compare` verdicts.
    InvalidOutput,
    /// `validity:` could not judge part of the point's output: the engine's greedy answers
    /// differed between two solo runs (not deterministic enough to compare under load), or a
    /// check's request failed or ran after the load ended (informational: nothing was found
    /// wrong).
    ValidityUnjudged,
    /// A routed deployment's router sent requests of a shared-prefix group (or a session's
    /// turns) to a worker that did not hold their prefix while another worker did: each such
    /// request prefilled the prefix again (informational: the numbers are what the routing
    /// gave; a cache-aware policy should keep this near zero).
    PrefixRoutedAway,
    /// A worker behind the router (`server.workers`, or a launched deployment's) answered its
    /// `/metrics` earlier in the point and then stopped answering: the router served the rest
    /// on fewer workers than the deployment has, so the point measured another deployment.
    WorkerLost,
    /// Some requests of a thinking model ran out of tokens (or were stopped) while thinking:
    /// they have no time to the first answer token, which the point's TTFA leaves out
    /// (informational: the numbers are right; `max_tokens` is short for this thinking).
    NoAnswer,
    /// The server streamed delta fields servebench does not know, with values: their text
    /// was counted neither as thinking nor as answer, so TTFT, TTFA and the token split may be
    /// wrong (a renamed field, as vLLM's `reasoning_content` became `reasoning`).
    UnknownStreamField,
    /// More than 5% of the point's requests that called a tool made an invalid call (a name
    /// not declared, arguments not JSON or not satisfying the tool's schema): the numbers
    /// measure a server whose calls cannot be used, so the point is degraded, as with invalid
    /// output.
    InvalidToolCalls,
    /// Some requests had most of their tokens after the first held back on the way (by a
    /// router or a proxy) and let go in one read: the gap between two reads is no decode time,
    /// so their decode speed is left out of the point's (informational: the rest is measured;
    /// with every request held back the point has no decode speed, and this says why).
    DecodeHeldBack,
    /// Some requests streamed more events than their chunk budget (4,096 + 4 per
    /// `max_tokens`): past it their tokens were folded into their last chunks, so their gaps
    /// between tokens (ITL, ICL) are not the stream's one by one.
    StreamBudget,
    /// Some requests' usage contradicted their stream or what they asked: more thinking
    /// tokens than output tokens, more output tokens than `max_tokens`, or no call under a
    /// `tool_choice` that requires one (`required`, a named function). The numbers measure
    /// output that cannot be right, so the point is degraded, as with invalid output.
    ImpossibleUsage,
    /// An agent session's turn did not re-send its previous turn's prompt exactly where the
    /// trace says it keeps it (a replay's history reconstruction trimmed or changed it, as
    /// AIPerf's did): the server could not find what the theoretical hit counts, so its hits
    /// and every latency that follows from them describe another workload. The message names
    /// the first turn where the history diverged.
    HistoryDiverged,
    /// Requests that re-sent text the server had just served (a theoretical hit of blocks)
    /// found none of it cached: the server's prefix cache served nothing (as vLLM's hybrid
    /// sliding-window models did, vllm #42948), while the prompts carried their history
    /// exactly. The numbers are right for this server; it is not caching.
    NoPrefixHits,
    /// A kind this version does not know.
    Other(String),
}

/// How a flag bears on the numbers next to it.
struct Entry {
    kind: FlagKind,
    name: &'static str,
    /// Describes the numbers (their spread, what a metric measured) rather than doubting them:
    /// the point is still compared and its chart marker stays solid.
    informational: bool,
    /// The report cell its marker sits in: next to the number it casts doubt on.
    cell: &'static str,
}

const CATALOGUE: &[Entry] = &[
    entry(FlagKind::CacheHits, "cache-hits", "ok_err"),
    entry(FlagKind::CacheUnverified, "cache-unverified", "ok_err"),
    // A cache hit in a cold run (or a miss in a warm one) shows in the cached column, and makes
    // TTFT and prefill speed wrong.
    entry(FlagKind::ColdCacheHit, "cold-cache-hit", "cached"),
    entry(FlagKind::WarmCacheMiss, "warm-cache-miss", "cached"),
    entry(FlagKind::PrefixCacheMiss, "prefix-cache-miss", "cached"),
    entry(
        FlagKind::UnexpectedCacheHit,
        "unexpected-cache-hit",
        "cached",
    ),
    entry(
        FlagKind::CacheReuseSuspected,
        "cache-reuse-suspected",
        "decode",
    ),
    Entry {
        kind: FlagKind::HighVariance,
        name: "high-variance",
        informational: true,
        cell: "ok_err",
    },
    // TTFT, TPOT and decode speed stay exact, so the point is still compared; the marker sits
    // on the ITL cell, whose values are per chunk.
    Entry {
        kind: FlagKind::ItlPerChunk,
        name: "itl-per-chunk",
        informational: true,
        cell: "itl",
    },
    // Not errors: the client's connection, retried; the numbers are the second attempt's.
    Entry {
        kind: FlagKind::StaleConnections,
        name: "stale-connections",
        informational: true,
        cell: "ok_err",
    },
    entry(FlagKind::FlushFailed, "flush-failed", "ok_err"),
    entry(FlagKind::Errors, "errors", "ok_err"),
    entry(FlagKind::Interrupted, "interrupted", "ok_err"),
    entry(FlagKind::WriteFailed, "write-failed", "ok_err"),
    entry(FlagKind::Calibration, "calibration", "prompt_tok"),
    entry(FlagKind::CalibrationFailed, "calibration-failed", "ok_err"),
    entry(FlagKind::PromptError, "prompt-error", "ok_err"),
    entry(FlagKind::ScheduleFailed, "schedule-failed", "ok_err"),
    entry(FlagKind::ServerCrashed, "server-crashed", "ok_err"),
    entry(FlagKind::ServerFailed, "server-failed", "ok_err"),
    entry(FlagKind::Skipped, "skipped", "ok_err"),
    entry(FlagKind::AgentFailed, "agent-failed", "ok_err"),
    entry(FlagKind::AgentLost, "agent-lost", "ok_err"),
    entry(FlagKind::AgentGarbled, "agent-garbled", "ok_err"),
    entry(FlagKind::Incomplete, "incomplete", "ok_err"),
    entry(FlagKind::ClientLimited, "client-limited", "ok_err"),
    entry(FlagKind::StoppedOnErrors, "stopped-on-errors", "ok_err"),
    Entry {
        kind: FlagKind::SloMissed,
        name: "slo-missed",
        informational: true,
        cell: "ok_err",
    },
    Entry {
        kind: FlagKind::SloUnjudged,
        name: "slo-unjudged",
        informational: true,
        cell: "ok_err",
    },
    entry(FlagKind::ServerDisagrees, "server-disagrees", "ok_err"),
    entry(FlagKind::ClientFailed, "client-failed", "ok_err"),
    entry(FlagKind::ServerLost, "server-lost", "ok_err"),
    Entry {
        kind: FlagKind::ServerPartEnded,
        name: "server-part-ended",
        informational: true,
        cell: "ok_err",
    },
    entry(FlagKind::TtftBelowServer, "ttft-below-server", "ttft"),
    // Informational: it sizes the client's own error (the wait) rather than voiding the
    // point, and a loaded machine raises it on fast profiles.
    Entry {
        kind: FlagKind::SpecLowAcceptance,
        name: "spec-low-acceptance",
        informational: true,
        cell: "decode",
    },
    Entry {
        kind: FlagKind::ClientReadLate,
        name: "client-read-late",
        informational: true,
        cell: "ttft",
    },
    entry(FlagKind::GpuThrottled, "gpu-throttled", "ok_err"),
    // The numbers are right; the headroom is what it warns of.
    Entry {
        kind: FlagKind::GpuMemoryTight,
        name: "gpu-memory-tight",
        informational: true,
        cell: "ok_err",
    },
    // The profiler slows the server: the point's numbers are not its unprofiled speed.
    entry(FlagKind::Profiled, "profiled", "ok_err"),
    Entry {
        kind: FlagKind::ProfileFailed,
        name: "profile-failed",
        informational: true,
        cell: "ok_err",
    },
    entry(FlagKind::InvalidOutput, "invalid-output", "ok_err"),
    Entry {
        kind: FlagKind::PrefixRoutedAway,
        name: "prefix-routed-away",
        informational: true,
        cell: "cached",
    },
    Entry {
        kind: FlagKind::ValidityUnjudged,
        name: "validity-unjudged",
        informational: true,
        cell: "ok_err",
    },
    entry(FlagKind::WorkerLost, "worker-lost", "ok_err"),
    Entry {
        kind: FlagKind::NoAnswer,
        name: "no-answer",
        informational: true,
        cell: "ttft",
    },
    entry(FlagKind::UnknownStreamField, "unknown-stream-field", "ttft"),
    entry(FlagKind::InvalidToolCalls, "invalid-tool-calls", "ok_err"),
    Entry {
        kind: FlagKind::DecodeHeldBack,
        name: "decode-held-back",
        informational: true,
        cell: "decode",
    },
    entry(FlagKind::StreamBudget, "stream-budget", "itl"),
    entry(FlagKind::ImpossibleUsage, "impossible-usage", "ok_err"),
    // The replay sent another workload than its trace: its hits (and so its TTFTs) are not
    // the trace's.
    entry(FlagKind::HistoryDiverged, "history-diverged", "cached"),
    // The server's behaviour, measured as it is: informational, next to the cached column.
    Entry {
        kind: FlagKind::NoPrefixHits,
        name: "no-prefix-hits",
        informational: true,
        cell: "cached",
    },
];

const fn entry(kind: FlagKind, name: &'static str, cell: &'static str) -> Entry {
    Entry {
        kind,
        name,
        informational: false,
        cell,
    }
}

impl FlagKind {
    /// Every known kind's name, in catalogue order (for `expect: flag:` and its hints).
    pub(crate) fn names() -> impl Iterator<Item = &'static str> {
        CATALOGUE.iter().map(|e| e.name)
    }

    /// The kind named `name`; unknown names become [`FlagKind::Other`].
    pub(crate) fn from_name(name: &str) -> FlagKind {
        CATALOGUE
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.kind.clone())
            .unwrap_or_else(|| FlagKind::Other(name.to_string()))
    }

    fn entry(&self) -> Option<&'static Entry> {
        CATALOGUE.iter().find(|e| &e.kind == self)
    }

    /// The kebab-case name files and specs use.
    pub fn name(&self) -> &str {
        match self {
            FlagKind::Other(s) => s,
            known => known.entry().map_or("", |e| e.name),
        }
    }

    /// True when the flag describes the numbers rather than doubting them.
    pub fn is_informational(&self) -> bool {
        self.entry().is_some_and(|e| e.informational)
    }

    /// True when the flag says the server's output was wrong at the point: its numbers are
    /// no answer to what the deployment serves, so Pareto frontiers leave the point out
    /// (its degraded status keeps it out of capacity answers, and, like every flag that is
    /// not informational, out of `compare` verdicts).
    pub fn voids_output(&self) -> bool {
        matches!(
            self,
            FlagKind::InvalidOutput | FlagKind::InvalidToolCalls | FlagKind::ImpossibleUsage
        )
    }

    /// The report cell the flag's marker sits in (`cached`, `prompt_tok`, `decode`, `itl`,
    /// `ok_err`).
    pub fn cell(&self) -> &'static str {
        self.entry().map_or("ok_err", |e| e.cell)
    }
}

impl std::fmt::Display for FlagKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for FlagKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for FlagKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(FlagKind::from_name(&name))
    }
}

impl From<&str> for FlagKind {
    fn from(name: &str) -> FlagKind {
        FlagKind::from_name(name)
    }
}

impl PartialEq<&str> for FlagKind {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_kept() {
        for name in FlagKind::names() {
            let kind = FlagKind::from_name(name);
            assert!(!matches!(kind, FlagKind::Other(_)), "{name}");
            assert_eq!(kind.name(), name);
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<FlagKind>(&json).unwrap(), kind);
        }
        let future: FlagKind = serde_json::from_str("\"from-the-future\"").unwrap();
        assert_eq!(future, FlagKind::Other("from-the-future".into()));
        assert_eq!(
            serde_json::to_string(&future).unwrap(),
            "\"from-the-future\""
        );
    }

    #[test]
    fn only_spread_per_chunk_itl_retries_slo_misses_and_late_reads_are_informational() {
        let informational: Vec<&str> = FlagKind::names()
            .filter(|n| FlagKind::from_name(n).is_informational())
            .collect();
        assert_eq!(
            informational,
            [
                "high-variance",
                "itl-per-chunk",
                "stale-connections",
                "slo-missed",
                "slo-unjudged",
                "server-part-ended",
                "spec-low-acceptance",
                "client-read-late",
                "gpu-memory-tight",
                "profile-failed",
                "prefix-routed-away",
                "validity-unjudged",
                "no-answer",
                "decode-held-back",
                "no-prefix-hits"
            ]
        );
        assert_eq!(FlagKind::SpecLowAcceptance.cell(), "decode");
        assert_eq!(FlagKind::ClientReadLate.cell(), "ttft");
        assert_eq!(FlagKind::ItlPerChunk.cell(), "itl");
        assert_eq!(FlagKind::ColdCacheHit.cell(), "cached");
        assert_eq!(FlagKind::Other("x".into()).cell(), "ok_err");
    }
}
