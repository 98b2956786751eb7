//! The engines' profiler endpoints as the simulator serves them: SGLang's `/start_profile`
//! (a `ProfileReq` body: `output_dir`, `num_steps`, `activities`, `profile_id`, ...) and
//! `/stop_profile`, and vLLM's bodiless pair on a server started with `--profiler-config`.
//! A capture counts the scheduler's iterations (SGLang's forward steps) and writes a small
//! Chrome trace of them when it stops: `<profile_id>-TP-0.trace.json` for SGLang (SGLang's
//! name without the `.gz`: the simulator writes it uncompressed), `sim_worker.<ns>.pt.trace.json`
//! for vLLM (the shape of torch's `tensorboard_trace_handler` names). SGLang refuses a second
//! start and a stop with nothing running in its words; `num_steps` stops it by itself.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::log::SimLog;

/// Which engine's file names and words.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Flavour {
    Sglang,
    Vllm,
}

/// A capture's settings, from the start request.
#[derive(Debug, Clone)]
pub(crate) struct StartRequest {
    pub dir: PathBuf,
    pub profile_id: String,
    pub num_steps: Option<u64>,
    pub activities: Vec<String>,
}

#[derive(Debug)]
struct Active {
    req: StartRequest,
    started_at: f64,
    started_ct: u64,
    /// The forward count at which the capture stops itself (SGLang's `num_steps`).
    target_ct: Option<u64>,
    flavour: Flavour,
}

/// Why a capture did not start or stop, in SGLang's words for its refusals.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProfilerError {
    #[error("Profiling is already in progress. Call /stop_profile first.")]
    AlreadyRunning,
    #[error("Profiling is not in progress. Call /start_profile first.")]
    NotRunning,
    #[error("cannot write the trace into {}: {source}", dir.display())]
    Write {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The profiler's state, shared by the HTTP handlers and the scheduler.
#[derive(Debug, Default)]
pub(crate) struct Profiler {
    active: Mutex<Option<Active>>,
    forward_ct: AtomicU64,
}

impl Profiler {
    /// Starts a capture; SGLang's refusal when one is running.
    pub(crate) fn start(
        &self,
        req: StartRequest,
        flavour: Flavour,
        log: &SimLog,
    ) -> Result<(), ProfilerError> {
        let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if active.is_some() {
            return Err(ProfilerError::AlreadyRunning);
        }
        let ct = self.forward_ct.load(Ordering::Relaxed);
        if flavour == Flavour::Sglang {
            log.info(&format!(
                "Profiling starts. Traces will be saved to: {} (with profile id: {})",
                req.dir.display(),
                req.profile_id
            ));
        }
        *active = Some(Active {
            target_ct: req.num_steps.map(|n| ct + n + 1),
            req,
            started_at: unix_now(),
            started_ct: ct,
            flavour,
        });
        Ok(())
    }

    /// Stops the capture and writes its trace; SGLang's refusal when none is running.
    pub(crate) fn stop(&self, log: &SimLog) -> Result<PathBuf, ProfilerError> {
        let taken = self.active.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(a) = taken else {
            return Err(ProfilerError::NotRunning);
        };
        self.write(a, log)
    }

    /// One scheduler iteration (a forward step): a capture whose `num_steps` are done stops.
    pub(crate) fn forward_step(&self, log: &SimLog) {
        let ct = self.forward_ct.fetch_add(1, Ordering::Relaxed) + 1;
        let done = {
            let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
            match active.as_ref().and_then(|a| a.target_ct) {
                Some(t) if t <= ct => active.take(),
                _ => None,
            }
        };
        if let Some(a) = done {
            let _ = self.write(a, log);
        }
    }

    fn write(&self, a: Active, log: &SimLog) -> Result<PathBuf, ProfilerError> {
        let steps = self.forward_ct.load(Ordering::Relaxed) - a.started_ct;
        let now = unix_now();
        let name = match a.flavour {
            Flavour::Sglang => format!("{}-TP-0.trace.json", a.req.profile_id),
            // torch's tensorboard_trace_handler stamps nanoseconds.
            Flavour::Vllm => format!("sim_worker.{}.pt.trace.json", (now * 1e9) as u64),
        };
        let trace = json!({
            "schemaVersion": 1,
            "displayTimeUnit": "ms",
            "traceEvents": [{
                "name": "servebench-sim capture",
                "ph": "X",
                "pid": std::process::id(),
                "tid": 0,
                "ts": (a.started_at * 1e6) as u64,
                "dur": ((now - a.started_at) * 1e6) as u64,
                "args": {"forward_steps": steps, "activities": a.req.activities},
            }],
        });
        let path = a.req.dir.join(name);
        std::fs::create_dir_all(&a.req.dir)
            .and_then(|()| std::fs::write(&path, trace.to_string()))
            .map_err(|source| ProfilerError::Write {
                dir: a.req.dir.clone(),
                source,
            })?;
        if a.flavour == Flavour::Sglang {
            log.info(&format!(
                "Profiling done. Traces are saved to: {}",
                a.req.dir.display()
            ));
        }
        Ok(path)
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory of this test's own.
    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sim-profiler-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn req(dir: &std::path::Path, steps: Option<u64>) -> StartRequest {
        StartRequest {
            dir: dir.to_path_buf(),
            profile_id: "p001-r0".into(),
            num_steps: steps,
            activities: vec!["CPU".into()],
        }
    }

    #[test]
    fn a_capture_writes_its_trace_and_refuses_as_sglang_does() {
        let dir = temp("refuses");
        let p = Profiler::default();
        let log = SimLog::capture();
        assert!(matches!(p.stop(&log), Err(ProfilerError::NotRunning)));
        p.start(req(&dir, None), Flavour::Sglang, &log).unwrap();
        assert_eq!(
            p.start(req(&dir, None), Flavour::Sglang, &log)
                .unwrap_err()
                .to_string(),
            "Profiling is already in progress. Call /stop_profile first."
        );
        p.forward_step(&log);
        p.forward_step(&log);
        let path = p.stop(&log).unwrap();
        assert_eq!(path.file_name().unwrap(), "p001-r0-TP-0.trace.json");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["traceEvents"][0]["args"]["forward_steps"], 2);
    }

    #[test]
    fn num_steps_stops_the_capture_by_itself() {
        let dir = temp("steps");
        let p = Profiler::default();
        let log = SimLog::capture();
        p.start(req(&dir, Some(2)), Flavour::Sglang, &log).unwrap();
        p.forward_step(&log);
        p.forward_step(&log);
        assert!(!dir.exists());
        p.forward_step(&log);
        assert!(&dir.join("p001-r0-TP-0.trace.json").exists());
        assert!(matches!(p.stop(&log), Err(ProfilerError::NotRunning)));
    }
}
