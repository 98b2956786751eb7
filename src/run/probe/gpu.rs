//! One point's GPU telemetry: which sampler `telemetry:` asks for on this host, a sampler per
//! round, and the point's view of the readings (headroom, throttling, energy, cost). [`Gpu`] is
//! the probe that runs it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use indexmap::IndexMap;

use servebench_model::results::gpu::{GpuSample, GpuView};
use servebench_model::results::records::{Flag, Stat};
use servebench_model::spec::telemetry::GpuTelemetry;
use servebench_model::spec::types::{Engine, Experiment};

use super::gpu_sampler::{GpuSampler, GpuSink, Source, find_program};

// `validate` holds the interval to this range; the clamp keeps an agent's request in it too.
use servebench_model::spec::telemetry::{MAX_INTERVAL, MIN_INTERVAL};

/// A point's telemetry as it runs.
pub(crate) struct PointGpu {
    host: String,
    /// What the sampler reads; None when it is missing (`missing` says so).
    source: Option<Arc<Source>>,
    missing: Option<String>,
    interval: Duration,
    sink: GpuSink,
    /// Why the sampler gave nothing, once it did not.
    failed: Arc<Mutex<Option<String>>>,
    /// The point's readings so far, every round (at most [`super::gpu_sampler::MAX_KEPT`],
    /// and [`super::gpu_sampler::MAX_KEPT_BYTES`]), and their bytes.
    samples: Vec<GpuSample>,
    bytes: usize,
}

impl PointGpu {
    /// The telemetry `exp` asks for from this machine, `host` when it is the server's host
    /// (`on_server_host`; otherwise only a DCGM exporter, which is read over the network, is
    /// sampled); None when it asks for none: `off`, or `auto` for the simulator (which uses
    /// no GPU) and for a server servebench did not launch (whose GPUs may be anywhere).
    pub(crate) fn new(
        exp: &Experiment,
        sink: GpuSink,
        host: &str,
        on_server_host: bool,
    ) -> Option<PointGpu> {
        let t = &exp.telemetry;
        let simulated = exp.server.engine == Engine::Sim || exp.server.simulate;
        let found = |name: &str| find_program(name).ok_or(format!("{name} not found on {host}"));
        let (source, host) = match t.gpu {
            GpuTelemetry::Off => return None,
            GpuTelemetry::Dcgm => {
                // `validate` requires the URL and checks it; a request without one says so.
                let exporter = t
                    .dcgm_url
                    .as_deref()
                    .ok_or_else(|| "`telemetry.gpu: dcgm` names no `dcgm_url`".to_string())
                    .and_then(|url| {
                        super::gpu_dcgm::DcgmExporter::new(url).map_err(|e| e.to_string())
                    });
                match exporter {
                    Ok(e) => {
                        let at = e.host().to_string();
                        (Ok(Source::Dcgm(Arc::new(e))), at)
                    }
                    Err(why) => (Err(why), host.to_string()),
                }
            }
            _ if !on_server_host => return None,
            GpuTelemetry::Auto if simulated || exp.server.url.is_some() => return None,
            GpuTelemetry::Auto => {
                let source = match (find_program("nvidia-smi"), find_program("amd-smi")) {
                    (Some(p), _) => Ok(Source::NvidiaSmi(p)),
                    (None, Some(p)) => Ok(Source::AmdSmi(p)),
                    (None, None) => Err(format!("nvidia-smi not found on {host}")),
                };
                (source, host.to_string())
            }
            GpuTelemetry::NvidiaSmi => (found("nvidia-smi").map(Source::NvidiaSmi), host.into()),
            GpuTelemetry::AmdSmi => (found("amd-smi").map(Source::AmdSmi), host.into()),
        };
        let (source, missing) = match source {
            Ok(s) => (Some(Arc::new(s)), None),
            Err(why) => (None, Some(why)),
        };
        Some(PointGpu {
            host,
            source,
            missing,
            interval: t.interval.clamp(MIN_INTERVAL, MAX_INTERVAL),
            sink,
            failed: Arc::default(),
            samples: Vec::new(),
            bytes: 0,
        })
    }

    /// A sampler for one round, once its first reading came; None without a source.
    pub(crate) async fn start(&self, point: &str, round: u32) -> Option<GpuSampler> {
        let source = self.source.clone()?;
        Some(
            GpuSampler::start(
                source,
                self.interval,
                point,
                round,
                self.sink.clone(),
                self.failed.clone(),
            )
            .await,
        )
    }

    /// Keeps a round's readings, within the point's bound.
    pub(crate) fn keep(&mut self, round: Vec<GpuSample>) {
        use super::gpu_sampler::{MAX_KEPT, MAX_KEPT_BYTES, sample_bytes};
        for s in round {
            let bytes = sample_bytes(&s);
            if self.samples.len() >= MAX_KEPT || self.bytes + bytes > MAX_KEPT_BYTES {
                break;
            }
            self.bytes += bytes;
            self.samples.push(s);
        }
    }

    /// The point's view over its measured windows, its metrics and flags added.
    pub(crate) fn summarize(
        self,
        exp: &Experiment,
        system: &servebench_report::measure::system::SystemFold,
        metrics: &mut IndexMap<String, Stat>,
        flags: &mut Vec<Flag>,
    ) -> GpuView {
        let windows = system.measured_windows(exp.open_loop().is_some());
        let judge = servebench_report::measure::gpu::Judge {
            margin_mib: exp.telemetry.memory_margin_gib * 1024.0,
            cost: exp.cost.as_ref(),
            partial: (exp.server.node_count() > 1).then(|| {
                format!(
                    "only rank 0's node of the {}-node server was sampled, so no energy is given and a cost needs `cost.gpus`",
                    exp.server.node_count()
                )
            }),
        };
        let mut view = servebench_report::measure::gpu::summarize(
            &self.host,
            &self.samples,
            &windows,
            &judge,
            metrics,
            flags,
        );
        let failed = self.failed.lock().ok().and_then(|f| f.clone());
        let sampled = view.samples > 0;
        view.source = self.source.as_ref().map(|s| s.name().to_string());
        let silent = self.source.as_ref().filter(|_| !sampled).map(|s| {
            format!(
                "{} on {} gave no reading during the point (it started and printed nothing: hung?)",
                s.name(),
                self.host
            )
        });
        // Readings that stopped partway: what they cover is said, not passed over.
        if sampled && let Some(why) = &failed {
            let note = format!("the readings stop where the sampler failed: {why}");
            view.partial = Some(match view.partial.take() {
                Some(p) => format!("{p}; {note}"),
                None => note,
            });
        }
        view.missing = self.missing.or(failed.filter(|_| !sampled)).or(silent);
        view
    }
}

/// The GPU probe: a sampler through every round, the point's GPU view from their readings.
pub(crate) struct Gpu {
    point: PointGpu,
    running: Option<GpuSampler>,
}

impl Gpu {
    pub(crate) fn new(point: PointGpu) -> Gpu {
        Gpu {
            point,
            running: None,
        }
    }
}

impl super::Probe for Gpu {
    fn open<'a>(
        &'a mut self,
        round: super::RoundStart<'a>,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            self.running = self.point.start(round.point, round.round).await;
        })
    }

    fn close<'a>(
        &'a mut self,
        _completed: usize,
        _unmeasured: &'a mut servebench_report::measure::server_view::Finished,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(sampler) = self.running.take() {
                self.point.keep(sampler.finish().await);
            }
        })
    }

    fn fill(
        self: Box<Self>,
        end: &super::PointEnd<'_>,
        record: &mut servebench_model::results::records::PointRecord,
    ) {
        let view = self.point.summarize(
            end.exp,
            &end.fold.system,
            &mut record.metrics,
            &mut record.flags,
        );
        record.gpu = Some(view);
    }
}
