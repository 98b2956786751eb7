//! `servebench plan` as text: the points, the server groups (one launch each) and the time
//! estimate. A pure function of values, so the output is tested without running the binary.

use std::fmt::{self, Write};

use super::Plan;
use super::estimate::{Estimate, EstimateError};
use servebench_model::spec::LoadedSpec;
use servebench_model::spec::types::{ClientPlacement, Measure, Server};
use servebench_model::text::{count, count_s};

/// The plan as `servebench plan` prints it. `estimate` is the source's estimate, or why it
/// has none (said on the last line instead of a total; the per-point times are then left out).
pub(crate) fn render(
    spec: &LoadedSpec,
    plan: &Plan,
    estimate: &Result<Estimate, EstimateError>,
) -> String {
    let mut out = String::new();
    write_plan(&mut out, spec, plan, estimate).expect("writing to a String cannot fail");
    out
}

fn write_plan(
    out: &mut String,
    spec: &LoadedSpec,
    plan: &Plan,
    estimate: &Result<Estimate, EstimateError>,
) -> fmt::Result {
    let spec_dir = spec.path.parent().unwrap_or(std::path::Path::new(""));
    let requests = plan.request_count(spec_dir);
    let unmeasured = if requests.sent > requests.measured {
        format!(" ({} sent with warm-up and cool-down)", requests.sent)
    } else {
        String::new()
    };
    writeln!(
        out,
        "{}: {}, {}, {}, {}{unmeasured}",
        spec.name,
        count_s(plan.point_count(), "point"),
        count_s(plan.groups.len(), "server group"),
        count(plan.launches(), "launch", "launches"),
        count(
            requests.measured as usize,
            "measured request",
            "measured requests"
        )
    )?;
    // Every point shares the host, the client and the failure policy (they cannot be swept).
    if let Some(first) = spec.points.first().map(|p| &p.experiment)
        && !first.host.is_local()
    {
        let slurm = first.host.slurm().is_some();
        let client = match first.placement() {
            ClientPlacement::Host if slurm => "allocation, next to rank 0",
            ClientPlacement::Host => "host, against localhost",
            ClientPlacement::Local if slurm => "local machine, at the first node's address",
            ClientPlacement::Local => "local machine, through a port forward",
        };
        writeln!(
            out,
            "host {} (client on the {client}; on_failure: {})",
            first.host.label(),
            first.on_failure
        )?;
    }
    for (i, g) in plan.groups.iter().enumerate() {
        if i > 0 {
            writeln!(out, "\n(restart: the server configuration changes)")?;
        }
        let ready = match estimate {
            Ok(est) if g.server.url.is_none() => {
                let launch = est.groups.get(i).and_then(|e| e.launch_s);
                format!(" (ready {})", about(launch))
            }
            _ => String::new(),
        };
        writeln!(out, "\n{}: {}{ready}", g.id, launch(&g.server))?;
        for p in &g.points {
            let time = match estimate {
                Ok(est) => format!("  {}", about(est.point(&p.id))),
                Err(_) => String::new(),
            };
            write_point(out, p, &time, spec_dir)?;
        }
    }
    write_pool(out, spec, plan, estimate)?;
    write_estimate(out, plan, estimate)
}

/// A point's line in the plan: what it sends (requests, pairs, sessions, an open loop or a
/// capacity search), in how many rounds, its cache policy and estimated time (`time`).
fn write_point(
    out: &mut String,
    p: &servebench_model::spec::Point,
    time: &str,
    spec_dir: &std::path::Path,
) -> fmt::Result {
    let e = &p.experiment;
    let samples = match e.method.resolve() {
        _ if let Some(a) = e.agentic() => {
            let which = match (a.sessions, a.preset) {
                (Some(n), _) => format!("{} of", count_s(n as usize, "session")),
                (None, Some(_)) => "the sessions of".to_string(),
                (None, None) => "every session of".to_string(),
            };
            let again = a.preset.map_or(String::new(), |p| {
                format!(" (`preset: {p}`: again and again until the duration)")
            });
            format!(
                "{which} {} replayed{again}, {} live at once",
                a.file.display(),
                a.live
            )
        }
        _ if let Some(s) = e.sessions() => match &s.file {
            Some(f) => format!("every conversation of {}, {} at once", f.display(), s.users),
            None => format!(
                "{} of {}",
                count_s(s.users as usize, "session"),
                count_s(s.turns.unwrap_or(1) as usize, "turn")
            ),
        },
        Measure::Streaming => count_s(e.requests as usize, "request"),
        Measure::TwoPoint { .. } => count(
            e.requests as usize,
            "two-point pair of requests",
            "two-point pairs of requests",
        ),
    };
    if let Some(s) = &e.search {
        // A search: its probes are points made as it runs; the bound is what the
        // time is estimated with.
        let bound = super::search::probe_bound(&s.into());
        writeln!(
            out,
            "  {}  capacity search over {} from {} to {} {}, resolution {}%: at most {}, each {}, cache {}{time}",
            p.label(),
            s.over,
            servebench_model::text::sig3(s.start),
            servebench_model::text::sig3(s.max),
            s.over.unit(),
            servebench_model::text::sig3(s.resolution.fraction() * 100.0),
            count_s(bound, "probe"),
            match e.open_loop() {
                Some(_) => "an open-loop point at the probed rate".to_string(),
                None => format!("{samples} x {}", count_s(e.repeat as usize, "round")),
            },
            e.cache.policy
        )?;
        return Ok(());
    }
    if e.open_loop().is_some() {
        let n = super::point_requests(p, spec_dir);
        writeln!(
            out,
            "  {}  open loop: {} measured of {} sent, cache {}{time}",
            p.label(),
            count_s(n.measured as usize, "request"),
            n.sent,
            e.cache.policy
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "  {}  {samples} x {}, concurrency {}, cache {}{time}",
        p.label(),
        count_s(e.repeat as usize, "round"),
        e.agentic()
            .map(|a| a.live)
            .or(e.sessions().map(|s| s.users))
            .unwrap_or(e.concurrency),
        e.cache.policy
    )?;
    Ok(())
}

/// The plan's estimate line: the total and where it comes from, or why there is none.
fn write_estimate(
    out: &mut String,
    plan: &Plan,
    estimate: &Result<Estimate, EstimateError>,
) -> fmt::Result {
    match estimate {
        Ok(est)
            if !est.unknown_points().is_empty()
                && est.unknown_points().len()
                    == plan.groups.iter().map(|g| g.points.len()).sum::<usize>() =>
        {
            writeln!(
                out,
                "\nestimate: none: {} gives no point a time (none of them measured anything); give `--profile NAME` or `--from` a run that measured",
                est.source
            )
        }
        Ok(est) => {
            let unknown = est.unknown_points();
            let missing = if unknown.is_empty() {
                String::new()
            } else {
                format!("; not counted, no estimate for: {}", unknown.join(", "))
            };
            writeln!(
                out,
                "\nestimate: {} from {}{missing}",
                about(Some(est.total_s())),
                est.source
            )
        }
        Err(e) => writeln!(out, "\nestimate: none: {e}"),
    }
}

/// For a host pool (`hosts:`) or a multi-node server: which hosts each group runs on and
/// when, and the pool's estimated wall time against one host's.
fn write_pool(
    out: &mut String,
    spec: &LoadedSpec,
    plan: &Plan,
    estimate: &Result<Estimate, EstimateError>,
) -> fmt::Result {
    let Some(first) = spec.points.first().map(|p| &p.experiment) else {
        return Ok(());
    };
    let multi_node = plan.groups.iter().any(|g| g.server.node_count() > 1);
    if first.hosts.is_empty() && !multi_node {
        return Ok(());
    }
    let hosts: Vec<String> = first.pool().iter().map(|h| h.label()).collect();
    let group_s = |i: usize| -> f64 {
        // Without an estimate every group counts alike, so the assignment still shows how the
        // pool shares them out.
        let Ok(est) = estimate else { return 1.0 };
        let g = &plan.groups[i];
        est.groups.get(i).and_then(|e| e.launch_s).unwrap_or(0.0)
            + g.points
                .iter()
                .filter_map(|p| est.point(&p.id))
                .sum::<f64>()
    };
    // A Slurm host runs all of a group's ranks in its one allocation (its size is checked
    // before a run); a machine runs one.
    let slurm = first.pool().iter().any(|h| h.slurm().is_some());
    let groups: Vec<(String, usize, f64)> = plan
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let need = if slurm {
                1
            } else {
                g.server.node_count() as usize
            };
            (g.id.clone(), need, group_s(i))
        })
        .collect();
    writeln!(
        out,
        "
pool: {} ({}); one server group per host at a time, in plan order; on_host_failure: {}",
        count_s(hosts.len(), "host"),
        hosts.join(", "),
        first.on_host_failure.unwrap_or_default()
    )?;
    let schedule = match super::pool::schedule(&groups, hosts.len()) {
        Ok(s) => s,
        Err(e) => return writeln!(out, "  cannot run: {e}"),
    };
    for slot in &schedule.slots {
        let on: Vec<&str> = slot.hosts.iter().map(|&i| hosts[i].as_str()).collect();
        let when = match estimate {
            Ok(_) => format!(
                "  {} to {}",
                servebench_model::text::duration(slot.start_s),
                servebench_model::text::duration(slot.end_s)
            ),
            Err(_) => String::new(),
        };
        writeln!(out, "  {} on {}{when}", slot.group, on.join(" + "))?;
    }
    if estimate.is_ok() {
        writeln!(
            out,
            "estimated wall time on the pool: {} (one host: {})",
            about(Some(schedule.wall_s)),
            about(Some(schedule.serial_s))
        )?;
    }
    Ok(())
}

/// What a group does to get its server: the launch command line as it will run (the port is
/// chosen at launch), or the external URL.
fn launch(s: &Server) -> String {
    if let (None, Some(d)) = (&s.url, &s.deployment) {
        return deployment(s, d);
    }
    match &s.url {
        Some(u) => format!("external server {u} (not started or stopped)"),
        None => match crate::engine::launch_command(s, "servebench", 0) {
            Ok(c) => {
                let argv = c.argv();
                // The port is picked when the server starts; show where it goes.
                let argv: Vec<String> = argv
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        let after_port = i > 0 && matches!(argv[i - 1].as_str(), "--port" | "-p");
                        if after_port && a == "0" {
                            "PORT".to_string()
                        } else {
                            a.clone()
                        }
                    })
                    .collect();
                let engine = match s.engine {
                    servebench_model::spec::types::Engine::Sim => "the simulator (SGLang's API)",
                    e => crate::engine::adapter(e).display,
                };
                let simulated =
                    if s.simulate && s.engine != servebench_model::spec::types::Engine::Sim {
                        " (simulated)"
                    } else {
                        ""
                    };
                format!(
                    "launch {engine}{simulated}: {}",
                    servebench_model::text::shell_join(&servebench_model::secrets::redact_argv(
                        &argv
                    ))
                )
            }
            // `validate` refuses such a server; the plan says why rather than guessing.
            Err(e) => format!("launch {} (cannot be built: {e})", s.engine),
        },
    }
}

/// A deployment's launch: each worker's command, then the router's (ports picked at launch).
fn deployment(s: &Server, d: &servebench_model::spec::deployment::Deployment) -> String {
    use crate::engine::deployment::{router_command, worker_server};
    let mut lines = Vec::new();
    let mut for_router = Vec::new();
    let spread = d.node_count() > 1;
    for (i, plan) in d.plan().into_iter().enumerate() {
        let bootstrap =
            (plan.role == servebench_model::spec::deployment::WorkerRole::Prefill).then_some(0);
        let w = worker_server(s, &plan, bootstrap);
        let node = d.node_of(i);
        // A worker off the router's node listens on its host's address, known at launch.
        let address = if node == 0 {
            "127.0.0.1".to_string()
        } else {
            format!("NODE{node}_ADDRESS")
        };
        let mut line = launch(&w).replace(
            "--disaggregation-bootstrap-port 0",
            "--disaggregation-bootstrap-port BOOTSTRAP_PORT",
        );
        if node > 0 {
            line = line.replace("--host 127.0.0.1", &format!("--host {address}"));
        }
        let at = if spread {
            format!(" (node {node})")
        } else {
            String::new()
        };
        lines.push(format!("    {}{at}: {line}", plan.name()));
        for_router.push((
            plan.role,
            format!("http://{address}:PORT_{}", plan.name()),
            bootstrap,
        ));
    }
    let router = match router_command(d, 0, 0, &for_router) {
        Ok(c) => {
            servebench_model::text::shell_join(&servebench_model::secrets::redact_argv(&c.argv()))
                .replace("--port 0", "--port PORT")
                .replace("--prometheus-port 0", "--prometheus-port PORT")
                // A prefill worker's bootstrap port follows its URL (`--prefill URL 0`).
                .replace(" 0 --", " BOOTSTRAP_PORT --")
        }
        Err(e) => format!("(cannot be built: {e})"),
    };
    let over = if spread {
        format!(" over {} nodes", d.node_count())
    } else {
        String::new()
    };
    let router_at = if spread { " (node 0)" } else { "" };
    format!(
        "launch a deployment of {} workers{over}, each ready before the router:\n{}\n    then sglang-router{router_at}: {router}",
        lines.len(),
        lines.join("\n")
    )
}

/// `~12.3 s`, or `~?` when the source has nothing for it.
fn about(seconds: Option<f64>) -> String {
    seconds.map_or("~?".to_string(), |s| {
        format!("~{}", servebench_model::text::duration(s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::estimate::{GroupEstimate, PointEstimate};

    fn spec(extra: &str) -> LoadedSpec {
        servebench_model::spec::load_str(
            "t.yaml",
            &format!(
                "name: t\nserver:\n  engine: sim\n  model: m\n  args: {{ profile: fast }}\n\
                 workload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 4\n\
                 sweep:\n  ctx: [128, 4096]\n  server.args.chunked-prefill-size: [512, 1024]\n\
                 requests: 3\n{extra}"
            ),
        )
        .expect("the test spec loads")
    }

    /// A made-up estimate: launches of 2 s, point p00N takes N minutes; p004 unknown.
    fn estimate(plan: &Plan) -> Estimate {
        Estimate {
            source: "a test".into(),
            groups: plan
                .groups
                .iter()
                .map(|g| GroupEstimate {
                    id: g.id.clone(),
                    launch_s: Some(2.0),
                    points: g
                        .points
                        .iter()
                        .map(|p| PointEstimate {
                            id: p.id.clone(),
                            seconds: (p.id != "p004")
                                .then(|| 60.0 * p.id[1..].parse::<f64>().unwrap()),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_server_sweep_is_two_launches_with_a_restart_between() {
        let spec = spec("");
        let plan = Plan::new(&spec.points);
        let text = render(&spec, &plan, &Ok(estimate(&plan)));
        assert_eq!(
            text,
            "\
t: 4 points, 2 server groups, 2 launches, 12 measured requests

g1: launch the simulator (SGLang's API): servebench sim --model-path m --host 127.0.0.1 --port PORT --profile fast --chunked-prefill-size 512 (ready ~2.00 s)
  p001 ctx=128 chunked-prefill-size=512  3 requests x 1 round, concurrency 1, cache cold  ~1m 00s
  p003 ctx=4096 chunked-prefill-size=512  3 requests x 1 round, concurrency 1, cache cold  ~3m 00s

(restart: the server configuration changes)

g2: launch the simulator (SGLang's API): servebench sim --model-path m --host 127.0.0.1 --port PORT --profile fast --chunked-prefill-size 1024 (ready ~2.00 s)
  p002 ctx=128 chunked-prefill-size=1024  3 requests x 1 round, concurrency 1, cache cold  ~2m 00s
  p004 ctx=4096 chunked-prefill-size=1024  3 requests x 1 round, concurrency 1, cache cold  ~?

estimate: ~6m 04s from a test; not counted, no estimate for: p004
"
        );
    }

    #[test]
    fn a_source_that_times_no_point_gives_no_estimate_not_zero() {
        // An earlier run whose every point failed before measuring: "~0 s" was printed.
        let spec = spec("");
        let plan = Plan::new(&spec.points);
        let mut est = estimate(&plan);
        for g in &mut est.groups {
            for p in &mut g.points {
                p.seconds = None;
            }
        }
        let text = render(&spec, &plan, &Ok(est));
        assert!(
            text.ends_with("\nestimate: none: a test gives no point a time (none of them measured anything); give `--profile NAME` or `--from` a run that measured\n"),
            "{text}"
        );
        assert!(!text.contains("~0 s"), "{text}");
    }

    #[test]
    fn a_two_point_plan_counts_both_requests_of_each_pair() {
        let spec = spec("method: two-point\nrepeat: 2\n");
        let plan = Plan::new(&spec.points);
        // 4 points x 2 rounds x 3 pairs x 2 requests.
        assert_eq!(plan.request_count(std::path::Path::new(".")).measured, 48);
        let text = render(&spec, &plan, &Ok(estimate(&plan)));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "t: 4 points, 2 server groups, 2 launches, 48 measured requests"
        );
        assert!(
            lines[3].ends_with(
                "3 two-point pairs of requests x 2 rounds, concurrency 1, cache cold  ~1m 00s"
            ),
            "{text}"
        );
    }

    #[test]
    fn an_ssh_host_and_a_missing_estimate_are_said() {
        let spec = spec(
            "host: ssh://bench@gpu-box-1\non_failure: skip-larger\ncache: { policy: as-is }\n",
        );
        let plan = Plan::new(&spec.points);
        let none = Err(EstimateError::NoModel {
            group: "g1".into(),
            external: false,
        });
        let text = render(&spec, &plan, &none);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            "host ssh://bench@gpu-box-1 (client on the host, against localhost; on_failure: skip-larger)"
        );
        assert_eq!(
            lines[3],
            "g1: launch the simulator (SGLang's API): servebench sim --model-path m --host 127.0.0.1 --port PORT --profile fast --chunked-prefill-size 512"
        );
        assert_eq!(
            lines[4],
            "  p001 ctx=128 chunked-prefill-size=512  3 requests x 1 round, concurrency 1, cache as-is"
        );
        assert!(
            text.ends_with(
                "\nestimate: none: g1: the server is a real engine and has no timing model; give \
                 `--profile NAME` (a sim profile shaped like its hardware) or `--from RUN_DIR` \
                 (an earlier run)\n"
            ),
            "{text}"
        );
    }
}
