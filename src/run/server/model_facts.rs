//! The model's `config.json` for a server group, read once its server is up and kept in
//! `meta.json` (`servers[].model_config`), so the report grades every point against the
//! hardware offline: from the spec's `server.model_facts` (a file beside the spec, or the
//! config inline), else from `<model path>/config.json` on the server's host. What cannot be
//! read is recorded with the reason and the fix, never guessed.

use std::path::Path;

use crate::host::{Host, HostError};
use servebench_model::results::meta::ModelConfigRecord;
use servebench_model::spec::types::{ModelFactsSource, Server};

/// Largest `config.json` read (real ones are a few kB; a multimodal one under 100 kB).
pub(crate) const MODEL_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

const FIX: &str = "give `server.model_facts:` (a path to the model's config.json, relative to the spec, or the config inline)";

/// Reads the config `server` names, on `host` when the spec does not give it.
pub(crate) async fn read(server: &Server, spec_dir: &Path, host: &dyn Host) -> ModelConfigRecord {
    match &server.model_facts {
        Some(ModelFactsSource::Inline(map)) => ModelConfigRecord {
            origin: "inline in the spec (server.model_facts)".into(),
            config: Some(serde_json::Value::Object(map.clone().into_iter().collect())),
            missing: None,
            gpu: None,
        },
        Some(ModelFactsSource::Path(p)) => {
            let path = spec_dir.join(p);
            let origin = format!("{} (server.model_facts)", path.display());
            let read =
                crate::host::small_file::read_local(&path.to_string_lossy(), MODEL_CONFIG_BYTES)
                    .map_err(HostError::from);
            parsed(
                origin,
                read,
                "fix the file or its path in `server.model_facts`",
            )
        }
        None => {
            let from_host = from_model_path(server, host).await;
            // A simulator's profile says what it models: where no config was found beside the
            // model, its facts are the model's.
            match profile_facts(server, spec_dir) {
                Some(record) if from_host.config.is_none() => record,
                _ => from_host,
            }
        }
    }
}

/// `<model path>/config.json` on the server's host, or why it could not be read.
async fn from_model_path(server: &Server, host: &dyn Host) -> ModelConfigRecord {
    if server.url.is_some() {
        return missing(
            "the server is not servebench's (server.url)".into(),
            format!("its host's files are not read: {FIX}"),
        );
    }
    let Some(model) = model_path(server) else {
        return missing(
            "the spec names no model".into(),
            format!("no model path to read config.json from: {FIX}"),
        );
    };
    let file = format!("{}/config.json", model.trim_end_matches('/'));
    let origin = format!("{}:{file}", host.name());
    let read = host.read_small_file(&file, MODEL_CONFIG_BYTES).await;
    parsed(
        origin,
        read,
        &format!("`{model}` is not a model directory the host can read? {FIX}"),
    )
}

/// The model path the engine is launched with (`--model-path`, vLLM's positional model,
/// llama.cpp's `-m`: servebench sets each from `server.model`).
fn model_path(server: &Server) -> Option<String> {
    server.model.clone().filter(|m| !m.trim().is_empty())
}

fn parsed(origin: String, read: Result<Vec<u8>, HostError>, fix: &str) -> ModelConfigRecord {
    let bytes = match read {
        Ok(b) => b,
        Err(why) => return missing(origin, format!("{why}: {fix}")),
    };
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) if v.is_object() => ModelConfigRecord {
            origin,
            config: Some(v),
            missing: None,
            gpu: None,
        },
        Ok(_) => missing(origin, format!("not a JSON object: {fix}")),
        Err(e) => missing(origin, format!("not JSON ({e}): {fix}")),
    }
}

fn missing(origin: String, why: String) -> ModelConfigRecord {
    ModelConfigRecord {
        origin,
        config: None,
        missing: Some(why),
        gpu: None,
    }
}

/// A simulated server's model and GPU, from its timing profile's `facts:` (the shipped
/// profiles all say what they model): the simulator's run is graded as a run on that
/// hardware. None for a real engine, or a profile without facts or that cannot be read (the
/// launch says why).
fn profile_facts(server: &Server, spec_dir: &Path) -> Option<ModelConfigRecord> {
    if server.url.is_some()
        || !(server.simulate || server.engine == servebench_model::spec::types::Engine::Sim)
    {
        return None;
    }
    let servebench_model::spec::types::ArgValue::Str(name) = crate::engine::effective_args(server)
        .get("profile")?
        .clone()
    else {
        return None;
    };
    let beside = spec_dir.join(&name);
    let profile = sim::Profile::load(&name)
        .or_else(|_| sim::Profile::load(&beside.to_string_lossy()))
        .ok()?;
    let facts = profile.facts?;
    Some(ModelConfigRecord {
        origin: format!("the simulator profile `{}` (its facts:)", profile.name),
        config: Some(serde_json::Value::Object(facts.model_config)),
        missing: None,
        gpu: Some(facts.gpu),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::local::LocalHost;

    fn server(yaml: &str) -> Server {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn read_now(s: &Server, dir: &Path) -> ModelConfigRecord {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(read(s, dir, &LocalHost))
    }

    #[test]
    fn each_source_is_read_or_said_missing_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        // Inline: kept as written.
        let r = read_now(
            &server("engine: sim\nmodel_facts: { num_hidden_layers: 2, hidden_size: 64 }\n"),
            dir.path(),
        );
        assert_eq!(r.origin, "inline in the spec (server.model_facts)");
        assert_eq!(r.config.unwrap()["num_hidden_layers"], 2);
        // A path beside the spec that is not JSON.
        std::fs::write(dir.path().join("c.json"), "not json").unwrap();
        let r = read_now(&server("engine: sim\nmodel_facts: c.json\n"), dir.path());
        assert!(r.config.is_none());
        assert!(
            r.missing.as_deref().unwrap().starts_with("not JSON ("),
            "{r:?}"
        );
        // The model path's config.json on the host.
        let m = dir.path().join("model");
        std::fs::create_dir(&m).unwrap();
        std::fs::write(m.join("config.json"), "{\"a\": 1}").unwrap();
        let s = server(&format!("engine: sglang\nmodel: {}/\n", m.display()));
        let r = read_now(&s, dir.path());
        assert_eq!(r.origin, format!("local:{}/config.json", m.display()));
        assert_eq!(r.config.unwrap()["a"], 1);
        // A hub name is no directory here: said, with the fix.
        let r = read_now(&server("engine: sglang\nmodel: hub/name\n"), dir.path());
        assert_eq!(r.origin, "local:hub/name/config.json");
        let why = r.missing.unwrap();
        assert!(why.starts_with("no such file: "), "{why}");
        assert!(why.contains("give `server.model_facts:`"), "{why}");
        // An external server's host is not read.
        let r = read_now(
            &server("engine: sglang\nmodel: m\nurl: http://127.0.0.1:1\n"),
            dir.path(),
        );
        assert!(r.missing.unwrap().contains("its host's files are not read"));
    }
}
