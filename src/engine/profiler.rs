//! Each engine's profiler endpoints, for `profile:`: SGLang's `/start_profile` with a
//! `ProfileReq` body (output dir, steps, activities, profile id) and its `/stop_profile`, which
//! writes the traces before it answers; vLLM's bodiless pair, served only by a server launched
//! with `--profiler-config` (which names where its traces go).

use serde_json::{Value, json};

use servebench_model::spec::profiler::ProfilerSpec;

/// Which profiler API an engine's server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProfilerApi {
    Sglang,
    Vllm,
}

impl ProfilerApi {
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
}
