//! A deployment of several servers in one spec (`server.deployment:`): N workers of the
//! group's engine and SGLang's router (`sglang-router`) in front of them, launched, watched
//! and stopped together; measured through the router. Regular (data-parallel) workers, or
//! prefill and decode workers of a prefill-decode disaggregated deployment.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::arg_value::ArgValue;
use super::validate::{Problem, Target};

/// Most workers one deployment launches (each one is a server process on the host).
pub(crate) const MAX_WORKERS: u32 = 64;

/// The workers and the router of a routed deployment. `workers: N` for regular workers,
/// or `prefill: P` and `decode: D` for a prefill-decode disaggregated one; each worker is
/// the group's engine with `server.args`, its own flags merged over them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    /// Regular workers behind the router (data parallel: each serves whole requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub workers: Option<u32>,
    /// Prefill workers of a disaggregated deployment: each gets `--disaggregation-mode
    /// prefill` and its own `--disaggregation-bootstrap-port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub prefill: Option<u32>,
    /// Decode workers of a disaggregated deployment (`--disaggregation-mode decode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub decode: Option<u32>,
    /// Flags for each regular worker in turn, merged over `server.args`: the first map is
    /// worker 0's, and so on; workers past the list get `server.args` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_args: Vec<IndexMap<String, ArgValue>>,
    /// Flags every prefill worker gets, merged over `server.args`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub prefill_args: IndexMap<String, ArgValue>,
    /// Flags every decode worker gets, merged over `server.args`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub decode_args: IndexMap<String, ArgValue>,
    /// Hosts the workers are spread over (default 1: every worker beside the router): the
    /// group's first N hosts of `hosts:`, or N ranks of a Slurm allocation. The router runs
    /// on the first; a worker on another host listens on that host's `address` (its SSH
    /// host name unless given; a Slurm node's address), where the router reaches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub nodes: Option<u32>,
    /// The node (from 0) of each worker, in launch order (prefill workers before decode
    /// workers): `[0, 1, 1]`. Absent: the workers in turn over the nodes (worker i on node
    /// i mod `nodes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<u32>,
    /// The router in front of the workers.
    #[serde(default)]
    pub router: Router,
}

/// SGLang's router: `sglang-router` (`python -m sglang_router.launch_router`) or its
/// successor, the Shepherd Model Gateway (`smg launch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Router {
    /// Which router: `sglang-router` (0.3, the default) or `smg` (the Shepherd Model
    /// Gateway, its successor under a new name: the same flags, routes and request log). It
    /// picks the default `launcher`.
    #[serde(default, skip_serializing_if = "RouterKind::is_default")]
    pub kind: RouterKind,
    /// Its routing policy for regular workers (`--policy`): `round_robin`, `random`,
    /// `cache_aware`, `power_of_two`, `manual`; `consistent_hashing` with `kind: smg` (the
    /// sglang-router 0.3 refuses it when it starts).
    #[serde(default = "default_policy")]
    pub policy: RouterPolicy,
    /// A disaggregated deployment's policy for picking the prefill worker
    /// (`--prefill-policy`); absent: `policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_policy: Option<RouterPolicy>,
    /// A disaggregated deployment's policy for picking the decode worker
    /// (`--decode-policy`); absent: `policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_policy: Option<RouterPolicy>,
    /// More router flags without the leading `--` (`{ cache-threshold: 0.5 }`); servebench
    /// sets host, port, Prometheus listener, log level and the workers itself.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub args: IndexMap<String, ArgValue>,
    /// The command that starts the router, before its flags. Default:
    /// `[python, -m, sglang_router.launch_router]` for `sglang-router`, `[smg, launch]` for
    /// `smg`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<Vec<String>>,
    /// Environment variables for the router process.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    /// Port the router listens on (what servebench measures). Omit it to pick a free port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

impl Default for Router {
    fn default() -> Self {
        Router {
            kind: RouterKind::default(),
            policy: default_policy(),
            prefill_policy: None,
            decode_policy: None,
            args: IndexMap::new(),
            launcher: None,
            env: IndexMap::new(),
            port: None,
        }
    }
}

/// Which router a deployment launches.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum RouterKind {
    /// `sglang-router` 0.3 (PyPI `sglang-router`), `python -m sglang_router.launch_router`.
    #[default]
    SglangRouter,
    /// The Shepherd Model Gateway (PyPI `smg`, 1.13), `smg launch`.
    Smg,
}

impl RouterKind {
    fn is_default(&self) -> bool {
        *self == RouterKind::default()
    }

    /// The command that starts this router, before its flags.
    pub fn launcher(self) -> &'static [&'static str] {
        match self {
            RouterKind::SglangRouter => &["python", "-m", "sglang_router.launch_router"],
            RouterKind::Smg => &["smg", "launch"],
        }
    }
}

fn default_policy() -> RouterPolicy {
    RouterPolicy::CacheAware
}

/// A routing policy of sglang-router 0.3 and smg 1.13 (`--policy`; both take these but
/// `consistent_hashing`, smg's alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RouterPolicy {
    /// Each request to the next worker in turn.
    RoundRobin,
    /// A worker drawn at random.
    Random,
    /// The worker whose radix tree shares the longest prefix with the request, unless the
    /// load is unbalanced (the router's default).
    CacheAware,
    /// The less loaded of two workers drawn at random.
    PowerOfTwo,
    /// Sticky by routing key: requests with the same `X-SMG-Routing-Key` header go to the
    /// same worker, a new key to a worker drawn as `--assignment-mode` says (random by
    /// default); without the header, a worker drawn at random.
    Manual,
    /// smg only: requests with the same `X-SMG-Routing-Key` header go to the worker the key
    /// hashes to on a ring of the workers' URLs; without it, a key from `Authorization`,
    /// `X-Forwarded-For` or `Cookie`, else a worker drawn at random (smg's
    /// `policies/consistent_hashing.rs`).
    ConsistentHashing,
}

/// A worker's role in a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum WorkerRole {
    /// Serves whole requests.
    Regular,
    /// Computes the prompt's KV cache and hands it to a decode worker.
    Prefill,
    /// Takes the KV cache from a prefill worker and generates.
    Decode,
}

/// One worker a deployment launches.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerPlan {
    pub role: WorkerRole,
    /// Index among its role's workers (from 0).
    pub index: u32,
    /// Its own flags, to merge over `server.args`.
    pub args: IndexMap<String, ArgValue>,
}

impl WorkerPlan {
    /// Its name in records and file names: `worker0`, `prefill0`, `decode1`.
    pub fn name(&self) -> String {
        match self.role {
            WorkerRole::Regular => format!("worker{}", self.index),
            r => format!("{r}{}", self.index),
        }
    }
}

impl Deployment {
    /// True for a prefill-decode disaggregated deployment.
    pub fn disaggregated(&self) -> bool {
        self.prefill.is_some() || self.decode.is_some()
    }

    /// Hosts the deployment holds (`nodes`, at least 1).
    pub fn node_count(&self) -> u32 {
        self.nodes.unwrap_or(1).max(1)
    }

    /// The node (from 0) the `i`th worker of [`Self::plan`] runs on.
    pub fn node_of(&self, i: usize) -> usize {
        let nodes = self.node_count() as usize;
        self.placement
            .get(i)
            .map_or(i % nodes, |&n| n as usize)
            .min(nodes - 1)
    }

    /// The workers to launch, prefill before decode.
    pub fn plan(&self) -> Vec<WorkerPlan> {
        if self.disaggregated() {
            let role = |role, n: Option<u32>, args: &IndexMap<String, ArgValue>| {
                (0..n.unwrap_or(0))
                    .map(|index| WorkerPlan {
                        role,
                        index,
                        args: args.clone(),
                    })
                    .collect::<Vec<_>>()
            };
            let mut all = role(WorkerRole::Prefill, self.prefill, &self.prefill_args);
            all.extend(role(WorkerRole::Decode, self.decode, &self.decode_args));
            all
        } else {
            (0..self.workers.unwrap_or(1))
                .map(|index| WorkerPlan {
                    role: WorkerRole::Regular,
                    index,
                    args: self
                        .worker_args
                        .get(index as usize)
                        .cloned()
                        .unwrap_or_default(),
                })
                .collect()
        }
    }
}

/// Checks the schema cannot express, on the raw spec (sweeps set `server.deployment.*` per
/// point; a swept value is checked where the points are typed).
pub(crate) fn checks(raw: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    let Some(server) = raw.get("server").and_then(Value::as_object) else {
        return problems;
    };
    let Some(dep) = server.get("deployment").and_then(Value::as_object) else {
        return problems;
    };
    let set = |k: &str| dep.get(k).is_some_and(|v| !v.is_null());
    problems.extend(single_server_checks(server));
    let pd = set("prefill") || set("decode");
    problems.extend(role_checks(server, dep, pd));
    let count = |k: &str| dep.get(k).and_then(Value::as_u64).unwrap_or(0);
    let total = if pd {
        count("prefill") + count("decode")
    } else {
        count("workers").max(1)
    };
    if total > u64::from(MAX_WORKERS) {
        problems.push(Problem {
            pointer: "/server/deployment".into(),
            target: Target::Key,
            message: format!(
                "the deployment has {total} workers; one deployment launches at most {MAX_WORKERS}"
            ),
            hint: Some("launch fewer workers".into()),
        });
    }
    problems.extend(placement_checks(dep, total));
    problems.extend(worker_args_checks(dep));
    problems.extend(router_args_checks(dep));
    problems
}

/// `server` fields for a single server that a deployment cannot take: `url`, `nodes` over 1,
/// `port`, `workers`.
fn single_server_checks(server: &serde_json::Map<String, Value>) -> Vec<Problem> {
    let mut problems = Vec::new();
    if server.get("url").is_some_and(|u| !u.is_null()) {
        problems.push(Problem {
            pointer: "/server/deployment".into(),
            target: Target::Key,
            message: "`server.deployment` launches workers and a router, but `server.url` points at a running server".into(),
            hint: Some("remove `url` to launch the deployment, or remove `deployment` and list the running router's workers in `server.workers`".into()),
        });
    }
    if server
        .get("nodes")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > 1)
    {
        problems.push(Problem {
            pointer: "/server/nodes".into(),
            target: Target::Key,
            message: "a deployment's workers are single-node servers: `server.nodes` over 1 cannot be combined with `server.deployment`".into(),
            hint: Some("remove `nodes`; to spread the workers over several hosts, set `deployment.nodes`".into()),
        });
    }
    if server.get("port").is_some_and(|p| !p.is_null()) {
        problems.push(Problem {
            pointer: "/server/port".into(),
            target: Target::Key,
            message: "`server.port` is a single server's port; a deployment's router listens on `deployment.router.port` and servebench picks each worker's".into(),
            hint: Some("move it to `deployment.router.port`".into()),
        });
    }
    if server.get("workers").is_some_and(|w| !w.is_null()) {
        problems.push(Problem {
            pointer: "/server/workers".into(),
            target: Target::Key,
            message: "`server.workers` lists a running router's workers; a deployment's workers are the ones it launches".into(),
            hint: Some("remove `server.workers`: each launched worker is scraped already".into()),
        });
    }
    problems
}

/// Regular workers or prefill-decode roles, not a mix: each role's counts and arguments, and
/// an engine that has the roles.
fn role_checks(
    server: &serde_json::Map<String, Value>,
    dep: &serde_json::Map<String, Value>,
    pd: bool,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let at = |field: &str| format!("/server/deployment/{field}");
    let set = |k: &str| dep.get(k).is_some_and(|v| !v.is_null());
    if pd && set("workers") {
        problems.push(Problem {
            pointer: at("workers"),
            target: Target::Key,
            message: "`workers` is for regular workers; a disaggregated deployment has `prefill` and `decode` workers".into(),
            hint: Some("give either `workers: N`, or `prefill: P` and `decode: D`".into()),
        });
    }
    if pd {
        for (have, missing) in [("prefill", "decode"), ("decode", "prefill")] {
            if set(have) && !set(missing) {
                problems.push(Problem {
                    pointer: at(have),
                    target: Target::Key,
                    message: format!(
                        "a disaggregated deployment needs {missing} workers too: `{have}` is given, `{missing}` is not"
                    ),
                    hint: Some(format!("add `{missing}: 1` (or more)")),
                });
            }
        }
        if dep.get("worker_args").is_some_and(|a| !a.is_null()) {
            problems.push(Problem {
                pointer: at("worker_args"),
                target: Target::Key,
                message: "`worker_args` is for regular workers".into(),
                hint: Some("use `prefill_args` and `decode_args`".into()),
            });
        }
        if let Some(engine) = server.get("engine").and_then(Value::as_str)
            && !matches!(engine, "sglang" | "sim")
        {
            problems.push(Problem {
                pointer: "/server/engine".into(),
                target: Target::Value,
                message: format!(
                    "prefill-decode disaggregation is SGLang's (`--disaggregation-mode`): engine `{engine}` has no prefill or decode role"
                ),
                hint: Some("use `engine: sglang` (or `sim`), or regular `workers: N`".into()),
            });
        }
    } else {
        for k in ["prefill_args", "decode_args"] {
            if dep.get(k).is_some_and(|a| !a.is_null()) {
                problems.push(Problem {
                    pointer: at(k),
                    target: Target::Key,
                    message: format!("`{k}` is for a disaggregated deployment, which this is not"),
                    hint: Some("use `worker_args`, or give `prefill` and `decode` counts".into()),
                });
            }
        }
    }
    problems
}

/// `worker_args` has no more entries than there are regular workers.
fn worker_args_checks(dep: &serde_json::Map<String, Value>) -> Vec<Problem> {
    let mut problems = Vec::new();
    let at = |field: &str| format!("/server/deployment/{field}");
    let count = |k: &str| dep.get(k).and_then(Value::as_u64).unwrap_or(0);
    if let Some(args) = dep.get("worker_args").and_then(Value::as_array) {
        let n = count("workers").max(1);
        if args.len() as u64 > n {
            problems.push(Problem {
                pointer: format!("{}/{n}", at("worker_args")),
                target: Target::Value,
                message: format!(
                    "`worker_args` has {} entries for {n} worker(s): the ones past worker {} would be ignored",
                    args.len(),
                    n - 1
                ),
                hint: Some(format!(
                    "set `workers: {}` or remove the extra entries",
                    args.len()
                )),
            });
        }
    }
    problems
}

/// `router.args` leaves alone the flags servebench sets itself.
fn router_args_checks(dep: &serde_json::Map<String, Value>) -> Vec<Problem> {
    let mut problems = Vec::new();
    // Flags servebench sets itself: one given twice would be refused by the router, or give
    // it a second listener servebench does not know.
    if let Some(args) = dep
        .get("router")
        .and_then(|r| r.get("args"))
        .and_then(Value::as_object)
    {
        for key in args.keys() {
            let bare = key.trim_start_matches('-');
            if OWN_ROUTER_FLAGS.contains(&bare) {
                problems.push(Problem {
                    pointer: format!("/server/deployment/router/args/{key}"),
                    target: Target::Key,
                    message: format!("servebench sets the router's `--{bare}` itself"),
                    hint: Some(match bare {
                        "policy" | "prefill-policy" | "decode-policy" => {
                            "use `router.policy` (or `prefill_policy`, `decode_policy`)".into()
                        }
                        "port" => "use `router.port`".into(),
                        _ => "remove it from `router.args`".into(),
                    }),
                });
            }
        }
    }
    problems
}

/// `nodes` and `placement` against the `total` workers: every node but the router's holds a
/// worker, and each placement names a node of the deployment's.
fn placement_checks(dep: &serde_json::Map<String, Value>, total: u64) -> Vec<Problem> {
    let mut problems = Vec::new();
    let nodes = dep.get("nodes").and_then(Value::as_u64);
    let placement = dep.get("placement").and_then(Value::as_array);
    let Some(nodes) = nodes else {
        if placement.is_some_and(|p| !p.is_empty()) {
            problems.push(Problem {
                pointer: "/server/deployment/placement".into(),
                target: Target::Key,
                message: "`placement` names nodes, but the deployment has one (`nodes` is not set)"
                    .into(),
                hint: Some("set `nodes` to the number of hosts the workers are spread over".into()),
            });
        }
        return problems;
    };
    let Some(placement) = placement.filter(|p| !p.is_empty()) else {
        if nodes > total {
            problems.push(Problem {
                pointer: "/server/deployment/nodes".into(),
                target: Target::Value,
                message: format!(
                    "the deployment is spread over {nodes} nodes but has {total} worker(s): node {total} and after would hold none"
                ),
                hint: Some(format!("set `nodes: {total}` or launch more workers")),
            });
        }
        return problems;
    };
    if placement.len() as u64 != total {
        problems.push(Problem {
            pointer: "/server/deployment/placement".into(),
            target: Target::Value,
            message: format!(
                "`placement` names {} node(s) for {total} worker(s): it needs one per worker, in launch order (prefill before decode)",
                placement.len()
            ),
            hint: Some(format!("give {total} node numbers")),
        });
    }
    for (i, n) in placement.iter().enumerate() {
        if let Some(n) = n.as_u64().filter(|&n| n >= nodes) {
            problems.push(Problem {
                pointer: format!("/server/deployment/placement/{i}"),
                target: Target::Value,
                message: format!(
                    "node {n} is not one of the deployment's {nodes} nodes (0 to {})",
                    nodes - 1
                ),
                hint: Some(format!(
                    "use a node from 0 to {}, or set `nodes: {}`",
                    nodes - 1,
                    n + 1
                )),
            });
        }
    }
    for node in 1..nodes {
        if !placement.iter().any(|n| n.as_u64() == Some(node)) {
            problems.push(Problem {
                pointer: "/server/deployment/placement".into(),
                target: Target::Value,
                message: format!("node {node} of the deployment's {nodes} holds no worker"),
                hint: Some(format!(
                    "place a worker on node {node}, or set `nodes: {node}`"
                )),
            });
        }
    }
    problems
}

/// The router flags servebench always sets.
pub(crate) const OWN_ROUTER_FLAGS: &[&str] = &[
    "host",
    "port",
    "policy",
    "prefill-policy",
    "decode-policy",
    "worker-urls",
    "pd-disaggregation",
    "prefill",
    "decode",
    "prometheus-host",
    "prometheus-port",
    "log-level",
    "log-dir",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_deployment_plans_its_workers_with_their_own_flags() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "workers": 3,
            "worker_args": [{"mem-fraction-static": 0.8}],
            "router": {"policy": "round_robin"}
        }))
        .unwrap();
        let plan = d.plan();
        assert_eq!(
            plan.iter().map(WorkerPlan::name).collect::<Vec<_>>(),
            ["worker0", "worker1", "worker2"]
        );
        assert_eq!(plan[0].args.len(), 1);
        assert!(plan[1].args.is_empty());
        assert!(!d.disaggregated());
        assert_eq!(d.router.policy.to_string(), "round_robin");
    }

    #[test]
    fn a_disaggregated_deployment_plans_prefill_before_decode() {
        let d: Deployment =
            serde_json::from_value(serde_json::json!({"prefill": 1, "decode": 2})).unwrap();
        assert_eq!(
            d.plan().iter().map(WorkerPlan::name).collect::<Vec<_>>(),
            ["prefill0", "decode0", "decode1"]
        );
        assert_eq!(d.router.policy, RouterPolicy::CacheAware);
    }

    #[test]
    fn workers_go_round_the_nodes_unless_placed() {
        let d: Deployment =
            serde_json::from_value(serde_json::json!({"workers": 3, "nodes": 2})).unwrap();
        assert_eq!((0..3).map(|i| d.node_of(i)).collect::<Vec<_>>(), [0, 1, 0]);
        let d: Deployment = serde_json::from_value(
            serde_json::json!({"prefill": 1, "decode": 2, "nodes": 2, "placement": [0, 1, 1]}),
        )
        .unwrap();
        assert_eq!((0..3).map(|i| d.node_of(i)).collect::<Vec<_>>(), [0, 1, 1]);
        let one: Deployment = serde_json::from_value(serde_json::json!({"workers": 2})).unwrap();
        assert_eq!((one.node_count(), one.node_of(1)), (1, 0));
    }

    fn problems(server: Value) -> Vec<String> {
        checks(&serde_json::json!({ "server": server }))
            .into_iter()
            .map(|p| format!("{}: {}", p.pointer, p.message))
            .collect()
    }

    #[test]
    fn contradictions_are_named_where_they_are() {
        assert!(problems(serde_json::json!({"deployment": {"workers": 2}})).is_empty());
        let p = problems(serde_json::json!({"url": "http://x:1", "deployment": {"workers": 2}}));
        assert!(p[0].starts_with("/server/deployment: "), "{p:?}");
        let p = problems(serde_json::json!({"deployment": {"prefill": 1}}));
        assert_eq!(
            p,
            [
                "/server/deployment/prefill: a disaggregated deployment needs decode workers too: `prefill` is given, `decode` is not"
            ]
        );
        let p = problems(
            serde_json::json!({"engine": "vllm", "deployment": {"prefill": 1, "decode": 1}}),
        );
        assert!(p[0].starts_with("/server/engine: "), "{p:?}");
        let p =
            problems(serde_json::json!({"deployment": {"workers": 1, "worker_args": [{}, {}]}}));
        assert!(
            p[0].starts_with("/server/deployment/worker_args/1: "),
            "{p:?}"
        );
        let p = problems(serde_json::json!({"deployment": {"workers": 65}}));
        assert!(p[0].contains("at most 64"), "{p:?}");
        let p = problems(serde_json::json!({"deployment": {"workers": 2, "nodes": 3}}));
        assert_eq!(
            p,
            [
                "/server/deployment/nodes: the deployment is spread over 3 nodes but has 2 worker(s): node 2 and after would hold none"
            ]
        );
        let p = problems(serde_json::json!({"deployment": {"workers": 2, "placement": [0, 0]}}));
        assert!(p[0].starts_with("/server/deployment/placement: "), "{p:?}");
        let p = problems(
            serde_json::json!({"deployment": {"prefill": 1, "decode": 2, "nodes": 3, "placement": [0, 3, 1]}}),
        );
        assert_eq!(
            p,
            [
                "/server/deployment/placement/1: node 3 is not one of the deployment's 3 nodes (0 to 2)",
                "/server/deployment/placement: node 2 of the deployment's 3 holds no worker",
            ]
        );
        let p = problems(
            serde_json::json!({"deployment": {"workers": 3, "nodes": 2, "placement": [0, 1]}}),
        );
        assert!(p[0].contains("names 2 node(s) for 3 worker(s)"), "{p:?}");
        let p = problems(
            serde_json::json!({"deployment": {"workers": 2, "router": {"args": {"policy": "random"}}}}),
        );
        assert!(
            p[0].starts_with("/server/deployment/router/args/policy: "),
            "{p:?}"
        );
    }
}
