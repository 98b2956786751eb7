//! What `validate` checks of a spec's `server.model_facts` and `server.gpu`: the config file is
//! a small regular file holding a config the roofline can read, an inline config reads too, and
//! a GPU id is in the catalogue, each reported at the spec's line with the fix.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use roofline::ModelFacts;
use servebench_model::input_file::{Refused, open_regular};
use servebench_model::spec::types::{CustomGpu, Experiment, GpuChoice, ModelFactsSource};
use servebench_model::spec::validate::{Problem, Target};

/// Largest `config.json` read (the runner reads the host's with the same limit).
const CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// The check; files are read once per validation.
#[derive(Default)]
pub struct BoundInputsCheck {
    files: RefCell<HashMap<PathBuf, Option<String>>>,
}

impl servebench_model::spec::Check for BoundInputsCheck {
    fn check(&self, experiment: &Experiment, spec_dir: &Path) -> Vec<Problem> {
        let mut problems = Vec::new();
        let server = &experiment.server;
        let problem = |pointer: &str, message: String, hint: &str| Problem {
            pointer: pointer.into(),
            target: Target::Value,
            message,
            hint: Some(hint.into()),
        };
        match &server.model_facts {
            Some(ModelFactsSource::Path(p)) => {
                let path = spec_dir.join(p);
                let found = self
                    .files
                    .borrow_mut()
                    .entry(path.clone())
                    .or_insert_with(|| config_file_problem(&path))
                    .clone();
                if let Some(message) = found {
                    problems.push(problem(
                        "/server/model_facts",
                        message,
                        "a path to the model's Hugging Face config.json, relative to the spec's folder, or the config inline",
                    ));
                }
            }
            Some(ModelFactsSource::Inline(map)) => {
                let v = serde_json::Value::Object(map.clone().into_iter().collect());
                if let Err(e) = ModelFacts::from_hf_config(&v) {
                    let at = format!("/server/model_facts{}", e.pointer().unwrap_or_default());
                    problems.push(problem(
                        &at,
                        format!("not a config the roofline can read: {e}"),
                        "the fields of the model's config.json (num_hidden_layers, hidden_size, num_attention_heads, ...)",
                    ));
                }
            }
            None => {}
        }
        if let Some(GpuChoice::Custom(c)) = &server.gpu
            && let Some((field, why)) = custom_gpu_problem(c)
        {
            problems.push(problem(
                &format!("/server/gpu/{field}"),
                why,
                "the GPU's datasheet figure: a positive number (GB/s, dense TFLOP/s without sparsity)",
            ));
        }
        if let Some(GpuChoice::Catalogue(name)) = &server.gpu
            && roofline::gpu::find(name).is_none()
        {
            problems.push(problem(
                "/server/gpu",
                format!("`{name}` is not in the GPU catalogue"),
                &format!(
                    "one of {}, or the GPU's figures: {{ name, bandwidth_gb_s, bf16_tflops, source }}",
                    super::bound::known()
                ),
            ));
        }
        problems
    }
}

/// Largest peak figure a GPU in the spec may claim (GB/s or TFLOP/s): a thousand times
/// today's largest.
const MAX_PEAK: f64 = 1e7;

/// The first figure of a spec's GPU that no GPU has (its field and why), or None.
pub(crate) fn custom_gpu_problem(c: &CustomGpu) -> Option<(&'static str, String)> {
    let figures = [
        ("bandwidth_gb_s", Some(c.bandwidth_gb_s)),
        ("bf16_tflops", Some(c.bf16_tflops)),
        ("fp8_tflops", c.fp8_tflops),
        ("fp4_tflops", c.fp4_tflops),
    ];
    figures.into_iter().find_map(|(field, v)| {
        let v = v?;
        (!(v.is_finite() && v > 0.0 && v <= MAX_PEAK)).then(|| {
            (
                field,
                format!("{v} is no GPU's peak: a positive number up to {MAX_PEAK} is needed"),
            )
        })
    })
}

/// What is wrong with a config file, or None when the roofline reads it.
fn config_file_problem(path: &Path) -> Option<String> {
    let shown = path.display();
    let file = match open_regular(path, CONFIG_BYTES) {
        Ok(f) => f,
        Err(Refused::Io(e)) => return Some(format!("cannot read {shown}: {e}")),
        Err(Refused::NotAFile(kind)) => {
            return Some(format!("{shown}: {kind}, not a regular file"));
        }
        Err(Refused::TooLarge(n)) => {
            return Some(format!(
                "{shown}: {n} bytes; a config.json is read up to {CONFIG_BYTES} bytes"
            ));
        }
    };
    let mut text = String::new();
    if let Err(e) = file.take(CONFIG_BYTES).read_to_string(&mut text) {
        return Some(format!("cannot read {shown}: {e}"));
    }
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return Some(format!("{shown}: not JSON: {e}")),
    };
    ModelFacts::from_hf_config(&v)
        .err()
        .map(|e| format!("{shown}: not a config the roofline can read: {e}"))
}
