//! Host pools and multi-node servers end to end: two real sshd on loopback ports are two
//! hosts (see `sshd.rs`); the simulator is launched as the `sglang` engine on them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use crate::sshd::Sshd;

macro_rules! sshd {
    () => {
        match Sshd::start() {
            Some(s) => s,
            None => return,
        }
    };
}

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

/// A spec on a pool of `hosts`: engine sglang launched as `servebench sim` (fast profile).
/// `server` adds keys to `server:`, `args` to `server.args`, `rest` top-level keys.
fn pool_spec(
    hosts: &[&Sshd],
    name: &str,
    client: &str,
    server: &str,
    args: &str,
    rest: &str,
) -> String {
    let hosts: String = hosts.iter().map(|h| h.host_entry("")).collect();
    format!(
        "name: {name}\nhosts:\n{hosts}client: {client}\n\
         server:\n  engine: sglang\n  launcher: [{BIN}, sim]\n  model: test-model\n  args: {{ profile: fast, context-length: 16384{args} }}\n  ready_timeout: 30s\n{server}\
         workload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 32\n{rest}\n"
    )
}

fn points(dir: &Path) -> Vec<serde_json::Value> {
    let path = dir.join("points.jsonl");
    if !path.exists() {
        return Vec::new();
    }
    read_jsonl(&path)
}

/// The runner of a test, killed if the test fails before it ends.
struct Runner(Option<std::process::Child>);

impl Drop for Runner {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// True when `host` (`127.0.0.1:PORT`) is `sshd`.
fn is(host: &str, sshd: &Sshd) -> bool {
    host.ends_with(&format!(":{}", sshd.port))
}

fn spawn_run(ws: &Workspace, spec: &Path) -> Runner {
    Runner(Some(
        std::process::Command::new(BIN)
            .arg("run")
            .arg(spec)
            .arg("--out")
            .arg(ws.path().join("runs"))
            .arg("--quiet")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    ))
}

fn wait_for_run_dir(ws: &Workspace, name: &str) -> std::path::PathBuf {
    poll_until(Duration::from_secs(30), "no run directory", || {
        std::fs::read_dir(ws.path().join("runs").join(name))
            .ok()?
            .next()?
            .ok()
            .map(|e| e.path())
    })
}

/// Waits for the runner to end (at most `limit`), killing it past that; its output.
fn finish(mut runner: Runner, limit: Duration) -> std::process::Output {
    let mut child = runner.0.take().expect("a runner");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    child.wait_with_output().unwrap()
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let out = std::process::Command::new("ps")
        .args(["-eo", "pid,pgid,args"])
        .output()
        .expect("ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(needle) && !l.contains("ps -eo"))
        .map(String::from)
        .collect()
}

fn killpg(pgid: i64) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[test]
fn a_pool_of_two_hosts_shares_the_groups_and_records_each_points_host() {
    let (a, b) = (sshd!(), sshd!());
    let ws = Workspace::new();
    let spec = ws.write(
        "pool.yaml",
        &pool_spec(
            &[&a, &b],
            "pool",
            "host",
            "",
            "",
            "sweep:\n  server.args.chunked-prefill-size: [1024, 2048, 4096, 8192]\n  ctx: [1024, 2048]\nrequests: 2\n",
        ),
    );
    let (dir, p) = ws.run_ok(&spec);
    assert_eq!(p.len(), 8, "{p:?}");
    assert!(p.iter().all(|p| p["status"] == "ok"), "{p:?}");
    // Each group ran on one host; both hosts measured.
    let mut by_group: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for x in &p {
        by_group
            .entry(x["group"].as_str().unwrap())
            .or_default()
            .insert(x["host"].as_str().expect("a pool point records its host"));
    }
    assert_eq!(by_group.len(), 4);
    assert!(by_group.values().all(|h| h.len() == 1), "{by_group:?}");
    let used: BTreeSet<&str> = by_group.values().flatten().copied().collect();
    assert!(used.iter().any(|h| is(h, &a)) && used.iter().any(|h| is(h, &b)));
    // meta.json knows each host and what it is.
    let meta = read_json(&dir.join("meta.json"));
    let hosts = meta["hosts"].as_array().expect("meta.hosts");
    assert_eq!(hosts.len(), 2, "{meta}");
    for h in hosts {
        assert!(h["facts"]["hostname"].is_string(), "{h}");
        assert!(h["failed"].is_null(), "{h}");
    }
    // The report says which host measured which point.
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Hosts"), "{report}");
    assert!(
        report.contains(&format!("127.0.0.1:{}", a.port)),
        "{report}"
    );
}

#[test]
fn a_pool_host_that_fails_mid_run_hands_its_groups_to_the_other() {
    let (mut a, b) = (sshd!(), sshd!());
    let ws = Workspace::new();
    let _turn = exclusive();
    let spec = ws.write(
        "failover.yaml",
        &pool_spec(
            &[&a, &b],
            "failover",
            "local",
            "",
            ", sim-time-scale: 10",
            "sweep:\n  server.args.chunked-prefill-size: [1024, 2048, 4096, 8192]\n  ctx: [1024, 2048, 4096]\nrequests: 2\n",
        ),
    );
    let child = spawn_run(&ws, &spec);
    let dir = wait_for_run_dir(&ws, "failover");
    // Host a goes down once it has measured a point, its group half done.
    poll_until(
        Duration::from_secs(90),
        "no point measured on host a",
        || {
            points(&dir)
                .iter()
                .any(|p| p["host"].as_str().is_some_and(|h| is(h, &a)))
                .then_some(())
        },
    );
    a.stop();
    let out = finish(child, Duration::from_secs(240));
    // The servers launched on host a live on detached (the host is only unreachable).
    let meta = read_json(&dir.join("meta.json"));
    for s in meta["servers"].as_array().unwrap() {
        if s["host"].as_str().is_some_and(|h| is(h, &a)) {
            killpg(s["pgid"].as_i64().unwrap());
        }
    }
    let text = show(&out);
    assert!(text.contains("move to another host"), "{text}");
    let failed = meta["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| is(h["name"].as_str().unwrap(), &a))
        .expect("host a in meta.hosts");
    assert!(failed["failed"].is_string(), "{failed}");
    // Every point is recorded once; what host b measured is ok, and one group has points
    // on both hosts: moved mid-group.
    let p = points(&dir);
    let ids: BTreeSet<&str> = p.iter().map(|x| x["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 12, "{p:?}");
    assert_eq!(p.len(), 12, "{p:?}");
    let on_b: Vec<&serde_json::Value> = p
        .iter()
        .filter(|x| is(x["host"].as_str().unwrap(), &b))
        .collect();
    assert!(on_b.iter().all(|x| x["status"] == "ok"), "{on_b:?}");
    let mut hosts_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for x in &p {
        hosts_of
            .entry(x["group"].as_str().unwrap())
            .or_default()
            .insert(x["host"].as_str().unwrap());
    }
    assert!(hosts_of.values().any(|h| h.len() == 2), "{hosts_of:?}");
    assert!(dir.join("report.md").is_file());
}

#[test]
fn a_two_rank_server_over_ssh_fails_the_point_with_the_killed_ranks_cause() {
    let (a, b) = (sshd!(), sshd!());
    let ws = Workspace::new();
    let _turn = exclusive();
    let marker = format!("ranks-{}", std::process::id());
    let spec = ws.write(
        "ranks.yaml",
        &pool_spec(
            &[&a, &b],
            "ranks",
            "local",
            "  nodes: 2\n  dist_init_host: 127.0.0.1\n",
            &format!(", served-model-name: {marker}, sim-time-scale: 10"),
            "sweep:\n  ctx: [1024, 2048, 4096, 8192]\nrequests: 2\n",
        ),
    );
    let child = spawn_run(&ws, &spec);
    let dir = wait_for_run_dir(&ws, "ranks");
    wait_for_nonempty(&dir.join("points.jsonl"), Duration::from_secs(90));
    let meta = read_json(&dir.join("meta.json"));
    let rank1 = &meta["servers"][0]["ranks"][0];
    assert_eq!(rank1["rank"], 1, "{meta}");
    assert!(is(rank1["host"].as_str().unwrap(), &b), "{rank1}");
    assert!(is(meta["servers"][0]["host"].as_str().unwrap(), &a));
    // Rank 1 dies.
    killpg(rank1["pgid"].as_i64().unwrap());
    let out = finish(child, Duration::from_secs(240));
    let p = points(&dir);
    assert_eq!(p.len(), 4, "{}\n{p:?}", show(&out));
    let crashed = p
        .iter()
        .find(|x| x["failure"].is_string())
        .unwrap_or_else(|| panic!("no point failed: {p:?}"));
    let flags = crashed["flags"].to_string();
    assert!(flags.contains("rank 1 of 2"), "{flags}");
    assert!(flags.contains("server-g1.rank1.log"), "{flags}");
    // The relaunched ranks measured the rest.
    assert_eq!(p.last().unwrap()["status"], "ok", "{p:?}");
    // Rank 0 saw its peer go and said so; the ranks met at the init address first.
    let log0 = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert!(log0.contains("all 2 ranks joined"), "{log0}");
    assert!(log0.contains("Connection closed by peer"), "{log0}");
    let log1 = std::fs::read_to_string(dir.join("server-g1.rank1.log")).unwrap();
    assert!(log1.contains("Dummy health check server started"), "{log1}");
    // Every launch's ranks are stopped and nothing is left running.
    let meta = read_json(&dir.join("meta.json"));
    let servers = meta["servers"].as_array().unwrap();
    assert!(servers.len() >= 2, "relaunched: {meta}");
    for s in servers {
        assert_eq!(s["stopped"], true, "{s}");
        assert_eq!(s["ranks"][0]["stopped"], true, "{s}");
    }
    assert!(
        processes_with(&marker).is_empty(),
        "{:?}",
        processes_with(&marker)
    );
}

#[test]
fn plan_shows_each_groups_hosts_and_the_pools_wall_time() {
    let ws = Workspace::new();
    let spec = ws.write(
        "plan-pool.yaml",
        "name: plan-pool\nhosts: [ssh://bench@gpu-a, ssh://bench@gpu-b]\n\
         server: { engine: sim, args: { profile: fast } }\n\
         workload: { prompt: { kind: repeat, tokens: 512 }, output_tokens: 16 }\n\
         sweep:\n  server.args.chunked-prefill-size: [1024, 2048, 4096]\n",
    );
    let out = servebench().arg("plan").arg(&spec).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pool: 2 hosts"), "{text}");
    assert!(text.contains("g1 on ssh://bench@gpu-a"), "{text}");
    assert!(text.contains("g2 on ssh://bench@gpu-b"), "{text}");
    assert!(text.contains("g3 on ssh://bench@gpu-a"), "{text}");
    assert!(text.contains("estimated wall time on the pool"), "{text}");
}

/// A disaggregated deployment placed over two hosts: the plan names each worker's node, binds
/// the ones off the router's node to their host's address, and gives the router every
/// worker's URL there, the prefill worker's bootstrap port beside its own.
#[test]
fn plan_places_a_spread_deployment_s_workers_on_their_nodes() {
    let ws = Workspace::new();
    let spec = ws.write(
        "pd-spread.yaml",
        "name: pd-spread\nhosts:\n  - { ssh: gpu-a, address: 10.0.0.1 }\n  - { ssh: gpu-b, address: 10.0.0.2 }\n\
         server:\n  engine: sglang\n  model: /m\n  deployment:\n    prefill: 1\n    decode: 2\n    nodes: 2\n    placement: [1, 0, 1]\n\
         workload: { prompt: { kind: repeat, tokens: 64 }, output_tokens: 4 }\n",
    );
    let out = servebench().arg("plan").arg(&spec).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line:\n{text}"))
            .to_string()
    };
    assert!(
        text.contains("a deployment of 3 workers over 2 nodes"),
        "{text}"
    );
    assert!(
        line("prefill0 (node 1): ").contains("--host NODE1_ADDRESS --port PORT"),
        "{text}"
    );
    assert!(
        line("decode0 (node 0): ").contains("--host 127.0.0.1 --port PORT"),
        "{text}"
    );
    assert!(
        line("decode1 (node 1): ").contains("--host NODE1_ADDRESS --port PORT"),
        "{text}"
    );
    assert!(
        line("then sglang-router (node 0): ").contains(
            "--prefill http://NODE1_ADDRESS:PORT_prefill0 BOOTSTRAP_PORT --decode http://127.0.0.1:PORT_decode0 --decode http://NODE1_ADDRESS:PORT_decode1"
        ),
        "{text}"
    );
    assert!(text.contains("g1 on ssh://gpu-a + ssh://gpu-b"), "{text}");
}

#[test]
fn a_multi_node_server_needs_as_many_hosts_before_anything_starts() {
    let ws = Workspace::new();
    let spec = ws.write(
        "too-few.yaml",
        "name: too-few\nserver: { engine: sim, nodes: 2 }\n\
         workload: { prompt: { kind: repeat, tokens: 64 }, output_tokens: 4 }\n",
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        show(&out).contains("server.nodes is 2 but the run has 1 host"),
        "{}",
        show(&out)
    );
    // A deployment spread over more nodes than the run has hosts, likewise.
    let spec = ws.write(
        "too-few-spread.yaml",
        "name: too-few-spread\nserver: { engine: sim, deployment: { workers: 2, nodes: 2 } }\n\
         workload: { prompt: { kind: repeat, tokens: 64 }, output_tokens: 4 }\n",
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        show(&out).contains("server.deployment.nodes is 2 but the run has 1 host: list at least 2 hosts in `hosts:`, or run in a Slurm allocation"),
        "{}",
        show(&out)
    );
    assert!(
        !ws.path().join("runs").exists()
            || std::fs::read_dir(ws.path().join("runs"))
                .unwrap()
                .next()
                .is_none(),
        "nothing started, no run directory"
    );
}

/// `servebench sim ARGS` with its output (stdout and stderr) collected into a file.
fn sim_rank(
    ws: &Workspace,
    name: &str,
    args: &[String],
) -> (std::process::Child, std::path::PathBuf) {
    let log = ws.path().join(format!("{name}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let child = std::process::Command::new(BIN)
        .arg("sim")
        .args(args)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    (child, log)
}

fn health(port: u16) -> Option<u16> {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2",
        ])
        .arg(format!("http://127.0.0.1:{port}/health"))
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .ok()
        .filter(|c| *c != 0)
}

#[test]
fn sim_ranks_meet_over_tcp_and_rank_zero_serves_only_once_all_joined() {
    let ws = Workspace::new();
    let (p0, p1, init) = (
        servebench::host::free_port().unwrap(),
        servebench::host::free_port().unwrap(),
        servebench::host::free_port().unwrap(),
    );
    let args = |rank: u32, port: u16| -> Vec<String> {
        format!(
            "--model-path m --port {port} --profile fast --nnodes 2 --node-rank {rank} --dist-init-addr 127.0.0.1:{init}"
        )
        .split(' ')
        .map(String::from)
        .collect()
    };
    let (mut rank0, log0) = sim_rank(&ws, "rank0", &args(0, p0));
    // Alone, rank 0 waits at the init address and serves nothing.
    poll_until(
        Duration::from_secs(20),
        "rank 0 never listened at the init address",
        || servebench::host::port_in_use(init).then_some(()),
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(health(p0), None, "rank 0 serves before rank 1 joined");
    let (mut rank1, log1) = sim_rank(&ws, "rank1", &args(1, p1));
    poll_until(
        Duration::from_secs(30),
        "rank 0 never became healthy",
        || (health(p0) == Some(200)).then_some(()),
    );
    // Rank 1 answers /health with SGLang's dummy server.
    assert_eq!(health(p1), Some(200));
    // Rank 0 dies: rank 1 exits 1 with gloo's words.
    rank0.kill().unwrap();
    rank0.wait().unwrap();
    let status = poll_until(Duration::from_secs(20), "rank 1 outlived rank 0", || {
        rank1.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(1));
    let text1 = std::fs::read_to_string(&log1).unwrap();
    assert!(text1.contains("Connection closed by peer"), "{text1}");
    let text0 = std::fs::read_to_string(&log0).unwrap();
    assert!(text0.contains("all 2 ranks joined"), "{text0}");
}

#[test]
fn sim_rank_zero_exits_when_another_rank_dies() {
    let ws = Workspace::new();
    let (p0, init) = (
        servebench::host::free_port().unwrap(),
        servebench::host::free_port().unwrap(),
    );
    let args = |rank: u32| -> Vec<String> {
        format!(
            "m --port {p0} --nnodes 2 --node-rank {rank} --master-addr 127.0.0.1 --master-port {init}{}",
            if rank > 0 { " --headless" } else { "" }
        )
        .split(' ')
        .map(String::from)
        .collect()
    };
    let with_api = |rank| {
        let mut a = vec!["--api".to_string(), "vllm".to_string()];
        a.extend(args(rank));
        a
    };
    let (mut rank0, log0) = sim_rank(&ws, "v0", &with_api(0));
    let (mut rank1, log1) = sim_rank(&ws, "v1", &with_api(1));
    poll_until(
        Duration::from_secs(30),
        "vLLM rank 0 never became healthy",
        || (health(p0) == Some(200)).then_some(()),
    );
    let text1 = std::fs::read_to_string(&log1).unwrap();
    assert!(text1.contains("headless multiproc executor"), "{text1}");
    rank1.kill().unwrap();
    rank1.wait().unwrap();
    let status = poll_until(Duration::from_secs(20), "rank 0 outlived rank 1", || {
        rank0.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(1));
    let text0 = std::fs::read_to_string(&log0).unwrap();
    assert!(text0.contains("Connection closed by peer"), "{text0}");
    assert!(text0.contains("node_rank 1 is gone"), "{text0}");
}

#[test]
fn a_killed_pool_run_is_cleaned_by_down_on_both_hosts_and_resume_measures_only_what_is_missing() {
    let (a, b) = (sshd!(), sshd!());
    let ws = Workspace::new();
    let _turn = exclusive();
    let marker = format!("pool-down-{}", std::process::id());
    let spec = ws.write(
        "pool-down.yaml",
        &pool_spec(
            &[&a, &b],
            "pool-down",
            "host",
            "",
            &format!(", served-model-name: {marker}"),
            "sweep:\n  server.args.sim-time-scale: [1, 1.5, 40, 41]\n  ctx: [1024]\nrequests: 4\n",
        ),
    );
    let runner = spawn_run(&ws, &spec);
    let dir = wait_for_run_dir(&ws, "pool-down");
    // g1 and g2 are quick; g3 and g4 (about 40 times slower) are then running, one on each host.
    poll_until(Duration::from_secs(120), "g1 and g2 never finished", || {
        let p = points(&dir);
        (p.iter()
            .filter(|x| x["group"] == "g1" || x["group"] == "g2")
            .count()
            == 2)
            .then_some(())
    });
    poll_until(
        Duration::from_secs(60),
        "g3 and g4 never both started",
        || {
            let meta = read_json(&dir.join("meta.json"));
            let started = meta["servers"]
                .as_array()?
                .iter()
                .filter(|s| s["group"] == "g3" || s["group"] == "g4")
                .count();
            (started == 2).then_some(())
        },
    );
    let before = points(&dir);
    let mut runner = runner;
    let mut child = runner.0.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let meta = read_json(&dir.join("meta.json"));
    let hosts_left: BTreeSet<String> = meta["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["stopped"] != true)
        .map(|s| s["host"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(hosts_left.len(), 2, "a server on each host: {meta}");
    assert!(
        !processes_with(&marker).is_empty(),
        "the killed runner left its servers"
    );

    let down = std::process::Command::new(BIN)
        .arg("down")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(down.status.success(), "{}", show(&down));
    poll_until(
        Duration::from_secs(20),
        &format!("left after down: {:?}", processes_with(&marker)),
        || processes_with(&marker).is_empty().then_some(()),
    );

    let resumed = std::process::Command::new(BIN)
        .args(["run", "--quiet", "--resume"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{}", show(&resumed));
    let after = points(&dir);
    assert_eq!(after.len(), 4, "{after:?}");
    assert!(after.iter().all(|p| p["status"] == "ok"), "{after:?}");
    // What was recorded before the kill is kept as it was, and measured once.
    assert_eq!(&after[..before.len()], &before[..]);
    let ids: BTreeSet<&str> = after.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 4, "{after:?}");
    // Only the missing groups were launched again.
    let meta = read_json(&dir.join("meta.json"));
    let launches = |g: &str| {
        meta["servers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["group"] == g)
            .count()
    };
    for g in ["g1", "g2"] {
        if before.iter().any(|p| p["group"] == g) {
            assert_eq!(launches(g), 1, "{g} was not measured again: {meta}");
        }
    }
    for g in ["g3", "g4"] {
        if !before.iter().any(|p| p["group"] == g) {
            assert_eq!(launches(g), 2, "{g} launched again on resume: {meta}");
        }
    }
    assert!(
        processes_with(&marker).is_empty(),
        "{:?}",
        processes_with(&marker)
    );
}

#[test]
fn compare_warns_when_the_runs_were_measured_on_different_hardware() {
    let a = sshd!();
    let ws = Workspace::new();
    let run = |name: &str| {
        let spec = ws.write(
            &format!("{name}.yaml"),
            &pool_spec(
                &[&a],
                name,
                "host",
                "",
                "",
                "sweep:\n  ctx: [1024]\nrequests: 2\n",
            ),
        );
        ws.run_ok(&spec).0
    };
    let (first, second) = (run("hw-a"), run("hw-b"));
    let compare = || {
        let out = servebench()
            .arg("compare")
            .arg(&first)
            .arg(&second)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Both measured on the same host: its facts match, nothing to say.
    let same = compare();
    assert!(!same.contains("different hardware"), "{same}");
    let meta_a = read_json(&first.join("meta.json"));
    assert!(
        meta_a["hosts"][0]["facts"]["hostname"].is_string(),
        "{meta_a}"
    );
    // The second run as a host with other GPUs records it: its facts say so.
    let path = second.join("meta.json");
    let mut meta = read_json(&path);
    meta["hosts"][0]["facts"]["gpus"] = serde_json::json!([
        {"name": "NVIDIA H100 80GB HBM3", "driver_version": "550.54.15", "memory_total_mib": 81559}
    ]);
    std::fs::write(&path, serde_json::to_string_pretty(&meta).unwrap()).unwrap();
    let other = compare();
    assert!(other.contains("different hardware: 1 point"), "{other}");
    assert!(
        other.contains("NVIDIA H100 80GB HBM3, driver 550.54.15"),
        "{other}"
    );
    assert!(
        other.contains("The differences may be the hardware's, not the settings'"),
        "{other}"
    );
}
