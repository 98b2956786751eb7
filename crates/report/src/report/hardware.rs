//! What hardware measured each point: the host (from a pool's `meta.hosts`, or the one SSH
//! host's facts), its GPU model and driver, and the engine's version. The report lists a
//! pool's hosts with the points each measured; `compare` warns when points it sets side by
//! side came from different hardware.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::PointRecord;

/// One host of a pool, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PoolHost {
    /// `user@host:port`.
    pub name: String,
    /// GPU model, driver and engine version, as [`describe`] writes them.
    pub hardware: String,
    /// Points it measured, in record order.
    pub points: Vec<String>,
    /// Why it left the pool, when it failed.
    pub failed: Option<String>,
}

/// A pool's hosts with the points each measured (empty for a run on one host).
pub(crate) fn pool_hosts(meta: &RunMeta, points: &[PointRecord]) -> Vec<PoolHost> {
    meta.hosts
        .iter()
        .map(|h| PoolHost {
            name: h.name.clone(),
            hardware: describe(h.facts.as_ref(), None),
            points: points
                .iter()
                .filter(|p| {
                    p.host
                        .as_deref()
                        .is_some_and(|x| x.split('+').any(|one| one == h.name))
                })
                .map(|p| p.id.clone())
                .collect(),
            failed: h.failed.clone(),
        })
        .collect()
}

/// `NVIDIA H100 80GB HBM3 x8, driver 550.54, SGLang 0.5.2`, from host facts (as
/// `ssh::HostFacts` serialises them) and the server's reported version; `unknown hardware`
/// when nothing is known.
pub(crate) fn describe(facts: Option<&serde_json::Value>, engine_version: Option<&str>) -> String {
    let mut parts = Vec::new();
    let gpus: Vec<(String, String)> = facts
        .and_then(|f| f.get("gpus"))
        .and_then(|g| g.as_array())
        .map(|list| {
            list.iter()
                .map(|g| {
                    let s = |k: &str| g.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
                    (s("name"), s("driver_version"))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut models: Vec<String> = Vec::new();
    for (name, _) in &gpus {
        let n = gpus.iter().filter(|(m, _)| m == name).count();
        let entry = if n > 1 {
            format!("{name} x{n}")
        } else {
            name.clone()
        };
        if !models.contains(&entry) {
            models.push(entry);
        }
    }
    if models.is_empty() {
        parts.push("no GPU reported".to_string());
    } else {
        parts.push(models.join(" + "));
    }
    let mut drivers: Vec<&str> = gpus.iter().map(|(_, d)| d.as_str()).collect();
    drivers.dedup();
    if !drivers.is_empty() {
        parts.push(format!("driver {}", drivers.join("/")));
    }
    let sglang = facts
        .and_then(|f| f.get("sglang_version"))
        .and_then(|v| v.as_str());
    match (engine_version, sglang) {
        (Some(v), _) => parts.push(format!("engine {v}")),
        (None, Some(v)) => parts.push(format!("SGLang {v}")),
        (None, None) => {}
    }
    if facts.is_none() && engine_version.is_none() {
        return "unknown hardware".into();
    }
    parts.join(", ")
}

/// The host facts of the machine that measured `p` in the run of `meta`: its pool host's
/// (rank 0's for a multi-node server), else the run's one SSH host's.
fn facts_of(meta: &RunMeta, p: &PointRecord) -> Option<serde_json::Value> {
    match p.host.as_deref().and_then(|h| h.split('+').next()) {
        Some(name) => meta
            .hosts
            .iter()
            .find(|h| h.name == name)
            .and_then(|h| h.facts.clone()),
        None => meta.server_host.clone(),
    }
}

/// The machine alone (GPU model and driver; no engine): `NVIDIA H100 x2, driver 550.54`,
/// `no GPU reported`, `unknown hardware`.
pub(crate) fn machine_of(meta: &RunMeta, p: &PointRecord) -> String {
    let facts = facts_of(meta, p).map(|mut f| {
        // The engine's version is the engine's, not the machine's.
        if let Some(o) = f.as_object_mut() {
            o.remove("sglang_version");
        }
        f
    });
    describe(facts.as_ref(), None)
}

/// The engine that served `p` and the version it reported: (`sglang`, Some(`0.5.2`)).
fn engine_of(meta: &RunMeta, p: &PointRecord) -> (String, Option<String>) {
    let launch = meta.servers.iter().rev().find(|s| s.group == p.group);
    (
        launch.map(|s| s.engine.clone()).unwrap_or_default(),
        launch
            .and_then(|s| s.surface.as_ref())
            .and_then(|s| s.version.clone()),
    )
}

/// One warning per distinct mix of machines (GPU model, driver) among points compared side by
/// side, and one per mix of versions of the same engine: `records[i]` holds one point per run
/// (labelled `labels[j]`, run `metas[j]`). Points served by different engines (`compare --by
/// server.engine`) differ by design: their versions are no warning, and neither is their
/// hardware unless the machines differ.
pub(crate) fn compare_notes(
    metas: &[&RunMeta],
    labels: &[String],
    records: &[Vec<&PointRecord>],
) -> Vec<String> {
    let mut machines: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let mut versions: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let add = |notes: &mut Vec<(Vec<String>, Vec<String>)>, key: Vec<String>, id: &str| match notes
        .iter_mut()
        .find(|(k, _)| k == &key)
    {
        Some((_, ids)) => ids.push(id.to_string()),
        None => notes.push((key, vec![id.to_string()])),
    };
    for recs in records {
        let id = &recs[0].id;
        let hw: Vec<String> = recs
            .iter()
            .zip(metas)
            .map(|(p, m)| machine_of(m, p))
            .collect();
        if hw.iter().any(|h| h != &hw[0]) {
            add(&mut machines, hw, id);
        }
        let engines: Vec<(String, Option<String>)> = recs
            .iter()
            .zip(metas)
            .map(|(p, m)| engine_of(m, p))
            .collect();
        let same_engine = engines.iter().all(|(e, _)| *e == engines[0].0);
        if same_engine && engines.iter().any(|(_, v)| *v != engines[0].1) {
            let key = engines
                .iter()
                .map(|(e, v)| format!("{e} {}", v.as_deref().unwrap_or("(version unknown)")))
                .collect();
            add(&mut versions, key, id);
        }
    }
    let line = |what: &str, (key, ids): (Vec<String>, Vec<String>), whose: &str| {
        let each: Vec<String> = labels
            .iter()
            .zip(&key)
            .map(|(l, h)| format!("{l} on {h}"))
            .collect();
        format!(
            "different {what}: {} ({} of {}): {}. The differences may be the {whose}, not the settings'.",
            servebench_model::text::count_s(ids.len(), "point"),
            ids.join(", "),
            labels[0],
            each.join("; ")
        )
    };
    machines
        .into_iter()
        .map(|n| line("hardware", n, "hardware's"))
        .chain(
            versions
                .into_iter()
                .map(|n| line("engine versions", n, "engine version's")),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hardware_is_gpu_model_driver_and_engine_version() {
        let f = json!({"gpus": [
            {"name": "NVIDIA H100", "driver_version": "550.54", "memory_total_mib": 1},
            {"name": "NVIDIA H100", "driver_version": "550.54", "memory_total_mib": 1}
        ], "sglang_version": "0.5.2"});
        assert_eq!(
            describe(Some(&f), None),
            "NVIDIA H100 x2, driver 550.54, SGLang 0.5.2"
        );
        assert_eq!(
            describe(Some(&f), Some("0.33.0")),
            "NVIDIA H100 x2, driver 550.54, engine 0.33.0"
        );
        assert_eq!(
            describe(Some(&json!({"hostname": "x"})), None),
            "no GPU reported"
        );
        assert_eq!(describe(None, None), "unknown hardware");
    }
}
