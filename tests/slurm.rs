//! Runs on a real Slurm (the one-node cluster of `slurmd.rs`) with the simulator as the
//! engine: each server group in its own job, the server a job step, the measuring agent a step
//! next to it; cancels from outside, interrupts, a killed runner and `servebench down`, each
//! proven to leave nothing behind (no job in the queue, no process).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use crate::slurmd::{NODE, SlurmCluster};

/// A spec on the test cluster: two server groups (the simulator at two speeds: g1 quick, g2
/// `slow` times slower), `requests` each.
fn spec(name: &str, model: &str, slow: f64, requests: u32, extra_host: &str) -> String {
    format!(
        "name: {name}
host:
  slurm: {{ time: \"5\"{extra_host} }}
server:
  engine: sim
  model: {model}
  args: {{ profile: fast }}
  ready_timeout: 60s
workload:
  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}
  output_tokens: 100
sweep:
  server.args.sim-time-scale: [1, {slow}]
requests: {requests}
"
    )
}

/// `servebench ARGS` against the cluster, as a child whose output is piped.
fn servebench_on(cluster: &SlurmCluster, args: &[&Path]) -> std::process::Child {
    Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .args(args)
        .env("SLURM_CONF", &cluster.conf)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("servebench")
}

fn run_args<'a>(spec: &'a Path, out: &'a Path) -> Vec<&'a Path> {
    vec![
        Path::new("run"),
        spec,
        Path::new("--out"),
        out,
        Path::new("--quiet"),
    ]
}

/// Processes whose command line mentions `needle` (the test's own model name).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy() != me)
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(needle)
                .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// Nothing of the run is left: no job named for it in the queue, no process of its model.
#[track_caller]
fn assert_nothing_left(cluster: &SlurmCluster, run_name: &str, model: &str) {
    poll_until(
        Duration::from_secs(30),
        &format!(
            "jobs of {run_name} left: {:?}",
            cluster.jobs_named(run_name)
        ),
        || cluster.jobs_named(run_name).is_empty().then_some(()),
    );
    poll_until(
        Duration::from_secs(15),
        &format!("processes left: {:?}", processes_mentioning(model)),
        || processes_mentioning(model).is_empty().then_some(()),
    );
}

/// The run directory under `out` (the only one).
fn the_run_dir(out: &Path) -> Option<PathBuf> {
    let spec_dir = std::fs::read_dir(out).ok()?.flatten().next()?.path();
    std::fs::read_dir(spec_dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
}

/// Waits until group `group`'s server is recorded in meta.json and `records` requests of it
/// are on disk; its Slurm job id. Fails with the runner's output when it does not come.
fn wait_mid_point(
    out: &Path,
    group: &str,
    records: usize,
    child: &mut std::process::Child,
) -> (PathBuf, u64) {
    let point = format!("\"point\":\"p{:0>3}\"", &group[1..]);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let found = (|| {
            let dir = the_run_dir(out)?;
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).ok()?).ok()?;
            let job = meta["servers"]
                .as_array()?
                .iter()
                .find(|s| s["group"] == group)?["slurm"]["job_id"]
                .as_u64()?;
            let text = std::fs::read_to_string(dir.join("requests.jsonl")).ok()?;
            let n = text.lines().filter(|l| l.contains(&point)).count();
            (n >= records).then_some((dir, job))
        })();
        if let Some(f) = found {
            return f;
        }
        let ended = child.try_wait().ok().flatten().is_some();
        if ended || std::time::Instant::now() > deadline {
            let _ = child.kill();
            let mut text = String::new();
            use std::io::Read;
            if let Some(e) = child.stderr.as_mut() {
                let _ = e.read_to_string(&mut text);
            }
            panic!(
                "{group} never got {records} requests measured (runner ended: {ended}); run dir {:?}; runner said:\n{text}\npoints: {}",
                the_run_dir(out),
                the_run_dir(out)
                    .and_then(|d| std::fs::read_to_string(d.join("points.jsonl")).ok())
                    .unwrap_or_default()
                    .chars()
                    .take(3000)
                    .collect::<String>()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_slurm_run_measures_each_group_in_its_own_job_with_the_agent_next_to_the_server() {
    let cluster = SlurmCluster::get();
    let ws = Workspace::new();
    let model = format!("slurm-plain-{}", std::process::id());
    let _cleanup = cluster.cancel_on_drop("servebench-slurm-plain");
    let path = ws.write("s.yaml", &spec("slurm-plain", &model, 2.0, 2, ""));
    let out = ws.path().join("runs");
    let child = servebench_on(&cluster, &run_args(&path, &out));
    let done = child.wait_with_output().unwrap();
    assert!(done.status.success(), "{}\n{}", show(&done), cluster.logs());
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(stderr.contains("submitted Slurm job"), "{stderr}");
    assert!(
        stderr.contains("client in the allocation, next to rank 0"),
        "{stderr}"
    );
    assert!(stderr.contains("running on"), "{stderr}");
    let dir = the_run_dir(&out).unwrap();
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2);
    for p in &points {
        assert_eq!(p["status"], "ok", "{p}");
        assert_eq!(p["ok"], 2, "{p}");
    }
    let meta = read_json(&dir.join("meta.json"));
    let servers = meta["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "{meta}");
    let jobs: Vec<u64> = servers
        .iter()
        .map(|s| s["slurm"]["job_id"].as_u64().unwrap())
        .collect();
    assert_ne!(jobs[0], jobs[1], "one job per group");
    for s in servers {
        let j = &s["slurm"];
        assert_eq!(j["nodes"], serde_json::json!([NODE]), "{s}");
        assert_eq!(j["partition"], "debug", "{s}");
        // Step 0 picked the server's port on the node; step 1 is the server.
        assert_eq!(j["step"], format!("{}.1", j["job_id"]), "{s}");
        assert_eq!(j["ended"], true, "{s}");
        // This cluster keeps no accounting: the state comes from slurmctld.
        assert_eq!(j["accounting"], "scontrol", "{s}");
        assert_eq!(j["state"], "CANCELLED", "released by servebench: {s}");
        assert_eq!(s["stopped"], true, "{s}");
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains(&format!("Slurm job {} (`servebench-slurm-plain-", jobs[0])),
        "{report}"
    );
    assert!(
        report.contains(&format!("on {NODE}, partition debug")),
        "{report}"
    );
    assert_nothing_left(&cluster, "servebench-slurm-plain", &model);
}

#[test]
fn a_job_cancelled_mid_point_fails_that_point_with_its_cause_and_resume_measures_it() {
    let cluster = SlurmCluster::get();
    let ws = Workspace::new();
    let model = format!("slurm-resume-{}", std::process::id());
    let _cleanup = cluster.cancel_on_drop("servebench-slurm-resume");
    let path = ws.write("s.yaml", &spec("slurm-resume", &model, 5.0, 20, ""));
    let out = ws.path().join("runs");
    let mut child = servebench_on(&cluster, &run_args(&path, &out));
    let (dir, job) = wait_mid_point(&out, "g2", 2, &mut child);
    // Someone cancels g2's job while its point runs.
    let cancel = cluster.output("scancel", &[&job.to_string()]);
    assert!(cancel.trim().is_empty(), "{cancel}");
    let done = child.wait_with_output().unwrap();
    assert!(!done.status.success(), "{}", show(&done));
    let points = read_jsonl(&dir.join("points.jsonl"));
    let p2 = points.iter().find(|p| p["group"] == "g2").unwrap();
    assert_eq!(p2["failure"], "job-cancelled", "{p2}");
    assert!(
        p2["flags"]
            .to_string()
            .contains("Slurm job was cancelled from outside"),
        "{p2}"
    );
    assert_nothing_left(&cluster, "servebench-slurm-resume", &model);

    // Resume measures the cancelled point again, in a new job.
    let args: Vec<&Path> = vec![
        Path::new("run"),
        Path::new("--resume"),
        &dir,
        Path::new("--quiet"),
    ];
    let done = servebench_on(&cluster, &args).wait_with_output().unwrap();
    assert!(done.status.success(), "{}", show(&done));
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2, "{points:?}");
    assert!(points.iter().all(|p| p["status"] == "ok"), "{points:?}");
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["resumed_at"].as_array().unwrap().len(), 1);
    let g2_jobs: Vec<u64> = meta["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["group"] == "g2")
        .map(|s| s["slurm"]["job_id"].as_u64().unwrap())
        .collect();
    assert_eq!(g2_jobs.len(), 2, "{meta}");
    assert_ne!(g2_jobs[0], g2_jobs[1]);
    assert_nothing_left(&cluster, "servebench-slurm-resume", &model);
}

#[test]
fn ctrl_c_mid_point_cancels_the_job_and_a_killed_runners_job_is_cancelled_by_down() {
    let cluster = SlurmCluster::get();
    let ws = Workspace::new();
    let model = format!("slurm-int-{}", std::process::id());
    let _cleanup = cluster.cancel_on_drop("servebench-slurm-int");
    let path = ws.write("s.yaml", &spec("slurm-int", &model, 5.0, 20, ""));
    let out = ws.path().join("runs");
    let mut child = servebench_on(&cluster, &run_args(&path, &out));
    let (dir, _) = wait_mid_point(&out, "g2", 1, &mut child);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(1), "{}", show(&done));
    assert_nothing_left(&cluster, "servebench-slurm-int", &model);
    let meta = read_json(&dir.join("meta.json"));
    let g2 = meta["servers"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(g2["slurm"]["ended"], true, "{g2}");

    // A runner killed outright: its server step goes with srun, its job stays in the queue
    // until `servebench down` cancels it.
    let ws = Workspace::new();
    // g1 is the slow group here, so the runner dies in its point.
    let _cleanup_kill = cluster.cancel_on_drop("servebench-slurm-kill");
    let path = ws.write(
        "s.yaml",
        &spec("slurm-kill", &model, 5.0, 20, "").replace("[1, 5]", "[5, 1]"),
    );
    let out = ws.path().join("runs");
    let mut child = servebench_on(&cluster, &run_args(&path, &out));
    let (dir, job) = wait_mid_point(&out, "g1", 1, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !cluster.jobs_named("servebench-slurm-kill").is_empty(),
        "the job outlives a killed runner"
    );
    let done = Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("down")
        .arg(&dir)
        .env("SLURM_CONF", &cluster.conf)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&done.stdout).to_string() + &String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "Slurm job {job} (RUNNING) cancelled by servebench down"
        )),
        "{said}"
    );
    assert_nothing_left(&cluster, "servebench-slurm-kill", &model);
}

#[test]
fn a_time_limit_fails_the_point_with_its_cause_and_leaves_nothing() {
    // A real limit: Slurm counts them in whole minutes and checks them every 30 s, so this
    // test takes 60 to 95 s, with no turn held (nothing in it is timing-sensitive).
    let cluster = SlurmCluster::get();
    let ws = Workspace::new();
    let model = format!("slurm-limit-{}", std::process::id());
    let _cleanup = cluster.cancel_on_drop("servebench-slurm-limit");
    // g1 is the slow group here (about two minutes of requests), so the limit falls in its
    // point.
    let path = ws.write(
        "s.yaml",
        &spec("slurm-limit", &model, 5.0, 160, "")
            .replace("[1, 5]", "[5, 1]")
            .replace("time: \"5\"", "time: \"1\""),
    );
    let out = ws.path().join("runs");
    let started = std::time::Instant::now();
    let done = servebench_on(&cluster, &run_args(&path, &out))
        .wait_with_output()
        .unwrap();
    let dir = the_run_dir(&out).unwrap();
    let points = read_jsonl(&dir.join("points.jsonl"));
    let p1 = points
        .iter()
        .find(|p| p["group"] == "g1")
        .expect("g1 recorded");
    assert_eq!(p1["failure"], "time-limit", "{p1}\n{}", show(&done));
    assert!(
        p1["ok"].as_u64().unwrap() > 0,
        "what was measured is kept: {p1}"
    );
    assert!(
        p1["flags"].to_string().contains("raise host.slurm.time"),
        "{p1}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(55),
        "the limit is a minute"
    );
    let meta = read_json(&dir.join("meta.json"));
    let g1 = meta["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["group"] == "g1")
        .unwrap();
    assert_eq!(g1["slurm"]["state"], "TIMEOUT", "{meta}");
    assert_eq!(g1["slurm"]["reason"], "TimeLimit", "{meta}");
    // The run goes on: g2 gets a job of its own and is measured.
    let p2 = points
        .iter()
        .find(|p| p["group"] == "g2")
        .expect("g2 recorded");
    assert_eq!(p2["status"], "ok", "{p2}");
    assert_nothing_left(&cluster, "servebench-slurm-limit", &model);
}

#[test]
fn slurm_hosts_are_validated_and_planned_without_a_cluster() {
    let ws = Workspace::new();
    let good = ws.write(
        "good.yaml",
        &spec(
            "slurm-plan",
            "m",
            2.0,
            2,
            ", partition: gpu, gpus_per_node: 8, sbatch: [\"--exclusive\"]",
        ),
    );
    let out = servebench().arg("plan").arg(&good).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("host slurm (partition gpu, 1 node × 8 GPUs, time 5, one job per server group) (client on the allocation, next to rank 0"),
        "{text}"
    );
    let bad = ws.write(
        "bad.yaml",
        &spec("slurm-bad", "m", 2.0, 2, ", nodes: 0, qeue: fast")
            .replace("time: \"5\"", "time: \"1 hour\""),
    );
    let out = servebench().arg("validate").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("bad.yaml:3:"), "{said}");
    assert!(said.contains("1 hour"), "{said}");
    assert!(said.contains("qeue"), "{said}");
}

/// A wrapper for servebench as the node runs it: each `servebench port` it runs is noted in
/// `log` with the Slurm node and step it ran in, and the port it printed.
fn port_noting_binary(ws: &Workspace, log: &Path) -> PathBuf {
    let bin = assert_cmd::cargo::cargo_bin("servebench");
    let path = ws.write(
        "servebench-on-node",
        &format!(
            "#!/bin/sh\n\
             if [ \"$1\" = port ]; then\n\
               out=$('{bin}' \"$@\"); rc=$?\n\
               echo \"node=$SLURMD_NODENAME step=$SLURM_JOB_ID.$SLURM_STEP_ID port=$out\" >> '{log}'\n\
               echo \"$out\"; exit $rc\n\
             fi\n\
             exec '{bin}' \"$@\"\n",
            bin = bin.display(),
            log = log.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn a_two_rank_server_runs_as_two_steps_with_ports_picked_on_the_node_and_a_killed_rank_fails_its_point()
 {
    let cluster = SlurmCluster::get();
    let ws = Workspace::new();
    // A rank killed mid-point, its peers' words read as they come: no other run beside it.
    let _turn = exclusive();
    let model = format!("slurm-ranks-{}", std::process::id());
    let _cleanup = cluster.cancel_on_drop("servebench-slurm-ranks");
    // The test cluster has one node: both ranks run on it (`ranks_per_node: 2`), as steps
    // that share it, and still meet over TCP at rank 0's init address.
    let path = ws.write(
        "s.yaml",
        &format!(
            "name: slurm-ranks
host:
  slurm: {{ time: \"5\", nodes: 1, ranks_per_node: 2 }}
server:
  engine: sim
  model: {model}
  nodes: 2
  args: {{ profile: fast, sim-time-scale: 10 }}
  ready_timeout: 60s
workload:
  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\", calibrate: false }}
  output_tokens: 100
sweep:
  ctx: [64, 128, 256]
requests: 10
"
        ),
    );
    let out = ws.path().join("runs");
    let ports_log = ws.path().join("ports.log");
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .args(run_args(&path, &out))
        .env("SLURM_CONF", &cluster.conf)
        .env(
            "SERVEBENCH_HOST_BINARY",
            port_noting_binary(&ws, &ports_log),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("servebench");
    let (dir, job) = wait_mid_point(&out, "g1", 2, &mut child);
    // Rank 1's step is killed (its task gets SIGKILL; the job goes on).
    let steps = cluster.output("squeue", &["--steps", "--noheader", "--format=%i|%j"]);
    let rank1 = steps
        .lines()
        .find(|l| l.contains("-g1.rank1-"))
        .and_then(|l| l.split('|').next())
        .unwrap_or_else(|| panic!("no step of rank 1 in {steps}"))
        .to_string();
    assert!(
        rank1.starts_with(&format!("{job}.")),
        "{rank1} in job {job}"
    );
    let said = cluster.output("scancel", &["--signal=KILL", &rank1]);
    assert!(said.trim().is_empty(), "{said}");
    let done = child.wait_with_output().unwrap();
    // The point keeps what it measured before the crash, degraded; the server was lost, so
    // the run exits 1 (README's table; issue 18 item 19).
    assert_eq!(done.status.code(), Some(1), "{}", show(&done));

    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 3, "{points:?}");
    let p1 = &points[0];
    assert_eq!(p1["failure"], "rank-lost", "{p1}");
    assert_ne!(p1["status"], "ok", "{p1}");
    let flags = p1["flags"].to_string();
    assert!(flags.contains("rank 1 of 2"), "{flags}");
    assert!(flags.contains("server-g1.rank1.log"), "{flags}");
    // The relaunched ranks measured the rest.
    assert_eq!(points[2]["status"], "ok", "{points:?}");
    let log0 = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert!(log0.contains("all 2 ranks joined"), "{log0}");
    assert!(log0.contains("Connection closed by peer"), "{log0}");

    // Each rank was a step of the group's job, with its port picked on the node.
    let meta = read_json(&dir.join("meta.json"));
    let first = &meta["servers"][0];
    assert_eq!(first["slurm"]["job_id"], job, "{first}");
    let rank1_port = first["ranks"][0]["port"].as_u64().unwrap();
    let picked = std::fs::read_to_string(&ports_log).unwrap();
    for port in [first["port"].as_u64().unwrap(), rank1_port] {
        assert!(
            picked
                .lines()
                .any(|l| l.starts_with(&format!("node={NODE} step={job}."))
                    && l.ends_with(&format!(" port={port}"))),
            "port {port} was not picked on the node: {picked}"
        );
    }
    assert!(
        first["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":{}", first["port"])),
        "{first}"
    );
    for s in meta["servers"].as_array().unwrap() {
        assert_eq!(s["stopped"], true, "{s}");
        assert_eq!(s["ranks"][0]["stopped"], true, "{s}");
        assert_eq!(s["slurm"]["ended"], true, "{s}");
    }
    assert_nothing_left(&cluster, "servebench-slurm-ranks", &model);
}

#[test]
fn a_multi_node_server_on_slurm_is_planned_on_one_allocation_that_must_hold_its_ranks() {
    let ws = Workspace::new();
    let two_ranks = |slurm: &str| {
        format!(
            "name: slurm-nodes\nhost:\n  slurm: {{ {slurm} }}\n\
             server: {{ engine: sim, model: m, nodes: 2, args: {{ profile: fast }} }}\n\
             workload: {{ prompt: {{ kind: repeat, tokens: 64 }}, output_tokens: 4 }}\n"
        )
    };
    let good = ws.write("good.yaml", &two_ranks("nodes: 2"));
    let out = servebench().arg("plan").arg(&good).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("g1 on slurm (default partition, 2 nodes"),
        "{text}"
    );
    assert!(!text.contains("cannot run"), "{text}");
    let shared = ws.write("shared.yaml", &two_ranks("nodes: 1, ranks_per_node: 2"));
    let out = servebench().arg("plan").arg(&shared).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 node, 2 ranks per node"), "{text}");
    // One node, one rank per node: refused before anything is submitted.
    let small = ws.write("small.yaml", &two_ranks("nodes: 1"));
    let out = ws.run(&small);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        show(&out).contains(
            "server.nodes is 2 but the Slurm allocation holds 1 rank (1 node x 1 per node): set host.slurm.nodes to 2"
        ),
        "{}",
        show(&out)
    );
}

/// The `login:` of a Slurm host for the loopback sshd (its key and known_hosts, strict host
/// key checking), in flow style for [`spec`]'s `extra_host`.
fn login_of(sshd: &crate::sshd::Sshd) -> String {
    format!(
        ", login: {{ ssh: \"ssh://127.0.0.1:{}\", identity: \"{}\", known_hosts: \"{}\" }}",
        sshd.port,
        sshd.client_key.display(),
        sshd.known_hosts.display()
    )
}

/// `servebench ARGS` that can reach the cluster only through the login node: this process
/// has no `SLURM_CONF` (the sshd gives it to its sessions), so a Slurm command run here
/// instead of there fails.
fn servebench_via_login(args: &[&Path]) -> std::process::Child {
    Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .args(args)
        .env_remove("SLURM_CONF")
        .env("SERVEBENCH_SSH_IDLE_EXIT_S", "5")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("servebench")
}

#[test]
fn a_run_through_a_login_node_over_ssh_measures_its_points_and_down_cancels_through_it() {
    // The shared turn: its kill lands mid-point, like the other Slurm runs that take it.
    let _turn = exclusive();
    let cluster = SlurmCluster::get();
    let conf = cluster.conf.display().to_string();
    let sshd = crate::sshd::Sshd::start_with_env(&[("SLURM_CONF", &conf)])
        .expect("sshd for the login node (apt-get install openssh-server)");
    let ws = Workspace::new();
    let model = format!("slurm-login-{}", std::process::id());
    let _cleanup = cluster.cancel_on_drop("servebench-slurm-login");
    let path = ws.write(
        "s.yaml",
        &spec("slurm-login", &model, 2.0, 2, &login_of(&sshd)),
    );
    let out = ws.path().join("runs");
    let done = servebench_via_login(&run_args(&path, &out))
        .wait_with_output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}\n{}\n--- sshd ---\n{}",
        show(&done),
        cluster.logs(),
        sshd.log_text()
    );
    let dir = the_run_dir(&out).unwrap();
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2);
    for p in &points {
        assert_eq!(p["status"], "ok", "{p}");
        assert_eq!(p["ok"], 2, "{p}");
    }
    let meta = read_json(&dir.join("meta.json"));
    for s in meta["servers"].as_array().unwrap() {
        let j = &s["slurm"];
        assert_eq!(j["login"], format!("127.0.0.1:{}", sshd.port), "{s}");
        assert_eq!(j["nodes"], serde_json::json!([NODE]), "{s}");
        assert_eq!(j["ended"], true, "{s}");
        assert_eq!(
            j["state"], "CANCELLED",
            "released through the login node: {s}"
        );
    }
    // servebench's binary, which the steps ran, was copied to the login node.
    assert!(
        std::fs::read_dir(sshd.home.join(".cache/servebench/bin"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 1,
        "one copy of servebench on the login node"
    );
    assert_nothing_left(&cluster, "servebench-slurm-login", &model);

    // A runner killed outright: its job stays in the queue until `servebench down`, which
    // cancels it through the login node the run recorded.
    let ws = Workspace::new();
    let _cleanup_kill = cluster.cancel_on_drop("servebench-slurm-lgkill");
    let path = ws.write(
        "s.yaml",
        &spec("slurm-lgkill", &model, 5.0, 20, &login_of(&sshd)).replace("[1, 5]", "[5, 1]"),
    );
    let out = ws.path().join("runs");
    let mut child = servebench_via_login(&run_args(&path, &out));
    let (dir, job) = wait_mid_point(&out, "g1", 1, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !cluster.jobs_named("servebench-slurm-lgkill").is_empty(),
        "the job outlives a killed runner"
    );
    let done = Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("down")
        .arg(&dir)
        .env_remove("SLURM_CONF")
        .env("SERVEBENCH_SSH_IDLE_EXIT_S", "5")
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&done.stdout).to_string() + &String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "Slurm job {job} (RUNNING) cancelled by servebench down"
        )),
        "{said}"
    );
    assert_nothing_left(&cluster, "servebench-slurm-lgkill", &model);
}

#[test]
fn a_slurm_host_with_a_login_node_validates_and_plan_names_it() {
    let ws = Workspace::new();
    let good = ws.write(
        "good.yaml",
        &spec(
            "slurm-plan-login",
            "m",
            2.0,
            2,
            ", login: { ssh: login.cluster.example, user: alice, port: 2222 }",
        ),
    );
    let out = servebench().arg("validate").arg(&good).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let out = servebench().arg("plan").arg(&good).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "one job per server group, through the login node ssh://alice@login.cluster.example:2222)"
        ),
        "{text}"
    );
    let bad = ws.write(
        "bad.yaml",
        &spec("slurm-bad-login", "m", 2.0, 2, ", login: { host: x }"),
    );
    let out = servebench().arg("validate").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("bad.yaml:3:"), "{said}");
}

/// Waits until the run under `out` has recorded a submitted Slurm job; its id. Fails with the
/// runner's output when none comes.
fn wait_submitted(out: &Path, child: &mut std::process::Child) -> (PathBuf, u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let found = the_run_dir(out).and_then(|dir| {
            let text = std::fs::read_to_string(dir.join("slurm-jobs.jsonl")).ok()?;
            let line: serde_json::Value = serde_json::from_str(text.lines().next()?).ok()?;
            Some((dir, line["job_id"].as_u64()?))
        });
        if let Some(f) = found {
            return f;
        }
        if child.try_wait().ok().flatten().is_some() || std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = std::mem::replace(child, Command::new("true").spawn().unwrap());
            let done = out.wait_with_output().unwrap();
            panic!(
                "no job was recorded as submitted; runner said:\n{}",
                show(&done)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Item 14: a job that waits in the queue is recorded when it is submitted. A runner killed
/// while it waits leaves it to `servebench down`, which cancels it; Ctrl-C while it waits
/// cancels it at once.
#[test]
fn a_pending_job_is_recorded_at_submission_and_cancelled_by_down_or_ctrl_c() {
    let cluster = SlurmCluster::get();
    let model = format!("slurm-pending-{}", std::process::id());
    // The job may not start for an hour: it stays PENDING (BeginTime).
    let host = ", sbatch: [\"--begin=now+3600\"]";

    let ws = Workspace::new();
    let _cleanup = cluster.cancel_on_drop("servebench-slurm-pending-kill");
    let path = ws.write("s.yaml", &spec("slurm-pending-kill", &model, 1.0, 2, host));
    let out = ws.path().join("runs");
    let mut child = servebench_on(&cluster, &run_args(&path, &out));
    let (dir, job) = wait_submitted(&out, &mut child);
    poll_until(Duration::from_secs(10), "the job is pending", || {
        cluster
            .jobs_named("servebench-slurm-pending-kill")
            .iter()
            .any(|l| l.starts_with(&format!("{job} PENDING")))
            .then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !cluster
            .jobs_named("servebench-slurm-pending-kill")
            .is_empty(),
        "the job outlives a killed runner"
    );
    let done = Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("down")
        .arg(&dir)
        .env("SLURM_CONF", &cluster.conf)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&done.stdout).to_string() + &String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "Slurm job {job} (PENDING) cancelled by servebench down; it has left the queue"
        )),
        "{said}"
    );
    assert_nothing_left(&cluster, "servebench-slurm-pending-kill", &model);

    // Ctrl-C while it waits: the job is cancelled and the runner ends promptly.
    let ws = Workspace::new();
    let _cleanup_int = cluster.cancel_on_drop("servebench-slurm-pending-int");
    let path = ws.write("s.yaml", &spec("slurm-pending-int", &model, 1.0, 2, host));
    let out = ws.path().join("runs");
    let mut child = servebench_on(&cluster, &run_args(&path, &out));
    let (_, job) = wait_submitted(&out, &mut child);
    let asked = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let done = child.wait_with_output().unwrap();
    let took = asked.elapsed();
    assert_eq!(done.status.code(), Some(1), "{}", show(&done));
    assert!(took < Duration::from_secs(10), "Ctrl-C took {took:?}");
    assert!(
        cluster
            .jobs_named("servebench-slurm-pending-int")
            .iter()
            .all(|l| !l.starts_with(&format!("{job} PENDING"))),
        "job {job} still pending"
    );
    assert_nothing_left(&cluster, "servebench-slurm-pending-int", &model);
}

/// The model's config.json is read inside the allocation (a step on rank 0's node), from the
/// model path, and the report grades the points with it; the node's facts and the profiler's
/// trace are read there the same way.
#[test]
fn the_model_config_facts_and_traces_are_read_inside_the_allocation() {
    let cluster = SlurmCluster::get();
    let ws = Workspace::new();
    let model = ws
        .path()
        .join(format!("slurm-config-{}", std::process::id()));
    std::fs::create_dir(&model).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates/roofline/tests/fixtures/configs/llama-3.1-8b.json"),
        model.join("config.json"),
    )
    .unwrap();
    let _cleanup = cluster.cancel_on_drop("servebench-slurm-config");
    let text = spec("slurm-config", &model.display().to_string(), 1.0, 1, "")
        .replace(
            "  server.args.sim-time-scale: [1, 1]\n",
            "  server.args.sim-time-scale: [1]\n",
        )
        .replace(
            "  ready_timeout: 60s\n",
            "  ready_timeout: 60s\n  gpu: h100-sxm\n",
        )
        + "profile: { points: all }\n";
    let path = ws.write("s.yaml", &text);
    let out = ws.path().join("runs");
    let done = servebench_on(&cluster, &run_args(&path, &out))
        .wait_with_output()
        .unwrap();
    assert!(done.status.success(), "{}\n{}", show(&done), cluster.logs());
    let dir = the_run_dir(&out).unwrap();
    let meta = read_json(&dir.join("meta.json"));
    let kept = &meta["servers"][0]["model_config"];
    assert_eq!(
        kept["origin"],
        format!("slurm:{}/config.json", model.display()),
        "{kept}"
    );
    assert_eq!(kept["config"]["num_hidden_layers"], 32, "{kept}");
    // The node's facts, read by a step of their own beside the server's.
    assert!(
        meta["server_host"]["hostname"].as_str().is_some(),
        "{}",
        meta["server_host"]
    );
    // The profiler's trace, listed and read in the allocation too.
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let files = p["profiler"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{}", p["profiler"]);
    let copied = dir.join(files[0]["path"].as_str().unwrap());
    assert_eq!(
        std::fs::metadata(&copied).unwrap().len(),
        files[0]["bytes"].as_u64().unwrap()
    );
    // The node's copy is this run's directory under /tmp/servebench-profiles.
    let on_node = Path::new(p["profiler"]["dir"].as_str().unwrap());
    let _ = std::fs::remove_dir_all(on_node.parent().unwrap());
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(!report.contains("The points are not graded"), "{report}");
    assert_nothing_left(
        &cluster,
        "servebench-slurm-config",
        &model.display().to_string(),
    );
}
