//! The metric catalogue.

use schemars::JsonSchema;
use serde::Serialize;

/// Whether a smaller or a larger value of a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Times (`*_s`).
    Lower,
    /// Rates (`*_tok_s`).
    Higher,
}

/// How a value moves when the simulator runs at `sim-time-scale` x: times shrink with it, rates
/// grow, counts stay (used to scale published numbers for a sped-up replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeScaling {
    /// Multiplied by the scale.
    Time,
    /// Divided by the scale.
    Rate,
    /// Unchanged.
    Count,
}

impl TimeScaling {
    /// The factor a value at time scale 1 is multiplied by at `scale`.
    pub fn factor(self, scale: f64) -> f64 {
        match self {
            TimeScaling::Time => scale,
            TimeScaling::Rate => 1.0 / scale,
            TimeScaling::Count => 1.0,
        }
    }
}

/// How a value is shown (console and report share these rules, see `crate::text`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// Seconds, three significant digits (no metric of the catalogue: every time is shown
    /// in milliseconds, as peers print them).
    Seconds,
    /// Stored in seconds, shown in milliseconds with three significant digits: every time
    /// metric, in the console, the report and the CSV exports alike.
    Millis,
    /// Tokens per second: no decimals from 100 up, one below.
    Rate,
    /// Token counts: integers as integers, means with one decimal.
    Tokens,
    /// A share or a ratio: two decimals (0.97).
    Share,
    /// Three significant digits (joules, watts, dollars: 0.0123, 612).
    Sig3,
}

/// The measurement methods a metric belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Streaming,
    TwoPoint,
}

/// A metric a point can carry. The name (`ttft_s`) is what files, templates and `expect:` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    Ttft,
    Ttfa,
    Prefill,
    Decode,
    Tpot,
    Itl,
    Icl,
    E2e,
    E2eInteractivityP90,
    E2eInteractivityP75,
    QueueDelay,
    PromptTokens,
    CachedTokens,
    CompletionTokens,
    TA,
    TB,
    TtftFromSchedule,
    E2eFromSchedule,
    ScheduleLag,
    ThroughputReq,
    InputTok,
    OutputTok,
    TotalTok,
    PeakOutputTok,
    ConcurrencyMean,
    ConcurrencyMax,
    Goodput,
    SloAttainment,
    AgentsSloShare,
    ClientCpu,
    AcceptLength,
    VerifyStep,
    EnergyPerOutputToken,
    EnergyPerRequest,
    GpuPower,
    GpuMemoryFreeMin,
    CostPerMInput,
    CostPerMOutput,
    ReasoningTokens,
    AnswerTokens,
    ReasoningDecode,
    AnswerDecode,
    ToolCallRate,
    ToolCallValidRate,
}

/// One catalogue entry.
struct Entry {
    metric: Metric,
    name: &'static str,
    label: &'static str,
    /// The name in running text (spread warnings): "TTFT", "Decode speed".
    long_label: &'static str,
    unit: &'static str,
    definition: &'static str,
    /// The definition under the two-point method, with `{a}` and `{b}` for its max_tokens.
    two_point_definition: Option<&'static str>,
    /// The label under the two-point method, when it differs.
    two_point_label: Option<&'static str>,
    direction: Option<Direction>,
    scaling: TimeScaling,
    display: Display,
    streaming: bool,
    two_point: bool,
    /// Compared by `servebench compare`.
    compared: bool,
    /// Flagged when its samples spread widely (the numbers a report leads with).
    headline: bool,
    /// A `load:` point's metric: system-wide over the measured window, or counted from the
    /// schedule. Reports define these in their load section.
    load: bool,
    /// A speculative-decoding metric: measured only where a request's verify steps are known,
    /// defined in the report's speculative section.
    speculative: bool,
    /// From the GPU telemetry (or its cost): defined in the report's GPU section.
    gpu: bool,
    /// A thinking model's metric (time to the first answer token, thinking and answer
    /// tokens): measured where a point's requests thought, defined beside the others then.
    reasoning: bool,
    /// A tool-calling metric (`workload.tools`): one share per point, measured where a
    /// point's requests were sent tools, defined in the report's tool-call section.
    tools: bool,
}

/// In report order.
const CATALOGUE: &[Entry] = &[
    Entry {
        metric: Metric::Ttft,
        name: "ttft_s",
        label: "TTFT",
        long_label: "TTFT",
        unit: "ms",
        definition: "Time to first token: from the request's last byte written to its connection to the first chunk carrying at least one output token (connect time and the client's own queue are recorded apart).",
        two_point_definition: Some(
            "Time to first token of the first request of each pair (max_tokens {a}).",
        ),
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: true,
        two_point: true,
        compared: true,
        headline: true,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::Ttfa,
        name: "ttfa_s",
        label: "TTFA",
        long_label: "Time to first answer token",
        unit: "ms",
        definition: "Time to first answer token: from the request's last byte written to the first chunk carrying an answer or tool-call token, after any thinking (thinking told apart by the stream's fields, `delta.reasoning` or `delta.reasoning_content`, or by the launched reasoning parser's markers on text APIs). Equal to TTFT for a request that did not think. A request that ran out of tokens (or was stopped) while thinking has none and says why (`no_answer`): it is left out, never counted as 0.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: true,
        two_point: false,
        compared: true,
        headline: true,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: true,
        tools: false,
    },
    Entry {
        metric: Metric::Prefill,
        name: "prefill_tok_s",
        label: "prefill",
        long_label: "Prefill speed",
        unit: "tok/s",
        definition: "prompt_tokens / TTFT, over the requests that found nothing cached, for points that send one request at a time (a closed loop at concurrency 1): TTFT is then the prompt's prefill plus the server's per-request overhead. Left out (—) under concurrency or `load:`, where a request's TTFT holds its wait behind the others and the quotient measures queueing, and for requests with cached tokens, whose TTFT is mostly overhead.",
        two_point_definition: Some(
            "prompt_tokens / TTFT of the first request of each pair that found nothing cached, at concurrency 1 (left out under concurrency, where TTFT holds queueing).",
        ),
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: true,
        two_point: true,
        compared: true,
        headline: true,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::Decode,
        name: "decode_tok_s",
        label: "decode",
        long_label: "Decode speed",
        unit: "tok/s",
        definition: "(completion_tokens - tokens in the first chunk) / (last token time - first token time); none where most tokens after the first came in one network read of several chunks (held back on the way, by a router or proxy).",
        two_point_definition: Some(
            "Two-point: (completion_b - completion_a) / (t_b - t_a), nominally ({b} - {a}) / (t_b - t_a). Left out for pairs whose second request skipped prefill.",
        ),
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: true,
        two_point: true,
        compared: true,
        headline: true,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::Tpot,
        name: "tpot_s",
        label: "TPOT",
        long_label: "TPOT",
        unit: "ms",
        definition: "Time per output token: (E2E - TTFT) / (completion_tokens - 1).",
        two_point_definition: Some("Two-point: (t_b - t_a) / (completion_b - completion_a)."),
        two_point_label: Some("ms/out_tok"),
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: true,
        two_point: true,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::Itl,
        name: "itl_s",
        label: "ITL",
        long_label: "ITL",
        unit: "ms",
        definition: "Inter-token latency, token-normalised: each chunk's gap divided evenly over the tokens it \
         carries, so speculative decoding (several tokens per chunk) does not distort it. Only where the \
         stream gives every chunk's token count (SGLang's meta_info, usage on every chunk); otherwise the \
         gap per chunk, and a point whose chunks carried several tokens says so (itl-per-chunk).",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: true,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::Icl,
        name: "icl_s",
        label: "ICL",
        long_label: "ICL",
        unit: "ms",
        definition: "Inter-chunk latency: the raw gap between consecutive chunks.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: true,
        two_point: false,
        compared: false,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::E2e,
        name: "e2e_s",
        label: "E2E",
        long_label: "E2E",
        unit: "ms",
        definition: "End to end: from the request's last byte written to the end of the stream.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: true,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::E2eInteractivityP90,
        name: "e2e_normalized_interactivity_p90",
        label: "interactivity p90",
        long_label: "E2E normalized interactivity p90",
        unit: "tok/s",
        definition: "1 / p90(E2E / completion_tokens): the 90th percentile (numpy's linear interpolation) of each request's seconds per output token, inverted, so the slowest 10% of requests get their tokens at this rate or slower, the prefill wait included. Over the requests E2E is (successful, measured, not contaminated) whose E2E, completion_tokens, TTFT and prompt_tokens (where counted) are above 0, one sample a request: AIPerf's `e2e_normalized_interactivity_p90` (InferenceX's agentic x-axis), with E2E from the last byte written (AIPerf's request latency starts as the request is sent). Streaming points only.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::E2eInteractivityP75,
        name: "e2e_normalized_interactivity_p75",
        label: "interactivity p75",
        long_label: "E2E normalized interactivity p75",
        unit: "tok/s",
        definition: "1 / p75(E2E / completion_tokens): the 75th percentile (numpy's linear interpolation) of each request's seconds per output token, inverted, so the slowest 25% of requests get their tokens at this rate or slower, the prefill wait included. Over the requests E2E is (successful, measured, not contaminated) whose E2E, completion_tokens, TTFT and prompt_tokens (where counted) are above 0, one sample a request: AIPerf's `e2e_normalized_interactivity_p75` (InferenceX's agentic x-axis), with E2E from the last byte written (AIPerf's request latency starts as the request is sent). Streaming points only.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::QueueDelay,
        name: "queue_delay_s",
        label: "queue delay",
        long_label: "Queue delay",
        unit: "ms",
        definition: "Load runs: from the scheduled send time to the actual send time.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::PromptTokens,
        name: "prompt_tokens",
        label: "prompt tokens",
        long_label: "Prompt tokens",
        unit: "tok",
        definition: "Prompt tokens as counted by the server.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Tokens,
        streaming: true,
        two_point: true,
        compared: false,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::CachedTokens,
        name: "cached_tokens",
        label: "cached tokens",
        long_label: "Cached tokens",
        unit: "tok",
        definition: "Prompt tokens served from the server's prefix cache, as reported by the server.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Tokens,
        streaming: true,
        two_point: true,
        compared: false,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::CompletionTokens,
        name: "completion_tokens",
        label: "output tokens",
        long_label: "Output tokens",
        unit: "tok",
        definition: "Output tokens as counted by the server.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Tokens,
        streaming: true,
        two_point: true,
        compared: false,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::TA,
        name: "t_a_s",
        label: "t_a",
        long_label: "t_a",
        unit: "ms",
        definition: "End-to-end time of the first request of a pair (max_tokens {a}).",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: false,
        two_point: true,
        compared: false,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::TB,
        name: "t_b_s",
        label: "t_b",
        long_label: "t_b",
        unit: "ms",
        definition: "End-to-end time of the second request of a pair (max_tokens {b}), same prompt.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: false,
        two_point: true,
        compared: false,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::TtftFromSchedule,
        name: "ttft_sched_s",
        label: "TTFT (sched)",
        long_label: "TTFT from the schedule",
        unit: "ms",
        definition: "Time to first token counted from the request's scheduled send time: TTFT plus the client's lag (a wait for a slot under max_in_flight included), what a user arriving on schedule waits.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::E2eFromSchedule,
        name: "e2e_sched_s",
        label: "E2E (sched)",
        long_label: "E2E from the schedule",
        unit: "ms",
        definition: "End-to-end time counted from the request's scheduled send time: E2E plus the client's lag.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::ScheduleLag,
        name: "schedule_lag_s",
        label: "lag",
        long_label: "Schedule lag",
        unit: "ms",
        definition: "sent_at - scheduled_at per request: how late the client wrote the request's last byte against the arrival schedule (waits for a slot under max_in_flight included). The client self-check.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: false,
        two_point: false,
        compared: false,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::ThroughputReq,
        name: "throughput_req_s",
        label: "req/s",
        long_label: "Request throughput",
        unit: "req/s",
        definition: "Completed measured requests / the measured window: under `load:` from the first measured request's scheduled time to the last one's end; in a closed loop each round's first send to its last end, summed over rounds (flushes between rounds are no load); with three rounds or more, the mean of the rounds' rates with its 95% interval (Student's t). Every point but a two-point one.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::InputTok,
        name: "input_tok_s",
        label: "in tok/s",
        long_label: "Input throughput",
        unit: "tok/s",
        definition: "Prompt tokens of completed measured requests / the measured window.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::OutputTok,
        name: "output_tok_s",
        label: "out tok/s",
        long_label: "Output throughput",
        unit: "tok/s",
        definition: "Completion tokens of completed measured requests / the measured window.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::TotalTok,
        name: "total_tok_s",
        label: "total tok/s",
        long_label: "Total throughput",
        unit: "tok/s",
        definition: "Prompt plus completion tokens of completed measured requests / the measured window.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::PeakOutputTok,
        name: "peak_output_tok_s",
        label: "peak out tok/s",
        long_label: "Peak output throughput",
        unit: "tok/s",
        definition: "The most output tokens that arrived in any one-second bucket of the measured window (by chunk arrival time), per second.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::ConcurrencyMean,
        name: "concurrency_mean",
        label: "in flight",
        long_label: "Mean concurrency",
        unit: "req",
        definition: "Sum of the measured requests' E2E (from send) / the measured window: the mean number in flight (Little's law).",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Tokens,
        streaming: false,
        two_point: false,
        compared: false,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::ConcurrencyMax,
        name: "concurrency_max",
        label: "max in flight",
        long_label: "Peak concurrency",
        unit: "req",
        definition: "The most measured requests in flight at once (an exact sweep over each request's [sent, end)).",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Tokens,
        streaming: false,
        two_point: false,
        compared: false,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::Goodput,
        name: "goodput_req_s",
        label: "goodput",
        long_label: "Goodput",
        unit: "req/s",
        definition: "Completed measured requests meeting every per-request SLO (slo.ttft and slo.e2e from the scheduled time, slo.tpot) / the measured window.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::SloAttainment,
        name: "slo_attainment",
        label: "SLO met",
        long_label: "SLO attainment",
        unit: "share",
        definition: "The share of measured requests (failed ones included, as not meeting it) meeting every per-request SLO.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Count,
        display: Display::Share,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::AgentsSloShare,
        name: "agents_slo_share",
        label: "agents at SLO",
        long_label: "Agents meeting the per-agent SLO",
        unit: "share",
        definition: "The share of the point's agent sessions that sent a turn (of the first 10,000) meeting `slo.agent`: the percentile of their successful turns' TTFT (or first answer) from each turn's due time within its bound, their output tokens over their summed first-token-to-end seconds at least its speed, and no turn failed.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Count,
        display: Display::Share,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::ClientCpu,
        name: "client_cpu",
        label: "client CPU",
        long_label: "Client CPU",
        unit: "cores",
        definition: "servebench's own CPU time (user + system, getrusage) during the point / its wall time: 1.0 is one core busy. The client self-check.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Share,
        streaming: false,
        two_point: false,
        compared: false,
        headline: false,
        load: true,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::AcceptLength,
        name: "accept_length",
        label: "accept length",
        long_label: "Accept length",
        unit: "tok/step",
        definition: "Output tokens per speculative verify step after the first token: (completion_tokens - tokens in the first chunk) / verify steps, the steps the server counted (SGLang meta_info.spec_verify_ct, or sglext.spec_tokens_details on its OpenAI streams). 1.0 is plain decoding.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Share,
        streaming: true,
        two_point: false,
        compared: false,
        headline: false,
        load: false,
        speculative: true,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::VerifyStep,
        name: "verify_step_s",
        label: "verify step",
        long_label: "Verify step time",
        unit: "ms",
        definition: "Decode time per speculative verify step: (last token time - first token time) / verify steps. Decode speed = accept length / verify step time.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Lower),
        scaling: TimeScaling::Time,
        display: Display::Millis,
        streaming: true,
        two_point: false,
        compared: false,
        headline: false,
        load: false,
        speculative: true,
        gpu: false,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::EnergyPerOutputToken,
        name: "energy_per_output_token_j",
        label: "J/out_tok",
        long_label: "Energy per output token",
        unit: "J",
        definition: "Joules all GPUs of the server's host drew over the measured window (power.draw integrated by trapezoids between readings, clipped at the window's edges, uncovered edges at the covered part's mean power) / the output tokens of the window's successful requests.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Sig3,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: true,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::EnergyPerRequest,
        name: "energy_per_request_j",
        label: "J/req",
        long_label: "Energy per request",
        unit: "J",
        definition: "The measured window's energy (as for energy per output token) / its successful requests.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Sig3,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: true,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::GpuPower,
        name: "gpu_power_w",
        label: "power",
        long_label: "GPU power",
        unit: "W",
        definition: "Mean power of all GPUs together over the measured window: its energy / its seconds.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Sig3,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: true,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::GpuMemoryFreeMin,
        name: "gpu_memory_free_min_gib",
        label: "free min",
        long_label: "Least free GPU memory",
        unit: "GiB",
        definition: "The smallest free memory any one GPU reported during the point (memory.free), warm-up and cool-down included.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Sig3,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: true,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::CostPerMInput,
        name: "cost_per_m_input_usd",
        label: "$/M in",
        long_label: "Cost per million input tokens",
        unit: "$",
        definition: "cost.gpu_hour x GPU-hours (the measured window's hours x the GPUs used) / the window's prompt tokens x 10^6: the whole cost of the window charged to its input tokens.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Sig3,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: true,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::CostPerMOutput,
        name: "cost_per_m_output_usd",
        label: "$/M out",
        long_label: "Cost per million output tokens",
        unit: "$",
        definition: "cost.gpu_hour x GPU-hours (the measured window's hours x the GPUs used) / the window's output tokens x 10^6: the whole cost of the window charged to its output tokens.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Sig3,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: true,
        reasoning: false,
        tools: false,
    },
    Entry {
        metric: Metric::ReasoningTokens,
        name: "reasoning_tokens",
        label: "thinking tokens",
        long_label: "Thinking tokens",
        unit: "tok",
        definition: "Thinking (reasoning) tokens per request: the server's count (`usage.completion_tokens_details.reasoning_tokens`, SGLang's `reasoning_tokens`) where it gives one, else the sum of the chunks' thinking tokens (`reasoning_source` says which). Part of completion_tokens.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Tokens,
        streaming: true,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: true,
        tools: false,
    },
    Entry {
        metric: Metric::AnswerTokens,
        name: "answer_tokens",
        label: "answer tokens",
        long_label: "Answer tokens",
        unit: "tok",
        definition: "completion_tokens - thinking tokens per request: the answer and tool-call tokens.",
        two_point_definition: None,
        two_point_label: None,
        direction: None,
        scaling: TimeScaling::Count,
        display: Display::Tokens,
        streaming: true,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: true,
        tools: false,
    },
    Entry {
        metric: Metric::ReasoningDecode,
        name: "reasoning_tok_s",
        label: "thinking decode",
        long_label: "Thinking decode speed",
        unit: "tok/s",
        definition: "Decode speed while thinking: (thinking tokens - those of the first token chunk) / (last thinking chunk's time - first token time). Counted from the first token (TTFT), like decode speed.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: true,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: true,
        tools: false,
    },
    Entry {
        metric: Metric::AnswerDecode,
        name: "answer_tok_s",
        label: "answer decode",
        long_label: "Answer decode speed",
        unit: "tok/s",
        definition: "Decode speed while answering: (answer tokens - those of the first answer chunk) / (last answer chunk's time - first answer token time). Counted from the first answer token (TTFA).",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Rate,
        display: Display::Rate,
        streaming: true,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: true,
        tools: false,
    },
    Entry {
        metric: Metric::ToolCallRate,
        name: "tool_call_rate",
        label: "calls made",
        long_label: "Tool-call rate",
        unit: "share",
        definition: "Of the successful measured requests sent tools (`workload.tools`), the share whose stream made a tool call (`delta.tool_calls`); a request that answered in text made none.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Count,
        display: Display::Share,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: true,
    },
    Entry {
        metric: Metric::ToolCallValidRate,
        name: "tool_call_valid_rate",
        label: "calls valid",
        long_label: "Valid tool-call rate",
        unit: "share",
        definition: "Of the successful measured requests that made a tool call, the share whose every call named a declared tool with arguments that parse as JSON and satisfy its `parameters` schema. Under 0.95 the point is flagged `invalid-tool-calls`.",
        two_point_definition: None,
        two_point_label: None,
        direction: Some(Direction::Higher),
        scaling: TimeScaling::Count,
        display: Display::Share,
        streaming: false,
        two_point: false,
        compared: true,
        headline: false,
        load: false,
        speculative: false,
        gpu: false,
        reasoning: false,
        tools: true,
    },
];

impl Metric {
    /// Every metric, in report order.
    #[cfg(test)]
    fn all() -> impl Iterator<Item = Metric> {
        CATALOGUE.iter().map(|e| e.metric)
    }

    /// The metrics a method's points carry, in report order.
    pub fn of_method(method: Method) -> impl Iterator<Item = Metric> {
        CATALOGUE
            .iter()
            .filter(move |e| match method {
                Method::Streaming => e.streaming,
                Method::TwoPoint => e.two_point,
            } && !e.load && !e.speculative && !e.gpu && !e.reasoning && !e.tools)
            .map(|e| e.metric)
    }

    /// The metrics a report defines for `method`: a streaming report leaves out the two-point
    /// pair times; a two-point report defines them all (its detail tables list every row).
    pub fn shown_for(method: Method) -> impl Iterator<Item = Metric> {
        CATALOGUE
            .iter()
            .filter(move |e| {
                !e.load
                    && !e.speculative
                    && !e.gpu
                    && !e.reasoning
                    && !e.tools
                    && (method == Method::TwoPoint || e.streaming || !e.two_point)
            })
            .map(|e| e.metric)
    }

    /// The speculative-decoding metrics (streaming points whose verify steps are known), in
    /// report order.
    pub fn of_speculative() -> impl Iterator<Item = Metric> {
        CATALOGUE.iter().filter(|e| e.speculative).map(|e| e.metric)
    }

    /// A thinking model's metrics (streaming points whose requests thought), in report order.
    pub fn of_reasoning() -> impl Iterator<Item = Metric> {
        CATALOGUE.iter().filter(|e| e.reasoning).map(|e| e.metric)
    }

    /// The tool-calling metrics (points whose requests were sent tools), in report order.
    pub fn of_tools() -> impl Iterator<Item = Metric> {
        CATALOGUE.iter().filter(|e| e.tools).map(|e| e.metric)
    }

    /// E2E normalized interactivity (AIPerf's p90 and p75): one value per streaming point.
    pub fn of_interactivity() -> impl Iterator<Item = Metric> {
        [Metric::E2eInteractivityP90, Metric::E2eInteractivityP75].into_iter()
    }

    /// The metrics of `load:` points, in report order.
    pub fn of_load() -> impl Iterator<Item = Metric> {
        CATALOGUE.iter().filter(|e| e.load).map(|e| e.metric)
    }

    /// The metrics `servebench compare` judges, in order.
    pub fn compared() -> impl Iterator<Item = Metric> {
        CATALOGUE.iter().filter(|e| e.compared).map(|e| e.metric)
    }

    /// The metrics a report leads with (flagged when their samples spread widely).
    pub fn headline() -> impl Iterator<Item = Metric> {
        CATALOGUE.iter().filter(|e| e.headline).map(|e| e.metric)
    }

    /// The metric named `name` (`ttft_s`), if the catalogue has it.
    pub fn from_name(name: &str) -> Option<Metric> {
        CATALOGUE.iter().find(|e| e.name == name).map(|e| e.metric)
    }

    fn entry(self) -> &'static Entry {
        CATALOGUE
            .iter()
            .find(|e| e.metric == self)
            .expect("every metric has a catalogue entry")
    }

    /// The name files, templates and specs use: `ttft_s`.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// The short label of table headers: `TTFT`, `prefill`.
    pub fn label(self) -> &'static str {
        self.entry().label
    }

    /// The label under `method` (two-point TPOT is `s/out_tok`).
    pub fn label_for(self, method: Method) -> &'static str {
        match (method, self.entry().two_point_label) {
            (Method::TwoPoint, Some(l)) => l,
            _ => self.entry().label,
        }
    }

    /// The name in running text: `Decode speed`.
    pub fn long_label(self) -> &'static str {
        self.entry().long_label
    }

    /// The unit values are shown in: `ms`, `tok/s`, `tok`.
    pub fn unit(self) -> &'static str {
        self.entry().unit
    }

    /// The name of a column holding the metric in its shown unit (CSV exports): the name with
    /// its stored unit swapped for the shown one (`ttft_s` holds seconds, `ttft_ms` the
    /// milliseconds the report shows); the name itself where they agree.
    pub fn column(self) -> String {
        match (self.display(), self.name().strip_suffix("_s")) {
            (Display::Millis, Some(stem)) => format!("{stem}_ms"),
            _ => self.name().to_string(),
        }
    }

    /// A stored value in the shown unit (seconds to milliseconds for times).
    pub fn shown(self, stored: f64) -> f64 {
        match self.display() {
            Display::Millis => stored * 1000.0,
            _ => stored,
        }
    }

    /// The definition the report states, for a method (two-point: with its `a` and `b`).
    pub fn definition(self, method: Method, a: u32, b: u32) -> String {
        let e = self.entry();
        let text = match (method, e.two_point_definition) {
            (Method::TwoPoint, Some(d)) => d,
            _ => e.definition,
        };
        text.replace("{a}", &a.to_string())
            .replace("{b}", &b.to_string())
    }

    /// Whether smaller or larger is better; None for counts, which are never judged.
    pub fn direction(self) -> Option<Direction> {
        self.entry().direction
    }

    /// How the value moves with the simulator's time scale.
    pub fn scaling(self) -> TimeScaling {
        self.entry().scaling
    }

    /// How the value is shown.
    pub(crate) fn display(self) -> Display {
        self.entry().display
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let names: Vec<&str> = Metric::all().map(Metric::name).collect();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "{n} twice");
            assert_eq!(Metric::from_name(n).map(Metric::name), Some(*n));
        }
        assert_eq!(Metric::from_name("ttft"), None);
    }

    #[test]
    fn the_unit_suffix_agrees_with_direction_and_scaling() {
        // The old rule derived both from the name; the catalogue must not contradict it.
        for m in Metric::all() {
            let n = m.name();
            if n.ends_with("_tok_s") || n.ends_with("_req_s") {
                assert_eq!(m.direction(), Some(Direction::Higher), "{n}");
                assert_eq!(m.scaling(), TimeScaling::Rate, "{n}");
            } else if n.ends_with("_s") {
                assert_eq!(m.direction(), Some(Direction::Lower), "{n}");
                assert_eq!(m.scaling(), TimeScaling::Time, "{n}");
            } else if matches!(m, Metric::E2eInteractivityP90 | Metric::E2eInteractivityP75) {
                // AIPerf's names, kept: a rate in tokens per second.
                assert_eq!(m.direction(), Some(Direction::Higher), "{n}");
                assert_eq!(m.scaling(), TimeScaling::Rate, "{n}");
                assert_eq!(m.unit(), "tok/s", "{n}");
            } else if matches!(
                m,
                Metric::SloAttainment
                    | Metric::AgentsSloShare
                    | Metric::ToolCallRate
                    | Metric::ToolCallValidRate
            ) {
                assert_eq!(m.direction(), Some(Direction::Higher), "{n}");
                assert_eq!(m.scaling(), TimeScaling::Count, "{n}");
            } else {
                assert_eq!(m.direction(), None, "{n}");
                assert_eq!(m.scaling(), TimeScaling::Count, "{n}");
            }
        }
    }

    /// One unit per kind: every time is shown in ms, its CSV column says so, and no metric
    /// is shown in a unit its catalogue entry does not name.
    #[test]
    fn every_time_is_shown_in_ms_under_its_unit() {
        for m in Metric::all() {
            let n = m.name();
            if m.direction() == Some(Direction::Lower) {
                assert_eq!(m.display(), Display::Millis, "{n}");
                assert_eq!(m.unit(), "ms", "{n}");
                assert!(m.column().ends_with("_ms"), "{n}");
            }
            if m.display() == Display::Millis {
                assert_eq!(m.unit(), "ms", "{n}");
            }
        }
        assert_eq!(Metric::ScheduleLag.column(), "schedule_lag_ms");
        assert_eq!(Metric::Decode.column(), "decode_tok_s");
        assert!((Metric::Ttft.shown(0.0123) - 12.3).abs() < 1e-9);
    }

    #[test]
    fn two_point_definitions_name_a_and_b() {
        assert_eq!(
            Metric::TA.definition(Method::TwoPoint, 1, 17),
            "End-to-end time of the first request of a pair (max_tokens 1)."
        );
        assert!(
            Metric::Decode
                .definition(Method::TwoPoint, 1, 17)
                .contains("(17 - 1)")
        );
        assert_eq!(Metric::Tpot.label_for(Method::TwoPoint), "ms/out_tok");
        assert_eq!(Metric::Tpot.label_for(Method::Streaming), "TPOT");
    }
}
