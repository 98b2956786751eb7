//! The command line as a user meets it: help, validation, plan.

use crate::common::*;

#[test]
fn help_explains_every_command() {
    let out = servebench().arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["validate", "plan", "run", "report", "schema", "sim"] {
        assert!(text.contains(cmd), "{cmd} missing from --help:\n{text}");
    }
    assert!(text.contains("Exit codes"));
    let out = servebench().args(["run", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Ctrl-C"));
}

#[test]
fn plan_shows_groups_and_points() {
    let ws = Workspace::new();
    let spec = ws.write(
        "p.yaml",
        &sim_spec(
            "p",
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 8",
            "sweep:\n  ctx: [128, 256]\n  server.args.chunked-prefill-size: [512, 1024]\nrequests: 3",
        ),
    );
    let out = servebench().arg("plan").arg(&spec).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("4 points, 2 server groups, 2 launches, 12 measured requests"),
        "{text}"
    );
    assert!(text.contains("--chunked-prefill-size 512"), "{text}");
    assert!(text.contains("ctx=128"), "{text}");
}

#[test]
fn an_invalid_spec_exits_2_with_file_line_and_column() {
    let ws = Workspace::new();
    let spec = ws.write("bad.yaml", "name: bad\nserver: { engine: sim }\nworkload:\n  prompt: { kind: repeat, tokens: 10 }\n  output_tokens: 4\nconcurency: 3\n");
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml:6:1"), "{err}");
    assert!(err.contains("concurrency"), "did-you-mean hint: {err}");
    let out = servebench()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !ws.path().join("runs").exists(),
        "nothing is started for an invalid spec"
    );
}

#[test]
fn the_quickstart_spec_is_valid() {
    let out = servebench()
        .args(["validate", "experiments/quickstart.yaml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn schema_prints_each_checked_in_schema() {
    for (args, file) in [
        (&[][..], "schemas/experiment.schema.json"),
        (&["experiment"][..], "schemas/experiment.schema.json"),
        (&["report-model"][..], "schemas/report-model.schema.json"),
        (&["compare-model"][..], "schemas/compare-model.schema.json"),
    ] {
        let out = servebench().arg("schema").args(args).output().unwrap();
        assert!(out.status.success(), "{}", show(&out));
        let on_disk =
            std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        assert!(
            out.stdout == on_disk,
            "`servebench schema {args:?}` differs from {file}"
        );
    }
    let out = servebench().args(["schema", "report"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("report-model"));
}
