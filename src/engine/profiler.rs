//! Each engine's profiler endpoints, for `profiler:`: SGLang's `/start_profile` with a
//! `ProfileReq` body (output dir, steps, activities, profile id) and its `/stop_profile`, which
//! writes the traces before it answers; vLLM's bodiless pair, served only by a server launched
//! with `--profiler-config` (which names where its traces go). And how each names the files a
//! capture writes, so a capture brings back its own and nothing else.

use serde_json::{Value, json};

use servebench_model::results::records::ProfilerCapture;
use servebench_model::spec::profiler::ProfilerSpec;

/// Which profiler API an engine's server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProfilerApi {
    Sglang,
    Vllm,
}

impl ProfilerApi {
    /// The API a capture asked, by the name it records (see [`ProfilerApi::engine`]); None for
    /// a capture that asked none (an engine without a profiler).
    pub(crate) fn of_capture(capture: &ProfilerCapture) -> Option<ProfilerApi> {
        [ProfilerApi::Sglang, ProfilerApi::Vllm]
            .into_iter()
            .find(|api| api.engine() == capture.engine)
    }

    /// The engine's name as a capture records it.
    pub(crate) fn engine(self) -> &'static str {
        match self {
            ProfilerApi::Sglang => "sglang",
            ProfilerApi::Vllm => "vllm",
        }
    }

    /// The body of `/start_profile` for a capture named `profile_id` that writes to `dir` on
    /// the server's host (None: the server's own default); None: the request has no body.
    pub(crate) fn start_body(
        self,
        spec: &ProfilerSpec,
        profile_id: &str,
        dir: Option<&str>,
    ) -> Option<Value> {
        match self {
            ProfilerApi::Sglang => {
                let activities: Vec<&str> =
                    spec.activities.iter().map(|a| a.sglang_name()).collect();
                let mut body = json!({
                    "profile_id": profile_id,
                    "activities": activities,
                    "with_stack": spec.with_stack,
                    "record_shapes": spec.record_shapes,
                });
                if let Some(d) = dir {
                    body["output_dir"] = d.into();
                }
                if let Some(n) = spec.steps {
                    body["num_steps"] = n.into();
                }
                Some(body)
            }
            ProfilerApi::Vllm => None,
        }
    }

    /// The body of `/stop_profile` (None: the request has no body).
    pub(crate) fn stop_body(self) -> Option<Value> {
        match self {
            ProfilerApi::Sglang => Some(json!({})),
            ProfilerApi::Vllm => None,
        }
    }

    /// The flag (name, value) a launch needs for the endpoints to exist and write to `dir`:
    /// vLLM's `--profiler-config`; None: the engine needs none.
    pub(crate) fn launch_flag(
        self,
        spec: &ProfilerSpec,
        dir: &str,
    ) -> Option<(&'static str, String)> {
        match self {
            ProfilerApi::Sglang => None,
            ProfilerApi::Vllm => {
                let config = json!({
                    "profiler": "torch",
                    "torch_profiler_dir": dir,
                    "torch_profiler_with_stack": spec.with_stack,
                    "torch_profiler_record_shapes": spec.record_shapes,
                });
                Some(("profiler-config", config.to_string()))
            }
        }
    }

    /// Whether `name`, a file in the capture's directory, is one the engine's profiler wrote
    /// for `capture` (`before`: the directory's files before it). SGLang names every file of a
    /// capture by its profile id; vLLM names its traces by worker and time (see
    /// [`vllm_wrote`]), so a file is the capture's when it is new and stamped within it.
    pub(crate) fn wrote(self, name: &str, capture: &ProfilerCapture, before: &[String]) -> bool {
        match self {
            ProfilerApi::Sglang => capture
                .profile_id
                .as_deref()
                .is_some_and(|id| name.starts_with(id) || name.contains(&format!("-{id}"))),
            ProfilerApi::Vllm => !before.iter().any(|b| b == name) && vllm_wrote(name, capture),
        }
    }
}

/// Whether `name`, new in the capture's directory, is a file vLLM's profiler wrote for this
/// capture: torch's trace (`tensorboard_trace_handler`: `<worker>.<time_ns>.pt.trace.json`,
/// `.gz` added when compressed) stamped within the capture (a minute's slack either side for
/// a remote host's clock), or its table (`profiler_out_<rank>.txt`). Anything else new in a
/// shared directory is another process's, and stays where it is.
fn vllm_wrote(name: &str, capture: &ProfilerCapture) -> bool {
    if let Some(rank) = name
        .strip_prefix("profiler_out_")
        .and_then(|r| r.strip_suffix(".txt"))
    {
        return !rank.is_empty() && rank.bytes().all(|b| b.is_ascii_digit());
    }
    let Some(stem) = name
        .strip_suffix(".pt.trace.json")
        .or_else(|| name.strip_suffix(".pt.trace.json.gz"))
    else {
        return false;
    };
    let Some(stamp) = stem
        .rsplit_once('.')
        .and_then(|(worker, t)| (!worker.is_empty()).then_some(t))
        .and_then(|t| t.parse::<u64>().ok())
    else {
        return false;
    };
    // torch stamps nanoseconds; older handlers (and the simulator once) milliseconds.
    let at = match stamp {
        t if t >= 1_000_000_000_000_000 => t as f64 / 1e9,
        t => t as f64 / 1e3,
    };
    match (capture.started_at, capture.stopped_at) {
        (Some(start), Some(stop)) => at >= start - 60.0 && at <= stop + 60.0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(profile_id: Option<&str>, started_at: f64, stopped_at: f64) -> ProfilerCapture {
        ProfilerCapture {
            profile_id: profile_id.map(str::to_string),
            started_at: Some(started_at),
            stopped_at: Some(stopped_at),
            ..ProfilerCapture::default()
        }
    }

    #[test]
    fn sglang_files_are_the_captures_by_its_profile_id() {
        let c = capture(Some("1764900000.5"), 100.0, 110.0);
        let api = ProfilerApi::Sglang;
        assert!(api.wrote("1764900000.5-TP-0.trace.json.gz", &c, &[]));
        assert!(api.wrote("host-1764900000.5.trace.json.gz", &c, &[]));
        assert!(!api.wrote("1764900099.0-TP-0.trace.json.gz", &c, &[]));
    }

    #[test]
    fn vllm_files_are_new_and_stamped_within_the_capture() {
        // Started at 1,764,900,000 s (Unix time), stopped 10 s later; torch stamps nanoseconds.
        let c = capture(None, 1_764_900_000.0, 1_764_900_010.0);
        let api = ProfilerApi::Vllm;
        assert!(api.wrote("worker0.1764900005000000000.pt.trace.json", &c, &[]));
        assert!(api.wrote("worker0.1764900005000000000.pt.trace.json.gz", &c, &[]));
        // Milliseconds, as older handlers stamp, and a minute's slack for a remote clock.
        assert!(api.wrote("rank1.1764900065000.pt.trace.json", &c, &[]));
        assert!(!api.wrote("rank1.1764900071000.pt.trace.json", &c, &[]));
        assert!(api.wrote("profiler_out_0.txt", &c, &[]));
        assert!(!api.wrote("profiler_out_x.txt", &c, &[]));
        assert!(!api.wrote("notes.txt", &c, &[]));
        // A file that was there before is another capture's.
        let before = ["profiler_out_0.txt".to_string()];
        assert!(!api.wrote("profiler_out_0.txt", &c, &before));
    }

    #[test]
    fn a_capture_names_the_api_it_asked() {
        let asked = |engine: &str| ProfilerCapture {
            engine: engine.into(),
            ..ProfilerCapture::default()
        };
        assert_eq!(
            ProfilerApi::of_capture(&asked("vllm")),
            Some(ProfilerApi::Vllm)
        );
        assert_eq!(
            ProfilerApi::of_capture(&asked("sglang")),
            Some(ProfilerApi::Sglang)
        );
        assert_eq!(ProfilerApi::of_capture(&asked("llama.cpp")), None);
    }
}
