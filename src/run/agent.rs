//! The measuring client on the GPU host (`client: host`): servebench copies itself there and
//! runs `servebench agent`, which measures points against the server on localhost and streams
//! every request record back over stdout as JSON lines, so network latency between the user
//! and the host never enters the numbers.
//!
//! Protocol, one JSON object per line. In (stdin): [`AgentRequest`], and for a launched
//! deployment [`RoutedLine`]s while it is measured (the router's word on where it sent each
//! request, read from the runner's copy of its log) and, on an interrupt, [`STOP_LINE`]
//! rather than the end of stdin, so the relay goes on while the agent reports. Out (stdout): first
//! `{"hello": {"pid", "pgid", "protocol"}}`; `"heartbeat"` every `--heartbeat-ms` (so a silent
//! agent is known to be frozen, even while a 200k-token prefill keeps every request quiet);
//! `{"request": RequestRecord}` as each request completes, `{"metrics": MetricsScrape}` as
//! each scrape of the server's `/metrics` arrives (taken here, beside the requests, as the
//! runner takes them in-process), then `{"point": PointRecord, "interrupted": bool}`. End of stdin (the runner went away or was
//! interrupted) stops the agent like Ctrl-C: in-flight requests are abandoned and the partial
//! point is reported.

pub(crate) mod session;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;

use crate::client::Client;
use servebench_model::results::records::{PointRecord, RequestRecord};
use servebench_model::spec::Point;
use servebench_model::spec::types::Experiment;

use super::interrupt::Interrupt;
use super::point::{PointRunner, RecordSink};
use super::progress::Progress;

/// One point to measure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AgentRequest {
    pub id: String,
    pub values: IndexMap<String, serde_json::Value>,
    pub experiment: Experiment,
    pub group: String,
    /// The server as the host sees it (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Sent over stdin, never on a command line.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Prompts from the user's prompt file (the agent cannot read it).
    #[serde(default)]
    pub prompts: Option<Vec<String>>,
    /// What the server offers (probed by the runner): how to reset its cache.
    #[serde(default)]
    pub surface: Option<servebench_model::results::meta::ServerSurface>,
    /// What the probes watch of the server group, as this host reaches it: where the server
    /// writes profiler traces, a launched deployment's workers (scraped beside the router).
    #[serde(default)]
    pub probes: super::probe::setup::ProbeSite,
    /// Some: the runner relays the router's sends ([`RoutedLine`]s) from its copy of the
    /// router's log, a line arriving up to this many ms after the router wrote it.
    #[serde(default)]
    pub routed_lag_ms: Option<u64>,
}

/// A line the runner writes between and during points: the requests the router's log says it
/// forwarded, and where, since the last such line (protocol 3).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RoutedLine {
    pub routed: Vec<(String, super::server::routing::Sent)>,
}

/// The line that stops the point being measured, as the end of stdin does, while stdin stays
/// open for the [`RoutedLine`]s its last records wait for (protocol 3).
pub(crate) const STOP_LINE: &str = "{\"stop\":true}";

impl RoutedLine {
    /// How every such line begins, told from a request line before it is parsed.
    pub(crate) const PREFIX: &'static str = "{\"routed\":";
}

/// The protocol this build speaks, sent in the hello: an agent without one (an older
/// binary given by SERVEBENCH_HOST_BINARY) sends no heartbeats, so is never timed out; one
/// below 3 is relayed no router sends.
pub(crate) const PROTOCOL: u32 = 3;

/// A line the agent writes.
// One event lives at a time, on its way to a line of JSON: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AgentEvent {
    /// The first line: the agent's process and group, for the runner to stop if it freezes.
    Hello {
        pid: i32,
        pgid: i32,
        /// [`PROTOCOL`]; absent (0) from agents that predate heartbeats.
        #[serde(default)]
        protocol: u32,
    },
    /// Every `--heartbeat-ms`.
    Heartbeat,
    Request(RequestRecord),
    /// One scrape of the server's `/metrics`, for the runner's `metrics.jsonl`.
    Metrics(servebench_model::results::server_view::MetricsScrape),
    /// One reading of the host's GPUs, for the runner's `gpu.jsonl`.
    Gpu(servebench_model::results::gpu::GpuSample),
    Point {
        point: PointRecord,
        interrupted: bool,
    },
    Error(String),
}

/// `servebench agent`: serves measurement requests from stdin until it closes.
pub(crate) fn main(heartbeat: Duration) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            emit(&AgentEvent::Error(format!("cannot start the runtime: {e}")));
            return crate::exit::FAILED;
        }
    };
    rt.block_on(serve(heartbeat));
    crate::exit::OK
}

async fn serve(heartbeat: Duration) {
    emit(&AgentEvent::Hello {
        pid: nix::unistd::getpid().as_raw(),
        pgid: nix::unistd::getpgrp().as_raw(),
        protocol: PROTOCOL,
    });
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(heartbeat).await;
            emit(&AgentEvent::Heartbeat);
        }
    });
    let interrupt = Interrupt::new();
    interrupt.on_signals_quiet();
    let sink: RecordSink = Arc::new(|r: &RequestRecord| {
        emit(&AgentEvent::Request(r.clone()));
        Ok(())
    });
    // The agent scrapes `/metrics` beside its requests (when the runner's probe found it) and
    // sends every scrape back, so the run's metrics.jsonl and server view are what an
    // in-process run records.
    let metrics: super::probe::scrape::MetricsSink = Arc::new(|m| {
        emit(&AgentEvent::Metrics(m.clone()));
        Ok(())
    });
    // The agent runs on the server's host: it samples that host's GPUs as `telemetry:` asks.
    let gpu: super::probe::gpu_sampler::GpuSink = Arc::new(|g| {
        emit(&AgentEvent::Gpu(g.clone()));
        Ok(())
    });
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "the host".into());
    let mut runner = PointRunner::new(sink, Progress::silent(), interrupt.clone(), ".".into())
        .with_probe_sinks(super::probe::setup::ProbeSinks {
            metrics: Some(metrics),
            gpu: Some((gpu, host, true)),
            ..Default::default()
        });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stdin_interrupt = interrupt.clone();
    let book = runner.routing.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim() == STOP_LINE {
                stdin_interrupt.trigger(super::interrupt::StopCause::InputClosed);
                continue;
            }
            // Relayed sends go to the book at once: the point being measured waits for them.
            if line.starts_with(RoutedLine::PREFIX) {
                match serde_json::from_str::<RoutedLine>(&line) {
                    Ok(r) => book.feed(r.routed),
                    Err(e) => emit(&AgentEvent::Error(format!("bad routed line: {e}"))),
                }
                continue;
            }
            if tx.send(line).is_err() {
                break;
            }
        }
        // The runner closed our stdin: stop whatever is running.
        stdin_interrupt.trigger(super::interrupt::StopCause::InputClosed);
    });
    while let Some(line) = rx.recv().await {
        if line.trim().is_empty() {
            continue;
        }
        let req: AgentRequest = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                emit(&AgentEvent::Error(format!("bad request line: {e}")));
                continue;
            }
        };
        let client = match Client::new(&req.url, req.api_key.clone()) {
            Ok(c) => c,
            Err(e) => {
                emit(&AgentEvent::Error(e.to_string()));
                continue;
            }
        };
        let point = Point {
            id: req.id,
            values: req.values,
            experiment: req.experiment,
        };
        runner.set_surface(req.surface);
        runner.set_site(
            req.probes,
            req.routed_lag_ms
                .map(|ms| super::server::routing::RouterLog::relayed(Duration::from_millis(ms))),
        );
        let outcome = runner
            .measure(&client, &point, &req.group, req.prompts)
            .await;
        emit(&AgentEvent::Point {
            point: outcome.record,
            interrupted: outcome.interrupted,
        });
        if outcome.interrupted {
            break;
        }
    }
}

/// One line on stdout, flushed at once so the runner records it now.
fn emit(event: &AgentEvent) {
    let Ok(line) = serde_json::to_string(event) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
