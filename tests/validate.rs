//! `validate` catches what `run` would refuse, before a run directory exists: prompt files,
//! flag names, the report template, `${NAME}` references, `expect:` names and run names, each
//! with the spec's file, line and column, the offending text and a hint.

use std::path::Path;
use std::process::Output;

use crate::common::*;

const WORKLOAD: &str = "  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2";

/// `servebench validate SPEC` in `ws`, with `SERVEBENCH_TEST_SECRET` unset.
fn validate(ws: &Workspace, spec: &Path) -> Output {
    servebench()
        .arg("validate")
        .arg(spec.file_name().unwrap())
        .current_dir(ws.path())
        .env_remove("SERVEBENCH_TEST_SECRET")
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .expect("validate runs")
}

/// The rendered errors of a failed validate.
#[track_caller]
fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", show(out));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[track_caller]
fn contains_all(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "missing {n:?} in:\n{text}");
    }
}

fn prompt_spec(path: &str) -> String {
    sim_spec(
        "p",
        &format!("  prompt: {{ kind: file, path: {path} }}\n  output_tokens: 2"),
        "",
    )
}

#[test]
fn prompt_files_are_checked_at_their_path() {
    let ws = Workspace::new();
    // Missing.
    let spec = ws.write("missing.yaml", &prompt_spec("nope.txt"));
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "error: cannot read prompt file nope.txt: No such file or directory",
            " --> missing.yaml:8:31",
            "^^^^^^^^",
            "hint: the path is relative to the spec's folder",
        ],
    );
    // A FIFO: refused at once, never opened (opening it would wait for a writer forever).
    let made = std::process::Command::new("mkfifo")
        .arg(ws.path().join("prompts.fifo"))
        .status();
    assert!(made.unwrap().success());
    let spec = ws.write("fifo.yaml", &prompt_spec("prompts.fifo"));
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "is a FIFO (named pipe), not a regular file",
            "fifo.yaml:8:31",
        ],
    );
    // A device and a directory.
    let spec = ws.write("zero.yaml", &prompt_spec("/dev/zero"));
    contains_all(&refused(&validate(&ws, &spec)), &["is a character device"]);
    std::fs::create_dir(ws.path().join("dir")).unwrap();
    let spec = ws.write("dir.yaml", &prompt_spec("dir"));
    contains_all(&refused(&validate(&ws, &spec)), &["is a directory"]);
    // Over the size budget (sparse: nothing is written or read).
    std::fs::File::create(ws.path().join("big.txt"))
        .unwrap()
        .set_len(servebench::prompt::MAX_PROMPT_FILE_BYTES + 1)
        .unwrap();
    let spec = ws.write("big.yaml", &prompt_spec("big.txt"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "prompt files are limited to 67108864 bytes (64 MiB)",
            "hint: use a sample of the prompts",
        ],
    );
    // Not a JSON list.
    ws.write("p.json", "{\"a\": 1}");
    let spec = ws.write("json.yaml", &prompt_spec("p.json"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &["is not a JSON list of strings"],
    );
    // A good file passes.
    ws.write("good.txt", "one\ntwo\n");
    let spec = ws.write("good.yaml", &prompt_spec("good.txt"));
    let out = validate(&ws, &spec);
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn a_prompt_file_named_by_a_sweep_is_checked_per_value() {
    let ws = Workspace::new();
    ws.write("a.txt", "one\n");
    let spec = ws.write(
        "s.yaml",
        &sim_spec(
            "s",
            "  prompt: { kind: file, path: \"{{ file }}\" }\n  output_tokens: 2",
            "sweep:\n  file: [a.txt, b.txt]",
        ),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "cannot read prompt file b.txt",
            "(with file = \"b.txt\")",
            "s.yaml:8:31",
        ],
    );
    assert!(!text.contains("a.txt"), "{text}");
}

#[test]
fn flag_names_the_launch_would_refuse_are_caught() {
    let ws = Workspace::new();
    let spec = ws.write(
        "f.yaml",
        "name: f\nserver:\n  engine: sim\n  args:\n    \"chunked-prefill-size \": 4096\n    \"\": 1\n    port: 30001\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\nsweep:\n  \"server.args.max running requests\": [1, 2]\n",
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "error: flag name \"chunked-prefill-size \" contains whitespace\n --> f.yaml:5:5",
            "hint: write `chunked-prefill-size`",
            "error: `` is not a flag name\n --> f.yaml:6:5",
            "error: `--port` is set by servebench\n --> f.yaml:7:5",
            "hint: use `server.port`",
            "error: flag name \"max running requests\" contains whitespace\n  --> f.yaml:12:3",
            "4 errors",
        ],
    );
}

#[test]
fn the_report_template_is_parsed_by_validate() {
    let ws = Workspace::new();
    ws.write(
        "bad.md.j2",
        "# {{ title }}\n{% for t in tables %}\n{{ t.title }\n",
    );
    let spec = ws.write(
        "t.yaml",
        &sim_spec("t", WORKLOAD, "report: { template: bad.md.j2 }"),
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "error: template bad.md.j2, line 3: syntax error",
            "  --> t.yaml:10:21",
            "hint: fix the template's syntax",
        ],
    );
    let spec = ws.write(
        "m.yaml",
        &sim_spec("m", WORKLOAD, "report: { template: missing.md.j2 }"),
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "the report template missing.md.j2 does not exist",
            "hint: a built-in name (default, long-context) or a path relative to the spec's folder",
        ],
    );
    ws.write("good.md.j2", "# {{ title }}\n");
    let spec = ws.write(
        "g.yaml",
        &sim_spec("g", WORKLOAD, "report: { template: good.md.j2 }"),
    );
    let out = validate(&ws, &spec);
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn unset_environment_variables_are_named_at_their_reference() {
    let ws = Workspace::new();
    let spec = ws.write(
        "e.yaml",
        "name: e\nserver:\n  engine: sim\n  args: { api-key: \"${SERVEBENCH_TEST_SECRET}\" }\n  env:\n    HF_TOKEN: \"${SERVEBENCH_TEST_SECRET}\"\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "error: environment variable `SERVEBENCH_TEST_SECRET` is not set",
            " --> e.yaml:4:20",
            " --> e.yaml:6:15",
            "export SERVEBENCH_TEST_SECRET=",
        ],
    );
    let out = servebench()
        .arg("validate")
        .arg(&spec)
        .env("SERVEBENCH_TEST_SECRET", "s3cret")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn expected_flag_typos_are_caught_by_validate() {
    let ws = Workspace::new();
    let spec = ws.write(
        "x.yaml",
        &sim_spec("x", WORKLOAD, "expect:\n  - { flag: cache-reuse-suspectd }"),
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "error: unknown flag `cache-reuse-suspectd`",
            "did you mean `cache-reuse-suspected`?",
        ],
    );
}

#[test]
fn an_expected_failure_written_oom_suggests_out_of_memory() {
    // By spelling, `oom` is nearest `oom-killed` (the host's OOM killer ended the process);
    // a user writing `oom` means the engine ran out of GPU memory: its initials.
    let ws = Workspace::new();
    let spec = ws.write(
        "x.yaml",
        &sim_spec("x", WORKLOAD, "expect:\n  - { failure: oom }"),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "error: unknown failure cause `oom`",
            " --> x.yaml:",
            "did you mean `out-of-memory`?",
        ],
    );
    assert!(!text.contains("`oom-killed`"), "{text}");
}

fn trace_spec(file: &str) -> String {
    sim_spec(
        "t",
        WORKLOAD,
        &format!("load:\n  kind: trace\n  trace: {{ file: {file} }}"),
    )
}

#[test]
fn trace_files_are_checked_at_the_specs_trace_field() {
    let ws = Workspace::new();
    // Missing: named at `load.trace.file` (line 12, after `trace: { file: `).
    let spec = ws.write("missing.yaml", &trace_spec("nope.jsonl"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "error: cannot read trace",
            "nope.jsonl",
            " --> missing.yaml:12:18",
            "hint: the path is relative to the spec's folder",
        ],
    );
    // A line that does not parse: the trace's own line, at the spec's field.
    ws.write(
        "bad.jsonl",
        "{\"at\": 0}\n{\"at\": 1, \"output_tokens\": -3}\n",
    );
    let spec = ws.write("bad.yaml", &trace_spec("bad.jsonl"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "bad.jsonl:2:11: `output_tokens` must be a whole number of tokens",
            " --> bad.yaml:12:18",
            "hint: each line is an object like",
        ],
    );
    // Empty.
    ws.write("empty.jsonl", "\n");
    let spec = ws.write("empty.yaml", &trace_spec("empty.jsonl"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &["has no requests", " --> empty.yaml:12:18"],
    );
    // A good trace validates.
    ws.write(
        "good.jsonl",
        "{\"at\": 0}\n{\"at\": 0.5, \"input_tokens\": 64}\n",
    );
    let spec = ws.write("good.yaml", &trace_spec("good.jsonl"));
    let out = validate(&ws, &spec);
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn trace_formats_are_named_and_their_rows_refused_at_their_place_with_the_fix() {
    let ws = Workspace::new();
    let spec_of = |format: &str, file: &str| {
        sim_spec(
            "t",
            WORKLOAD,
            &format!("load:\n  kind: trace\n  trace: {{ file: {file}, format: {format} }}"),
        )
    };
    // A BurstGPT CSV with a failed request: its row and column, and the file without them.
    ws.write(
        "burst.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n9,GPT-4,300,0,300,API log\n",
    );
    let spec = ws.write("burst.yaml", &spec_of("burstgpt", "burst.csv"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "burst.csv:3:13: `Response tokens` is 0: the row records a failed request",
            " --> burst.yaml:12:18",
            "hint: replay BurstGPT's `BurstGPT_without_fails_*.csv`",
        ],
    );
    // The same CSV read as Mooncake's JSONL (the default) is refused at its first line.
    let spec = ws.write("as-jsonl.yaml", &trace_spec("burst.csv"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &["burst.csv:1:1: not a JSON object"],
    );
    // An AIPerf mooncake_trace line with a literal prompt.
    ws.write(
        "aiperf.jsonl",
        "{\"timestamp\": 0, \"input_length\": 9}\n{\"timestamp\": 5, \"text_input\": \"Hello\"}\n",
    );
    let spec = ws.write("aiperf.yaml", &spec_of("mooncake", "aiperf.jsonl"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "aiperf.jsonl:2:18: `text_input` (AIPerf's literal prompt) is not replayed",
            "hint: give the line its `input_length`",
        ],
    );
    // A format servebench does not read, at the spec's own place.
    let spec = ws.write("unknown.yaml", &spec_of("bailian", "aiperf.jsonl"));
    contains_all(
        &refused(&validate(&ws, &spec)),
        &["bailian", " --> unknown.yaml:12:"],
    );
    // An AIPerf single_turn dataset line with a timestamp: its line and column, and the fix.
    ws.write(
        "single.jsonl",
        "{\"text\": \"What is deep learning?\"}\n{\"timestamp\": 1000, \"text\": \"Who are you?\"}\n",
    );
    let spec = ws.write(
        "single.yaml",
        &sim_spec(
            "d",
            "  prompt: { kind: dataset, format: aiperf-single-turn, file: single.jsonl }\n  output_tokens: 2",
            "",
        ),
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "single.jsonl:2:2: `timestamp`: AIPerf's timing is not replayed",
            "aiperf-single-turn: one { text, output_length } a line",
        ],
    );
}

#[test]
fn sessions_refuse_stop_warmup_and_cooldown_they_would_ignore() {
    let ws = Workspace::new();
    let spec = ws.write(
        "s.yaml",
        &sim_spec(
            "s",
            WORKLOAD,
            "load: { kind: sessions, sessions: { users: 2, turns: 2, think: 10ms } }\n\
             stop: { requests: 10, errors: 2 }\nwarmup: { requests: 2 }\ncooldown: { duration: 1s }",
        ),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "error: `stop.requests` does not apply to `load.kind: sessions`",
            "error: `warmup` does not apply to `load.kind: sessions`",
            "error: `cooldown` does not apply to `load.kind: sessions`",
            " --> s.yaml:11:9",
            "hint: remove it: a sessions point ends when each of `sessions.users`",
        ],
    );
    // `stop.errors` is judged on the request path for every sender.
    assert!(!text.contains("error: `stop.errors`"), "{text}");
}

/// Of `stop:`, a closed loop, sessions and agent sessions take `errors` (the path every
/// sender sends through judges it); what their drivers would ignore is refused at its key.
#[test]
fn every_load_shape_takes_stop_errors_and_refuses_what_it_would_ignore() {
    let ws = Workspace::new();
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/data/agentic-sessions.jsonl");
    let agentic = format!(
        "load: {{ kind: agentic, agentic: {{ file: {}, live: 2 }} }}\n",
        trace.display()
    );
    for load in [
        "requests: 4\n".to_string(),
        "load: { kind: sessions, sessions: { users: 2, turns: 2, think: 10ms } }\n".to_string(),
        agentic,
    ] {
        let spec = ws.write(
            "e.yaml",
            &sim_spec("e", WORKLOAD, &format!("{load}stop: {{ errors: 10% }}")),
        );
        let out = validate(&ws, &spec);
        assert!(out.status.success(), "{load}: {}", show(&out));
    }
    let spec = ws.write(
        "c.yaml",
        &sim_spec(
            "c",
            WORKLOAD,
            "requests: 4\nstop: { duration: 10s, errors: 1 }",
        ),
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "error: `stop.duration` does not apply to a closed-loop point (no `load:`)",
            "hint: remove it: a closed loop sends `requests` requests",
        ],
    );
}

#[test]
fn run_names_of_only_dots_are_refused() {
    let ws = Workspace::new();
    for name in [".", "..", "..."] {
        let spec = ws.write(
            "n.yaml",
            &sim_spec(name, WORKLOAD, "").replacen(
                &format!("name: {name}"),
                &format!("name: \"{name}\""),
                1,
            ),
        );
        contains_all(
            &refused(&validate(&ws, &spec)),
            &[&format!("`{name}` cannot name a run"), "n.yaml:1:7"],
        );
    }
}

#[test]
fn run_refuses_before_a_run_directory_exists() {
    let ws = Workspace::new();
    let spec = ws.write("r.yaml", &prompt_spec("nope.txt"));
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    contains_all(
        &String::from_utf8_lossy(&out.stderr),
        &["cannot read prompt file", "r.yaml:8:31"],
    );
    assert!(
        !ws.path().join("runs").exists(),
        "a run directory was created"
    );
}

#[test]
fn a_run_directory_is_never_created_outside_out() {
    use servebench_model::results::rundir::RunDir;
    let ws = Workspace::new();
    let out = ws.path().join("out");
    let started = chrono::Utc::now();
    for name in ["..", ".", "a/b", "/abs", ""] {
        let e = RunDir::create(&out, name, "name: x\n", started).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{name:?}: {e}");
        assert!(e.to_string().contains("not a plain folder name"), "{e}");
    }
    assert!(!ws.path().join("2026").exists());
    let dir = RunDir::create(&out, "...", "name: x\n", started).unwrap();
    assert!(dir.path.starts_with(&out));
}

/// A load spec on the simulator with `extra` top-level keys.
fn load_validate_spec(extra: &str) -> String {
    sim_spec("l", WORKLOAD, extra)
}

#[test]
fn what_a_load_point_would_refuse_after_launching_validate_refuses_first() {
    let ws = Workspace::new();
    // `rate: inf` with only a duration: how many is never said.
    let spec = ws.write(
        "inf.yaml",
        &load_validate_spec("load: { kind: rate, rate: inf }\nstop: { duration: 10s }"),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "`rate: inf` sends everything at once",
            "inf.yaml:10:",
            "hint: add `stop: { requests: 500 }`",
        ],
    );
    // A stop of 100,000,000 hours.
    let spec = ws.write(
        "forever.yaml",
        &load_validate_spec("load: { kind: rate, rate: 1 }\nstop: { duration: 100000000h }"),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "`stop.duration` is",
            "longer than a schedule may span",
            "forever.yaml:11:",
        ],
    );
    // More requests than one schedule holds: 1,000/s for three hours.
    let spec = ws.write(
        "many.yaml",
        &load_validate_spec(
            "load: { kind: rate, rate: 1000, arrival: constant }\nstop: { duration: 3h }",
        ),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(&text, &["more than 10000000 requests", "many.yaml:11:"]);
}

#[test]
fn a_trace_is_checked_like_a_prompt_file_and_its_span_bounded() {
    let ws = Workspace::new();
    let trace_spec = |file: &str| {
        load_validate_spec(&format!(
            "load: {{ kind: trace, trace: {{ file: {file} }} }}"
        ))
    };
    // A FIFO would block open(): refused without opening it.
    let fifo = ws.path().join("pipe.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()));
    let spec = ws.write("fifo.yaml", &trace_spec("pipe.jsonl"));
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "trace pipe.jsonl is a FIFO (named pipe), not a regular file",
            "fifo.yaml:10:",
        ],
    );
    // A device that never ends.
    let spec = ws.write("zero.yaml", &trace_spec("/dev/zero"));
    let text = refused(&validate(&ws, &spec));
    contains_all(&text, &["a character device, not a regular file"]);
    // Arrivals centuries apart: the pacer once waited forever (or panicked at 1e19 s).
    ws.write("wild.jsonl", "{\"at\": 0}\n{\"at\": 1e19}\n");
    let spec = ws.write("wild.yaml", &trace_spec("wild.jsonl"));
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "longer than a schedule may span",
            "hint: cut the trace, or lower `load.trace.time_scale`",
        ],
    );
    // Centuries (1e10 s) replayed 100,000 times faster fit in a day.
    ws.write("long.jsonl", "{\"at\": 0}\n{\"at\": 1e10}\n");
    let spec = ws.write("long.yaml", &trace_spec("long.jsonl"));
    refused(&validate(&ws, &spec));
    let spec = ws.write(
        "scaled.yaml",
        &load_validate_spec("load: { kind: trace, trace: { file: long.jsonl, time_scale: 1e-5 } }"),
    );
    let out = validate(&ws, &spec);
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn a_url_with_credentials_is_refused_at_its_value_without_echoing_them() {
    let ws = Workspace::new();
    let spec = ws.write(
        "creds.yaml",
        &format!(
            "name: c\nserver:\n  engine: sglang\n  url: http://bench:hunter22secret@127.0.0.1:30000\nworkload:\n{WORKLOAD}\n"
        ),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "`server.url` cannot be used: user names and passwords in the URL are not supported",
            "creds.yaml:4:",
            "server.args.api-key",
        ],
    );
    assert!(
        !text.contains("hunter22secret"),
        "the password is shown:\n{text}"
    );
}

/// SGLang 0.5.23's argparse takes a unique prefix for its flag and refuses one shared by
/// several ("ambiguous option", exit 2): `validate` says so at the flag, with the whole names
/// (issue 18 item 9). `pp` used to pass as a flag of its own; `tp` stays a unique prefix.
#[test]
fn an_ambiguous_flag_prefix_is_an_error_at_its_line() {
    let ws = Workspace::new();
    for (flag, wanted) in [
        (
            "pp",
            "`pp-async-batch-depth`, `pp-max-micro-batch-size`, `pp-size`",
        ),
        (
            "cuda-graph-max-bs",
            "`cuda-graph-max-bs-decode`, `cuda-graph-max-bs-prefill`",
        ),
    ] {
        let spec = ws.write(
            "ambiguous.yaml",
            &format!(
                "name: ambiguous\nserver:\n  engine: sglang\n  model: m\n  args:\n    tp: 2\n    {flag}: 2\nworkload:\n  prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 4\n"
            ),
        );
        let out = servebench().arg("validate").arg(&spec).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("ambiguous.yaml:7:5"), "{stderr}");
        assert!(
            stderr.contains(&format!("SGLang refuses `{flag}`")),
            "{stderr}"
        );
        assert!(stderr.contains("ambiguous option"), "{stderr}");
        assert!(stderr.contains(wanted), "{stderr}");
        assert!(!stderr.contains("`tp`"), "tp is a unique prefix: {stderr}");
    }
}

/// `telemetry.gpu: dcgm` needs its exporter's URL, the URL is checked like `server.url`, and a
/// URL no sampler reads is named, each at its place in the spec with the fix.
#[test]
fn a_dcgm_exporters_url_is_checked_where_the_spec_gives_it() {
    let ws = Workspace::new();
    let no_url = ws.write(
        "d1.yaml",
        &sim_spec("d1", WORKLOAD, "telemetry:\n  gpu: dcgm\n"),
    );
    contains_all(
        &refused(&validate(&ws, &no_url)),
        &[
            "`telemetry.gpu: dcgm` needs the exporter's URL",
            " --> d1.yaml:11:8",
            "add `dcgm_url: http://host:9400/metrics` to `telemetry:`",
        ],
    );
    let bad_url = ws.write(
        "d2.yaml",
        &sim_spec(
            "d2",
            WORKLOAD,
            "telemetry:\n  gpu: dcgm\n  dcgm_url: https://gpu-box:9400/metrics\n",
        ),
    );
    contains_all(
        &refused(&validate(&ws, &bad_url)),
        &[
            "`telemetry.dcgm_url` cannot be used: scheme `https` is not supported",
            " --> d2.yaml:12:13",
            "write the exporter's URL as http://host:9400/metrics",
        ],
    );
    let unread = ws.write(
        "d3.yaml",
        &sim_spec(
            "d3",
            WORKLOAD,
            "telemetry:\n  gpu: nvidia-smi\n  dcgm_url: http://gpu-box:9400/metrics\n",
        ),
    );
    contains_all(
        &refused(&validate(&ws, &unread)),
        &[
            "`telemetry.dcgm_url` is read only by `gpu: dcgm`, and `gpu` is `nvidia-smi`",
            " --> d3.yaml:12:3",
            "set `gpu: dcgm` to read the exporter, or remove `dcgm_url`",
        ],
    );
    let good = ws.write(
        "d4.yaml",
        &sim_spec(
            "d4",
            WORKLOAD,
            "telemetry: { gpu: dcgm, dcgm_url: \"http://gpu-box:9400/metrics\" }\n",
        ),
    );
    let out = validate(&ws, &good);
    assert!(out.status.success(), "{}", show(&out));
}

/// What a deployment's launch sets itself is refused at `validate`, where it is written: a
/// worker's `port` (refused by `run` before, under `server.args`' name), `server.port` beside a
/// deployment (silently ignored before); `policy: manual`, which both routers take, is valid.
#[test]
fn a_deployment_s_ports_are_refused_at_their_place_and_manual_routing_is_valid() {
    let ws = Workspace::new();
    let spec = ws.write(
        "ports.yaml",
        "name: ports\nserver:\n  engine: sim\n  port: 30000\n  deployment:\n    workers: 2\n    worker_args: [{}, { port: 31001 }]\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "`server.port` is a single server's port",
            "hint: move it to `deployment.router.port`",
            "ports.yaml:4:3",
            "`--port` is set by servebench",
            "servebench picks each worker's port",
            "ports.yaml:7:25",
        ],
    );
    let spec = ws.write(
        "pd.yaml",
        "name: pd\nserver:\n  engine: sim\n  deployment:\n    prefill: 1\n    decode: 1\n    decode_args: { port: 31002 }\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &["`--port` is set by servebench", "pd.yaml:7:20"],
    );
    let spec = ws.write(
        "manual.yaml",
        "name: manual\nserver:\n  engine: sim\n  deployment: { workers: 2, router: { policy: manual } }\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    let out = validate(&ws, &spec);
    assert!(out.status.success(), "{}", show(&out));
}

/// A DCGM exporter's port, the profiler's directory and its stop timeout are checked at
/// `validate`, where they are written (a run found out, or waited an unbounded stop).
#[test]
fn telemetry_and_profile_settings_are_refused_at_their_place() {
    let ws = Workspace::new();
    let spec = ws.write(
        "t.yaml",
        "name: t\nserver: { engine: sim }\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\ntelemetry: { gpu: dcgm, dcgm_url: \"http://gpu-box:99999/metrics\" }\nprofile: { points: all, dir: traces, stop_timeout: 0s }\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "`profile.dir: traces` is not an absolute directory",
            "t.yaml:7:30",
            "`profile.stop_timeout: 0s` is outside 1s to 1h",
            "t.yaml:7:52",
        ],
    );
    let spec = ws.write(
        "d.yaml",
        "name: d\nserver: { engine: sim }\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\ntelemetry: { gpu: dcgm, dcgm_url: \"http://gpu-box:99999/metrics\" }\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "`telemetry.dcgm_url` cannot be used: port `99999` is not one",
            "d.yaml:6:",
        ],
    );
}

/// A deployment's contradictions are refused where they are written, with the fix.
#[test]
fn a_deployment_that_contradicts_itself_is_refused_at_its_line() {
    let ws = Workspace::new();
    let spec = ws.write(
        "d.yaml",
        "name: d\nserver:\n  engine: vllm\n  deployment:\n    prefill: 1\n    worker_args: [{}]\n    router:\n      args: { policy: random }\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "a disaggregated deployment needs decode workers too",
            "hint: add `decode: 1` (or more)",
            "d.yaml:5:5",
            "`worker_args` is for regular workers",
            "d.yaml:6:5",
            "engine `vllm` has no prefill or decode role",
            "d.yaml:3:11",
            "servebench sets the router's `--policy` itself",
            "hint: use `router.policy`",
            "d.yaml:8:15",
        ],
    );
    // A router's policy swept as server variants is a valid spec.
    let spec = ws.write(
        "ok.yaml",
        "name: ok\nserver:\n  engine: sim\n  deployment: { workers: 2 }\nsweep:\n  server.deployment.router.policy: [cache_aware, round_robin]\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    let out = validate(&ws, &spec);
    assert!(out.status.success(), "{}", show(&out));
    // A policy the router does not have is refused with the ones it has.
    let spec = ws.write(
        "bad.yaml",
        "name: bad\nserver:\n  engine: sim\n  deployment: { workers: 2, router: { policy: least_loaded } }\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &["least_loaded", "round_robin", "cache_aware"],
    );
}

/// A deployment spread over nodes places each worker on one of them: a node out of range, a
/// node left empty, a placement of the wrong length or without `nodes` is refused where it
/// is written, with the fix.
#[test]
fn a_deployment_s_placement_is_checked_against_its_nodes_at_its_place() {
    let ws = Workspace::new();
    let spec = ws.write(
        "p.yaml",
        "name: p\nserver:\n  engine: sglang\n  deployment:\n    workers: 3\n    nodes: 3\n    placement: [0, 3, 0]\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "node 3 is not one of the deployment's 3 nodes (0 to 2)",
            "p.yaml:7:20",
            "hint: use a node from 0 to 2, or set `nodes: 4`",
            "node 1 of the deployment's 3 holds no worker",
            "node 2 of the deployment's 3 holds no worker",
            "p.yaml:7:16",
        ],
    );
    let spec = ws.write(
        "q.yaml",
        "name: q\nserver:\n  engine: sglang\n  deployment:\n    prefill: 1\n    decode: 2\n    placement: [1, 0]\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "`placement` names nodes, but the deployment has one (`nodes` is not set)",
            "q.yaml:7:5",
            "hint: set `nodes`",
        ],
    );
    let spec = ws.write(
        "r.yaml",
        "name: r\nserver:\n  engine: sglang\n  deployment:\n    prefill: 1\n    decode: 2\n    nodes: 2\n    placement: [1, 0]\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "`placement` names 2 node(s) for 3 worker(s): it needs one per worker, in launch order (prefill before decode)",
            "r.yaml:8:16",
        ],
    );
    let spec = ws.write(
        "s.yaml",
        "name: s\nserver:\n  engine: sglang\n  deployment:\n    workers: 2\n    nodes: 3\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &[
            "the deployment is spread over 3 nodes but has 2 worker(s)",
            "s.yaml:6:12",
            "hint: set `nodes: 2` or launch more workers",
        ],
    );
    // Placed prefill first, then decode, one per node: valid.
    let spec = ws.write(
        "ok.yaml",
        "name: ok\nserver:\n  engine: sglang\n  deployment:\n    prefill: 1\n    decode: 2\n    nodes: 2\n    placement: [1, 0, 1]\nworkload:\n  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
    );
    let out = validate(&ws, &spec);
    assert!(out.status.success(), "{}", show(&out));
}

/// `profile.points` names points of the plan: an id past the sweep's three points, or
/// `answer` without a capacity search, would profile nothing and say nothing; `validate`
/// (and `run`, before a run directory exists) refuses each at its place, listing the ids.
#[test]
fn profile_points_name_points_of_the_plan() {
    let ws = Workspace::new();
    let spec = ws.write(
        "pr.yaml",
        &sim_spec(
            "pr",
            WORKLOAD,
            "sweep:\n  concurrency: [1, 2, 4]\nprofile: { points: [p002, p009, answer] }",
        ),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "error: `p009` is not a point of this spec: nothing would be profiled for it\n  --> pr.yaml:12:27",
            "= hint: the plan has 3 points: p001, p002, p003 (`servebench plan` lists them)",
            "error: `answer` names a capacity search's answer, and this spec has no `search:`\n  --> pr.yaml:12:33",
            "= hint: add a `search:` to profile its answer, or name the points to profile (`[p001]`)",
            "2 errors",
        ],
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pr.yaml:12:27"));
    assert!(!ws.path().join("runs").exists());
}

/// The engine's profiler capture was `profile:`, which also names the simulator's timing model
/// (issue 34 item 6): it is `profiler:` now, and a spec with the old key still validates, with
/// a warning at the key naming the new one.
#[test]
fn the_old_profile_key_still_works_with_a_warning_naming_profiler() {
    let ws = Workspace::new();
    let old = ws.write(
        "old.yaml",
        &sim_spec("old", WORKLOAD, "profile: { points: all }"),
    );
    let out = validate(&ws, &old);
    assert!(out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    contains_all(
        &stderr,
        &[
            "`profile:` is now `profiler:`",
            "old.yaml:10:1",
            "rename `profile:` to `profiler:`",
        ],
    );
    let new = ws.write(
        "new.yaml",
        &sim_spec("new", WORKLOAD, "profiler: { points: all }"),
    );
    let out = validate(&ws, &new);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("is now"),
        "{}",
        show(&out)
    );
}

/// `load` is one shape per kind: a field its kind does not read (set in the spec or swept) is
/// refused at its key, not ignored, and each kind's own block is required.
#[test]
fn a_load_field_its_kind_does_not_read_is_refused_at_its_key() {
    let ws = Workspace::new();
    ws.write("t.jsonl", "{\"at\": 0}\n{\"at\": 0.5}\n");
    let spec = ws.write(
        "arrival.yaml",
        &load_validate_spec(
            "load:\n  kind: trace\n  trace: { file: t.jsonl }\n  arrival: gamma\n  sessions: { users: 2, turns: 2, think: 1s }",
        ),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "`load.arrival` applies to `kind: rate` and `kind: ramp`, and this load is `kind: trace`: it would be ignored",
            "arrival.yaml:13:3",
            "`load.sessions` belongs to `kind: sessions`",
            "arrival.yaml:14:3",
            "hint: remove it, or change `load.kind`",
        ],
    );
    let spec = ws.write(
        "swept.yaml",
        &load_validate_spec(
            "load: { kind: trace, trace: { file: t.jsonl } }\nsweep:\n  load.seed: [1, 2]",
        ),
    );
    let text = refused(&validate(&ws, &spec));
    contains_all(
        &text,
        &[
            "`load.seed` applies to `kind: rate` and `kind: ramp`, and this load is `kind: trace`",
            "sweep a field of this load's kind",
        ],
    );
    let spec = ws.write(
        "missing.yaml",
        &load_validate_spec("load: { kind: ramp }\nstop: { duration: 1s }"),
    );
    contains_all(
        &refused(&validate(&ws, &spec)),
        &["`load.kind: ramp` needs `load.ramp`"],
    );
    let spec = ws.write(
        "fine.yaml",
        &load_validate_spec(
            "load: { kind: trace, trace: { file: t.jsonl }, max_in_flight: 4, lag_limit: 20ms }",
        ),
    );
    let out = validate(&ws, &spec);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
