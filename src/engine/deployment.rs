//! A routed deployment's command lines (`server.deployment`): each worker's server (the
//! group's, its own flags and its role's merged over them) and SGLang's router in front of
//! them. The runner starts them (`run::server::deployment`); the plan shows them.

use indexmap::IndexMap;

use servebench_model::spec::deployment::{Deployment, WorkerPlan, WorkerRole};
use servebench_model::spec::types::{ArgValue, Server};

use super::{LaunchCommand, LaunchError};

/// A worker's own server: the group's, its flags merged over `args` (with the group's
/// `engine_args`), and a prefill or decode worker's role flags.
pub(crate) fn worker_server(
    server: &Server,
    plan: &WorkerPlan,
    bootstrap_port: Option<u16>,
) -> Server {
    let mut args = super::effective_args(server);
    for (k, v) in &plan.args {
        args.insert(k.clone(), v.clone());
    }
    match plan.role {
        WorkerRole::Regular => {}
        role => {
            args.insert(
                "disaggregation-mode".into(),
                ArgValue::Str(role.to_string()),
            );
            if let Some(p) = bootstrap_port {
                args.insert(
                    "disaggregation-bootstrap-port".into(),
                    ArgValue::Int(i64::from(p)),
                );
            }
        }
    }
    Server {
        args,
        engine_args: IndexMap::new(),
        port: None,
        deployment: None,
        ..server.clone()
    }
}

/// The router's command line: its launcher, servebench's own flags (loopback, the port, a
/// loopback Prometheus listener, debug logging that names each request's worker), the
/// policy, the workers, then the spec's `router.args`.
pub(crate) fn router_command(
    dep: &Deployment,
    port: u16,
    prometheus_port: u16,
    workers: &[(WorkerRole, String, Option<u16>)],
) -> Result<LaunchCommand, LaunchError> {
    let r = &dep.router;
    let mut argv: Vec<String> = match &r.launcher {
        Some(l) if l.is_empty() => return Err(LaunchError::EmptyRouterLauncher),
        Some(l) => l.clone(),
        None => r.kind.launcher().iter().map(|s| s.to_string()).collect(),
    };
    argv.extend(
        [
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            &prometheus_port.to_string(),
            "--log-level",
            "debug",
        ]
        .map(String::from),
    );
    if dep.disaggregated() {
        argv.push("--pd-disaggregation".into());
        argv.extend(["--policy".into(), r.policy.to_string()]);
        if let Some(p) = r.prefill_policy {
            argv.extend(["--prefill-policy".into(), p.to_string()]);
        }
        if let Some(p) = r.decode_policy {
            argv.extend(["--decode-policy".into(), p.to_string()]);
        }
        for (role, url, bootstrap) in workers {
            match role {
                WorkerRole::Prefill => {
                    argv.extend(["--prefill".into(), url.clone()]);
                    argv.push(bootstrap.map_or_else(|| "none".into(), |p| p.to_string()));
                }
                _ => argv.extend(["--decode".into(), url.clone()]),
            }
        }
    } else {
        argv.extend(["--policy".into(), r.policy.to_string()]);
        argv.push("--worker-urls".into());
        argv.extend(workers.iter().map(|(_, url, _)| url.clone()));
    }
    argv.extend(super::flag_args(&r.args)?);
    let program = argv.remove(0);
    Ok(LaunchCommand {
        program,
        args: argv,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(v: serde_json::Value) -> Deployment {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_router_gets_its_workers_and_policy_and_servebench_its_listeners() {
        let d = dep(
            serde_json::json!({"workers": 2, "router": {"policy": "round_robin",
            "args": {"cache-threshold": 0.5}}}),
        );
        let w = [
            (WorkerRole::Regular, "http://127.0.0.1:1".into(), None),
            (WorkerRole::Regular, "http://127.0.0.1:2".into(), None),
        ];
        let c = router_command(&d, 9, 8, &w).unwrap();
        assert_eq!(c.program, "python");
        assert_eq!(
            c.args.join(" "),
            "-m sglang_router.launch_router --host 127.0.0.1 --port 9 --prometheus-host 127.0.0.1 \
             --prometheus-port 8 --log-level debug --policy round_robin --worker-urls \
             http://127.0.0.1:1 http://127.0.0.1:2 --cache-threshold 0.5"
        );
    }

    /// The Shepherd Model Gateway, sglang-router's successor, takes the same flags after
    /// `smg launch` (read from smg 1.13.0's `router_args.py`).
    #[test]
    fn smg_is_launched_with_the_same_flags() {
        let d =
            dep(serde_json::json!({"workers": 2, "router": {"kind": "smg", "policy": "manual"}}));
        let w = [
            (WorkerRole::Regular, "http://127.0.0.1:1".into(), None),
            (WorkerRole::Regular, "http://127.0.0.1:2".into(), None),
        ];
        let c = router_command(&d, 9, 8, &w).unwrap();
        assert_eq!(c.program, "smg");
        assert_eq!(
            c.args.join(" "),
            "launch --host 127.0.0.1 --port 9 --prometheus-host 127.0.0.1 --prometheus-port 8 \
             --log-level debug --policy manual --worker-urls http://127.0.0.1:1 http://127.0.0.1:2"
        );
    }

    #[test]
    fn a_disaggregated_router_pairs_prefill_with_its_bootstrap_port() {
        let d = dep(serde_json::json!({"prefill": 1, "decode": 2,
            "router": {"policy": "round_robin", "decode_policy": "power_of_two"}}));
        let w = [
            (WorkerRole::Prefill, "http://127.0.0.1:1".into(), Some(7)),
            (WorkerRole::Decode, "http://127.0.0.1:2".into(), None),
            (WorkerRole::Decode, "http://127.0.0.1:3".into(), None),
        ];
        let c = router_command(&d, 9, 8, &w).unwrap();
        let tail = c.args.join(" ");
        assert!(
            tail.ends_with(
                "--pd-disaggregation --policy round_robin --decode-policy power_of_two \
                 --prefill http://127.0.0.1:1 7 --decode http://127.0.0.1:2 --decode http://127.0.0.1:3"
            ),
            "{tail}"
        );
    }

    #[test]
    fn a_worker_is_the_groups_server_with_its_own_flags_and_role() {
        let server: Server = serde_json::from_value(serde_json::json!({
            "engine": "sim", "args": {"chunked-prefill-size": 512},
            "deployment": {"prefill": 1, "decode": 1,
                "prefill_args": {"chunked-prefill-size": 1024}}
        }))
        .unwrap();
        let plans = server.deployment.as_ref().unwrap().plan();
        let p = worker_server(&server, &plans[0], Some(7000));
        assert_eq!(
            p.args.get("chunked-prefill-size"),
            Some(&ArgValue::Int(1024))
        );
        assert_eq!(
            p.args.get("disaggregation-mode"),
            Some(&ArgValue::Str("prefill".into()))
        );
        assert_eq!(
            p.args.get("disaggregation-bootstrap-port"),
            Some(&ArgValue::Int(7000))
        );
        assert!(p.deployment.is_none());
        let d = worker_server(&server, &plans[1], None);
        assert_eq!(
            d.args.get("chunked-prefill-size"),
            Some(&ArgValue::Int(512))
        );
        assert_eq!(
            d.args.get("disaggregation-mode"),
            Some(&ArgValue::Str("decode".into()))
        );
    }
}
