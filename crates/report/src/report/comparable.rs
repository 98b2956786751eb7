//! Whether two runs measured the same thing. Runs that sent different prompts, under a
//! different cache policy or method, or measured from a different place, differ by
//! construction: a speed difference between them says nothing about the server. `compare`
//! and `history` say so before any number.

use indexmap::IndexMap;

use servebench_model::results::meta::RunMeta;

/// Settings whose difference makes two runs incomparable, by the prefix of their dotted path
/// in the resolved spec, and what they are called. The prompt length is not among them: it is
/// usually a swept dimension, matched point by point.
const CONSTRUCTION: &[(&str, &str)] = &[
    ("workload.api", "API"),
    ("workload.prompt", "prompts"),
    ("workload.mix", "prompts"),
    ("workload.seed", "prompts"),
    ("workload.dataset", "prompts"),
    ("cache.policy", "cache policy"),
    ("method", "method"),
];

/// One way two runs differ by construction: `cache policy: cold → warm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Incomparable {
    /// What differs, for people: `prompts`, `cache policy`, `method`, `client placement`, `API`.
    pub what: &'static str,
    /// The setting's dotted path (`cache.policy`), or `client placement`.
    pub setting: String,
    /// Its value in the first run (`—` when unset).
    pub before: String,
    /// Its value in the second run.
    pub after: String,
}

impl std::fmt::Display for Incomparable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.setting == self.what {
            write!(f, "{}: {} → {}", self.what, self.before, self.after)
        } else {
            write!(
                f,
                "{} (`{}`): {} → {}",
                self.what, self.setting, self.before, self.after
            )
        }
    }
}

/// The aspects of method said between a servebench run and an imported one, or two imported
/// ones (`servebench import`): each run's own account of them.
const METHOD: &[&str] = &[
    "TTFT origin",
    "ITL",
    "warm-up",
    "cache state",
    "client placement",
    "prompts",
];

/// How servebench measured `meta`, in the terms an imported run's method is said in.
fn servebench_method(meta: &RunMeta, aspect: &str) -> String {
    let e = &meta.experiment;
    match aspect {
        "TTFT origin" => "request sent → first content chunk (servebench `ttft_s`, client clock)".into(),
        "ITL" => "chunk gaps split over their tokens (`itl_s`); (latency − TTFT) / (output tokens − 1) as `tpot_s`; chunk gaps as `icl_s`".into(),
        "warm-up" => match &e.warmup {
            Some(_) => "a load warm-up phase, not counted".into(),
            None => "none".into(),
        },
        "cache state" => {
            let policy = serde_json::to_value(e.cache.policy).unwrap_or_default();
            format!("cache.policy {}", super::format::value_text(&policy))
        }
        "client placement" => meta.client_placement.clone().unwrap_or_else(|| "local".into()),
        _ => {
            let prompt = serde_json::to_value(&e.workload.prompt).unwrap_or_default();
            let kind = prompt.get("kind").map(super::format::value_text);
            format!("servebench `{}` prompts", kind.unwrap_or_default())
        }
    }
}

fn method_of(meta: &RunMeta, aspect: &str) -> String {
    match &meta.imported {
        Some(i) => {
            let said = i.method.get(aspect).map_or("not recorded", String::as_str);
            format!("{}: {said}", i.tool)
        }
        None => format!("servebench: {}", servebench_method(meta, aspect)),
    }
}

/// How `b` differs from `a` by construction; empty when they measured the same thing. Where
/// either run was imported from another tool, the differences are its method's, aspect by
/// aspect, each run in its own words.
pub(crate) fn incomparable(a: &RunMeta, b: &RunMeta) -> Vec<Incomparable> {
    if a.imported.is_some() || b.imported.is_some() {
        return METHOD
            .iter()
            .filter_map(|aspect| {
                let (x, y) = (method_of(a, aspect), method_of(b, aspect));
                (x != y).then(|| Incomparable {
                    what: aspect,
                    setting: aspect.to_string(),
                    before: x,
                    after: y,
                })
            })
            .collect();
    }
    let (sa, sb) = (construction(a), construction(b));
    let mut names: Vec<&String> = sa.keys().collect();
    for k in sb.keys() {
        if !names.contains(&k) {
            names.push(k);
        }
    }
    let dash = || "—".to_string();
    names
        .into_iter()
        .filter_map(|name| {
            let (x, y) = (sa.get(name), sb.get(name));
            (x != y).then(|| Incomparable {
                what: what_of(name),
                setting: name.clone(),
                before: x.cloned().unwrap_or_else(dash),
                after: y.cloned().unwrap_or_else(dash),
            })
        })
        .collect()
}

fn what_of(setting: &str) -> &'static str {
    if setting == CLIENT {
        return CLIENT;
    }
    CONSTRUCTION
        .iter()
        .find(|(prefix, _)| setting == *prefix || setting.starts_with(&format!("{prefix}.")))
        .map_or("setting", |(_, what)| what)
}

const CLIENT: &str = "client placement";

/// The settings of a run that decide what it measures, by dotted path.
fn construction(meta: &RunMeta) -> IndexMap<String, String> {
    let experiment = serde_json::to_value(&meta.experiment).unwrap_or_default();
    let mut all = IndexMap::new();
    flatten("", &experiment, &mut all);
    let mut out: IndexMap<String, String> = all
        .into_iter()
        .filter(|(k, _)| what_of(k) != "setting")
        .collect();
    // Where the client ran, as the run recorded it (a local run has no placement: local).
    let placement = meta
        .client_placement
        .clone()
        .unwrap_or_else(|| "local".to_string());
    out.insert(CLIENT.to_string(), placement);
    out
}

/// Leaf values of the resolved spec by dotted path. Skipped: what names or describes the run
/// (`name`, `description`, `report`, `expect`), the sweep itself, and the prompt length, which
/// is usually templated from a dimension and resolved for the first point only.
pub(crate) fn flatten(prefix: &str, v: &serde_json::Value, out: &mut IndexMap<String, String>) {
    const SKIP: [&str; 6] = [
        "name",
        "description",
        "report",
        "expect",
        "sweep",
        "workload.prompt.tokens",
    ];
    if SKIP.contains(&prefix) {
        return;
    }
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&path, v, out);
            }
        }
        serde_json::Value::Null => {}
        leaf => {
            out.insert(prefix.to_string(), super::format::value_text(leaf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> RunMeta {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/runs/clean-sweep/meta.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn the_same_run_is_comparable() {
        assert!(incomparable(&meta(), &meta()).is_empty());
    }

    #[test]
    fn cache_policy_method_prompts_and_placement_are_named() {
        let a = meta();
        let mut v = serde_json::to_value(&a).unwrap();
        v["experiment"]["cache"]["policy"] = "warm".into();
        v["experiment"]["method"] = "two-point".into();
        v["client_placement"] = "host".into();
        let b: RunMeta = serde_json::from_value(v).unwrap();
        let found: Vec<String> = incomparable(&a, &b).iter().map(|d| d.to_string()).collect();
        assert!(
            found.iter().any(|l| l.starts_with("cache policy")),
            "{found:?}"
        );
        assert!(found.iter().any(|l| l.starts_with("method")), "{found:?}");
        assert!(
            found.contains(&"client placement: local → host".to_string()),
            "{found:?}"
        );
        // A server flag is a setting, not a difference of construction.
        let mut v = serde_json::to_value(&a).unwrap();
        v["experiment"]["server"]["args"]["chunked-prefill-size"] = 1234.into();
        let c: RunMeta = serde_json::from_value(v).unwrap();
        assert!(incomparable(&a, &c).is_empty());
    }
}
