//! Spec loading: typed expansion, diagnostics with positions and hints, budgets, schema.

use std::path::Path;

use serde_json::json;
use servebench_model::spec::types::{ArgValue, Engine, PromptSpec};
use servebench_model::spec::{self, Diagnostic, LoadedSpec};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/specs");

/// A small valid spec; tests append or replace lines to break it.
const BASE: &str = "name: t
server:
  engine: sim
workload:
  prompt: { kind: repeat, tokens: 64 }
  output_tokens: 8
";

#[track_caller]
fn ok(source: &str) -> LoadedSpec {
    match spec::load_str("t.yaml", source) {
        Ok(s) => s,
        Err(e) => panic!("expected the spec to load, got:\n{e}"),
    }
}

#[track_caller]
fn errors(source: &str) -> Vec<Diagnostic> {
    match spec::load_str("t.yaml", source) {
        Ok(_) => panic!("expected errors for:\n{source}"),
        Err(e) => {
            // Rendering must never be empty and must not contain colour codes.
            let text = e.to_string();
            assert!(
                text.contains("error: ") && !text.contains('\u{1b}'),
                "{text}"
            );
            e.diagnostics
        }
    }
}

/// The one diagnostic whose message contains `needle`.
#[track_caller]
fn find<'a>(diags: &'a [Diagnostic], needle: &str) -> &'a Diagnostic {
    let found: Vec<&Diagnostic> = diags
        .iter()
        .filter(|d| d.message.contains(needle))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one diagnostic containing {needle:?}, got {diags:#?}"
    );
    found[0]
}

#[track_caller]
fn at(d: &Diagnostic, line: usize, column: usize, snippet: &str) {
    assert_eq!(
        (d.line, d.column, d.snippet.as_str()),
        (line, column, snippet),
        "{d:#?}"
    );
}

#[track_caller]
fn hint(d: &Diagnostic) -> &str {
    d.hint
        .as_deref()
        .unwrap_or_else(|| panic!("no hint: {d:#?}"))
}

#[test]
fn full_spec_expands_into_typed_points_in_order() {
    let spec = spec::load(&Path::new(FIXTURES).join("full.yaml")).unwrap();
    assert_eq!(spec.name, "long-context");
    assert!(spec.description.starts_with("Prefill and decode"));
    assert_eq!(spec.dimensions, ["ctx", "server.args.chunked-prefill-size"]);
    assert_eq!(spec.sha256.len(), 64);
    let ids: Vec<&str> = spec.points.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["p001", "p002", "p003", "p004"]);
    let combos: Vec<(i64, i64)> = spec
        .points
        .iter()
        .map(|p| {
            (
                p.values["ctx"].as_i64().unwrap(),
                p.values["server.args.chunked-prefill-size"]
                    .as_i64()
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(
        combos,
        [(1024, 2048), (1024, 4096), (4096, 2048), (4096, 4096)]
    );
    let last = &spec.points[3].experiment;
    match &last.workload.prompt {
        PromptSpec::Repeat {
            tokens, calibrate, ..
        } => assert_eq!((*tokens, *calibrate), (4096, true)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        last.server.args["chunked-prefill-size"],
        ArgValue::Int(4096)
    );
    assert_eq!(
        spec.points[0].experiment.server.args["chunked-prefill-size"],
        ArgValue::Int(2048)
    );
    assert_eq!(last.server.args["enable-metrics"], ArgValue::Bool(true));
    assert_eq!(last.server.engine, Engine::Sim);
    assert_eq!(
        last.server.ready_timeout,
        std::time::Duration::from_secs(120)
    );
    assert_eq!(last.requests, 2);
}

#[test]
fn no_sweep_gives_one_point_with_defaults() {
    let spec = spec::load(&Path::new(FIXTURES).join("minimal.yaml")).unwrap();
    assert_eq!(spec.points.len(), 1);
    assert_eq!(spec.points[0].id, "p001");
    assert!(spec.points[0].values.is_empty() && spec.dimensions.is_empty());
    let e = &spec.points[0].experiment;
    assert_eq!(
        (e.repeat, e.requests, e.concurrency, e.host.label().as_str()),
        (1, 1, 1, "local")
    );
}

#[test]
fn templates_interpolate_and_top_level_fields_are_swept() {
    let src = format!(
        "{BASE}description: \"ctx {{{{ ctx }}}} at c={{{{concurrency}}}}\"\nsweep:\n  ctx: [1, 2]\n  concurrency: [4, 8]\n  workload.output_tokens: [16]\n"
    );
    let spec = ok(&src);
    assert_eq!(spec.points.len(), 4);
    let p = &spec.points[1].experiment;
    assert_eq!(p.description, "ctx 1 at c=8");
    assert_eq!(
        (p.concurrency, p.workload.output_tokens.clone()),
        (8, servebench_model::spec::types::Length::Fixed(16))
    );
    assert_eq!(spec.points[1].values["concurrency"], json!(8));
}

#[test]
fn point_ids_widen_past_999() {
    let src = format!(
        "{BASE}sweep:\n  requests: [{}]\n",
        (1..=1000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let spec = ok(&src);
    assert_eq!(spec.points[0].id, "p0001");
    assert_eq!(spec.points[999].id, "p1000");
}

#[test]
fn syntax_error_has_position() {
    let d = errors("name: t\nserver: [a, b\nworkload: {}\n");
    assert_eq!(d.len(), 1);
    assert!(d[0].message.starts_with("YAML syntax error"), "{d:#?}");
    assert!(d[0].line >= 2, "{d:#?}");
}

#[test]
fn unknown_field_with_did_you_mean() {
    let d = errors(&format!("{BASE}concurency: 8\n"));
    let e = find(&d, "unknown field `concurency`");
    at(e, 7, 1, "concurency");
    assert_eq!(hint(e), "did you mean `concurrency`?");
    let rendered = spec::SpecErrors {
        diagnostics: d.clone(),
    }
    .to_string();
    assert!(rendered.contains("--> t.yaml:7:1"), "{rendered}");
    assert!(
        rendered
            .contains("7 | concurency: 8\n  | ^^^^^^^^^^\n  = hint: did you mean `concurrency`?"),
        "{rendered}"
    );
}

#[test]
fn nested_unknown_field() {
    let d = errors(&BASE.replace("  engine: sim\n", "  engine: sim\n  redy_timeout: 2m\n"));
    let e = find(&d, "unknown field `redy_timeout`");
    at(e, 4, 3, "redy_timeout");
    assert_eq!(hint(e), "did you mean `ready_timeout`?");
}

#[test]
fn wrong_type_names_expected_and_found() {
    let d = errors(&BASE.replace("output_tokens: 8", "output_tokens: abc"));
    let e = find(&d, "expected an integer, found \"abc\"");
    at(e, 6, 18, "abc");
    let d = errors(&BASE.replace("output_tokens: 8", "output_tokens: \"8\""));
    assert_eq!(
        hint(find(&d, "expected an integer")),
        "remove the quotes: 8"
    );
}

#[test]
fn out_of_range_value() {
    let d = errors(&format!("{BASE}concurrency: 0\n"));
    let e = find(&d, "out of range");
    at(e, 7, 14, "0");
    assert_eq!(e.message, "0 is out of range: must be at least 1");
    assert!(hint(e).contains("between 1 and 4096"));
}

#[test]
fn missing_required_field_points_at_parent() {
    let d = errors(&BASE.replace("  output_tokens: 8\n", ""));
    let e = find(&d, "missing required field `output_tokens`");
    at(e, 4, 1, "workload");
    let d = errors("name: t\nserver: {}\n");
    let e = find(&d, "missing required field `workload`");
    assert_eq!((e.line, e.column), (1, 1));
}

#[test]
fn bad_enum_value_lists_allowed_values() {
    let d = errors(&BASE.replace("engine: sim", "engine: sglangg"));
    let e = find(&d, "unknown value \"sglangg\"");
    at(e, 3, 11, "sglangg");
    assert_eq!(
        hint(e),
        "did you mean `sglang`? (one of `sim`, `sglang`, `vllm`, `llama.cpp`, `command`)"
    );
    let d = errors(&BASE.replace("kind: repeat", "kind: rpt"));
    let e = find(&d, "unknown value \"rpt\"");
    assert!(hint(e).contains("`repeat`, `random`, `file`"), "{e:#?}");
}

#[test]
fn prompt_variant_fields_are_checked_by_kind() {
    let d = errors(&BASE.replace("tokens: 64", "tokens: 64, seed: 3"));
    let e = find(&d, "unknown field `seed`");
    at(e, 5, 39, "seed");
}

#[test]
fn empty_sweep_dimension() {
    let d = errors(&format!("{BASE}sweep:\n  ctx: []\n"));
    let e = find(&d, "sweep dimension `ctx` has no values");
    at(e, 8, 8, "[]");
}

#[test]
fn unused_sweep_variable() {
    let d = errors(&format!("{BASE}sweep:\n  ctx: [1, 2]\n"));
    let e = find(&d, "sweep variable `ctx` is never used");
    at(e, 8, 3, "ctx");
    assert!(hint(e).contains("{{ ctx }}"));
}

#[test]
fn undefined_template_variable() {
    let src = BASE.replace("tokens: 64", "tokens: \"{{ ctxx }}\"") + "sweep:\n  ctx: [1, 2]\n";
    let d = errors(&src);
    let e = find(&d, "undefined variable `ctxx`");
    at(e, 5, 35, "\"{{ ctxx }}\"");
    assert_eq!(hint(e), "did you mean `ctx`?");
}

#[test]
fn unsupported_template_syntax() {
    let src = BASE.replace("tokens: 64", "tokens: \"{{ ctx | int }}\"") + "sweep:\n  ctx: [1, 2]\n";
    let d = errors(&src);
    let e = find(&d, "template filters are not supported");
    assert_eq!(e.line, 5);
    let d = errors(&format!("{BASE}description: \"{{{{ ctx\"\n"));
    find(&d, "unclosed template");
}

#[test]
fn templated_value_is_typed_after_substitution() {
    let src = BASE.replace("tokens: 64", "tokens: \"{{ ctx }}\"") + "sweep:\n  ctx: [64, abc]\n";
    let d = errors(&src);
    let e = find(
        &d,
        "expected an integer, found \"abc\" (with ctx = \"abc\")",
    );
    assert_eq!(e.line, 5);
}

#[test]
fn bad_duration_suggests_humantime_spelling() {
    let d = errors(&BASE.replace("engine: sim", "engine: sim\n  ready_timeout: 20 minuts"));
    let e = find(&d, "`20 minuts` is not a duration");
    at(e, 4, 18, "20 minuts");
    assert_eq!(hint(e), "write `20m`");
    let d = errors(&format!("{BASE}request_timeout: soon\n"));
    assert!(hint(find(&d, "`soon` is not a duration")).contains("`90s`"));
    // humantime reads words too.
    let spec = ok(&BASE.replace("engine: sim", "engine: sim\n  ready_timeout: 20 minutes"));
    assert_eq!(
        spec.points[0].experiment.server.ready_timeout.as_secs(),
        1200
    );
}

#[test]
fn url_with_launch_settings_is_an_error() {
    let d = errors(&BASE.replace(
        "engine: sim",
        "engine: sim\n  url: http://127.0.0.1:30000\n  args: { tp: 2 }",
    ));
    let e = find(
        &d,
        "`server.url` points at a running server, so `server.args` would be ignored",
    );
    at(e, 4, 3, "url");
    ok(&BASE.replace("engine: sim", "engine: sim\n  url: http://127.0.0.1:30000"));
}

#[test]
fn hosts_are_local_or_ssh() {
    ok(&format!("{BASE}host: ssh://root@gpu-box:2222\n"));
    ok(&format!(
        "{BASE}host: {{ ssh: root@gpu-box, identity: ~/.ssh/id_ed25519, jump: bastion, host_key_check: accept-new, options: {{ ServerAliveInterval: '15' }} }}\nclient: local\n"
    ));
    let d = errors(&format!("{BASE}host: gpu-box\n"));
    let e = find(&d, "host `gpu-box` is neither `local` nor an SSH URL");
    at(e, 7, 7, "gpu-box");
    assert!(hint(e).contains("ssh://user@host"));
    let d = errors(&format!(
        "{BASE}host: {{ ssh: gpu, host_key_check: yes }}\n"
    ));
    find(&d, "unknown value \"yes\" for `host.host_key_check`");
}

#[test]
fn methods_and_expectations() {
    ok(&format!("{BASE}method: two-point\n"));
    ok(&format!(
        "{BASE}method: {{ kind: two-point, a: 1, b: 33 }}\n"
    ));
    let d = errors(&format!(
        "{BASE}method: {{ kind: two-point, a: 8, b: 4 }}\n"
    ));
    find(&d, "`b` (4) must be larger than `a` (8)");
    let d = errors(&format!("{BASE}method: twopoint\n"));
    find(&d, "twopoint");
    ok(&format!(
        "{BASE}sweep:\n  concurrency: [1, 2]\nexpect:\n  - {{ where: {{ concurrency: 1 }}, metric: ttft_s, value: 0.46, tolerance: 10% }}\n  - {{ where: {{ concurrency: 2 }}, failure: out-of-memory }}\n"
    ));
    let d = errors(&format!(
        "{BASE}sweep:\n  concurrency: [1, 2]\nexpect:\n  - {{ where: {{ concurency: 1 }}, metric: ttft, value: 0.46 }}\n  - {{ where: {{ concurrency: 3 }}, metric: ttft_s }}\n"
    ));
    let e = find(
        &d,
        "`where` names `concurency`, which is not a sweep dimension",
    );
    assert!(hint(e).contains("concurrency"));
    let e = find(&d, "unknown metric `ttft`");
    assert!(hint(e).contains("ttft_s"));
    find(&d, "no point has concurrency = 3");
    find(&d, "`metric` needs a `value`");
}

#[test]
fn expected_flags_and_failures_are_checked_against_the_catalogue() {
    ok(&format!(
        "{BASE}expect:\n  - {{ flag: cache-reuse-suspected }}\n  - {{ failure: ready-timeout }}\n"
    ));
    let d = errors(&format!(
        "{BASE}expect:\n  - {{ flag: cold-cache-hits }}\n  - {{ failure: out-of-memmory }}\n  - {{ flag: sparkles }}\n"
    ));
    let e = find(&d, "unknown flag `cold-cache-hits`");
    assert_eq!(hint(e), "did you mean `cold-cache-hit`?");
    let e = find(&d, "unknown failure cause `out-of-memmory`");
    assert_eq!(hint(e), "did you mean `out-of-memory`?");
    let e = find(&d, "unknown flag `sparkles`");
    assert!(hint(e).starts_with("one of cache-hits, "), "{}", hint(e));
}

#[test]
fn sweep_paths_must_exist_and_not_be_fixed() {
    let d = errors(&format!(
        "{BASE}sweep:\n  server.argz.x: [1]\n  name: [a]\n  server: [a]\n  workload.prompt.tokens: [1, 2]\n"
    ));
    let e = find(&d, "`server` has no field `argz`");
    at(e, 8, 3, "server.argz.x");
    assert_eq!(hint(e), "did you mean `args`?");
    find(&d, "`name` cannot be swept");
    find(&d, "`server` is a whole section");
    assert!(!d.iter().any(|d| d.message.contains("tokens")), "{d:#?}");
}

#[test]
fn swept_field_errors_point_at_the_sweep_value() {
    let d = errors(&format!("{BASE}sweep:\n  concurrency: [1, 0]\n"));
    let e = find(&d, "out of range");
    at(e, 8, 20, "0");
    assert!(e.message.ends_with("(with concurrency = 0)"), "{e:#?}");
}

#[test]
fn too_many_points() {
    let list = (1..=101)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let d = errors(&format!(
        "{BASE}description: \"{{{{a}}}}{{{{b}}}}\"\nsweep:\n  a: [{list}]\n  b: [{list}]\n"
    ));
    let e = find(&d, "expands to 10201 points");
    at(e, 8, 1, "sweep");
}

#[test]
fn many_errors_are_reported_together() {
    let err = spec::load(&Path::new(FIXTURES).join("many-errors.yaml")).unwrap_err();
    let d = &err.diagnostics;
    for needle in [
        "unknown value \"sglangg\"",
        "`20 minuts` is not a duration",
        "undefined variable `ctxx`",
        "expected an integer, found \"abc\"",
        "unknown field `concurency`",
        "sweep variable `ctx` is never used",
    ] {
        find(d, needle);
    }
    let lines: Vec<usize> = d.iter().map(|d| d.line).collect();
    assert!(
        lines.windows(2).all(|w| w[0] <= w[1]),
        "sorted by position: {lines:?}"
    );
    assert!(d.iter().all(|d| d.file.ends_with("many-errors.yaml")));
    assert!(err.to_string().ends_with(&format!("{} errors\n", d.len())));
}

#[test]
fn yaml_level_errors() {
    let e = &errors("name: a\nname: b\n")[0];
    at(e, 2, 1, "name");
    assert!(e.message.contains("duplicate key `name`"));
    let e = &errors(&format!("{BASE}---\nname: u\n"))[0];
    assert!(e.message.contains("more than one YAML document"), "{e:#?}");
    let e = &errors("")[0];
    assert_eq!(e.message, "the file is empty");
    let e = &errors("- a\n- b\n")[0];
    assert!(e.message.contains("must be a mapping"), "{e:#?}");
    let e = &errors(&format!("{BASE}description: !custom x\n"))[0];
    assert!(e.message.contains("tag `!custom`"), "{e:#?}");
}

#[test]
fn budgets_are_enforced() {
    let big = format!("{BASE}description: \"{}\"\n", "x".repeat(9 * 1024 * 1024));
    assert!(errors(&big)[0].message.contains("limited to 8388608 bytes"));

    let deep = format!(
        "{BASE}description: {}{}\n",
        "[".repeat(100),
        "]".repeat(100)
    );
    assert!(errors(&deep)[0].message.contains("nesting deeper than 64"));

    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 0..8 {
        let prev = (b'a' + i) as char;
        let next = (b'a' + i + 1) as char;
        bomb.push_str(&format!("{next}: &{next} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
    }
    let e = &errors(&bomb)[0];
    assert!(e.message.contains("once aliases are expanded"), "{e:#?}");

    let many: String = (0..1100).map(|i| format!("k{i}: *a\n")).collect();
    let e = &errors(&format!("a: &a 1\n{many}"))[0];
    assert!(e.message.contains("more than 1000 aliases"), "{e:#?}");
}

#[test]
fn garbage_never_panics() {
    let deep_map = "a:\n".to_string()
        + &(1..200)
            .map(|i| format!("{}a:\n", "  ".repeat(i)))
            .collect::<String>();
    let inputs: Vec<String> = vec![
        String::new(),
        " ".into(),
        "\n\n# only a comment\n".into(),
        "42".into(),
        "hello".into(),
        "~".into(),
        "[1, 2, 3]".into(),
        "- a\n- b".into(),
        "\tname: t".into(),
        "name:\tt\n\tserver: x".into(),
        "\u{0}\u{1}\u{2}binary\u{ff}".into(),
        String::from_utf8_lossy(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0x01]).into_owned(),
        "[".repeat(10_000),
        "{".repeat(10_000),
        deep_map,
        "!tag\nname: t".into(),
        "!!int name".into(),
        "name: !!int x".into(),
        "name: !!float 1".into(),
        "name: .nan\nserver: .inf".into(),
        "a: 1\na: 2".into(),
        "---\na: 1\n---\nb: 2".into(),
        "...".into(),
        "---".into(),
        "*unknown".into(),
        "a: *unknown".into(),
        "&a [*a]".into(),
        "? [complex, key]\n: v".into(),
        "{[1]: 2}".into(),
        "name: t\nsweep: 3".into(),
        "name: t\nsweep: [1]".into(),
        "name: t\nsweep: { a: 3 }".into(),
        "name: t\nsweep: { a: [[1]], b: [{x: 1}] }".into(),
        "name: t\nsweep: { '': [1], '.': [1], 'a..b': [1], '{{': [1] }".into(),
        "name: t\nserver: { args: 3 }\nsweep: { server.args.x: [1] }".into(),
        "name: t\nserver: 3\nsweep: { server.port: [1] }".into(),
        "name: '{{'\ndescription: '}}{{}}{{ a }}{% x %}'".into(),
        "name: t\nrequests: 99999999999999999999999".into(),
        "name: t\nrequests: -1\nconcurrency: 1.5\nrepeat: 1e400".into(),
        "\u{feff}name: t".into(),
        "name: \"\\uD800\"".into(),
        "'unterminated".into(),
        "a: 'é{{ x }}ü'\nsweep: { x: [1] }".into(),
        "key with spaces: 1\n\"quoted/key~\": 2".into(),
    ];
    for input in &inputs {
        let result = std::panic::catch_unwind(|| spec::load_str("g.yaml", input));
        match result {
            Ok(Ok(_)) => panic!("garbage loaded: {input:?}"),
            Ok(Err(e)) => {
                assert!(!e.diagnostics.is_empty(), "{input:?}");
                let _ = e.to_string();
            }
            Err(_) => panic!("panicked on {input:?}"),
        }
    }
}

#[test]
fn load_reports_unreadable_and_non_utf8_files() {
    let e = spec::load(Path::new("/nonexistent/spec.yaml")).unwrap_err();
    assert!(e.diagnostics[0].message.contains("cannot read"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bin.yaml");
    std::fs::write(&path, [b'a', b':', b' ', 0xff, 0xfe]).unwrap();
    let e = spec::load(&path).unwrap_err();
    assert!(e.diagnostics[0].message.contains("not UTF-8"));
}

#[test]
fn checked_in_schema_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/experiment.schema.json");
    let current = spec::schema_json();
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &current).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == current,
        "schemas/experiment.schema.json is stale: run `cargo run -- schema > schemas/experiment.schema.json` \
         (or `UPDATE_SCHEMA=1 cargo test checked_in_schema`)"
    );
}

#[test]
fn schema_has_metadata_and_accepts_templates() {
    let schema: serde_json::Value = serde_json::from_str(&spec::schema_json()).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert!(
        schema["$id"]
            .as_str()
            .unwrap()
            .ends_with("experiment.schema.json")
    );
    assert!(schema["title"].is_string());
    let conc = &schema["properties"]["concurrency"];
    assert!(conc["description"].as_str().unwrap().contains("in flight"));
    assert_eq!(conc["anyOf"][1]["type"], "string");
}

#[test]
fn example_specs_validate_against_the_schema() {
    let schema: serde_json::Value = serde_json::from_str(&spec::schema_json()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    for name in ["full.yaml", "minimal.yaml"] {
        let text = std::fs::read_to_string(Path::new(FIXTURES).join(name)).unwrap();
        let doc = servebench_model::spec::yaml::parse(&text).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&doc.value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }
    // And the schema rejects what load rejects, for editors.
    let bad = servebench_model::spec::yaml::parse("name: t\nconcurency: 1\n").unwrap();
    assert!(!validator.is_valid(&bad.value));
}

#[test]
fn rendered_errors_are_stable() {
    let err = spec::load_str("x.yaml", "name: t\nserver: { engine: sim }\nworkload:\n  prompt: { kind: repeat, tokens: 8 }\n  output_tokens: 8\nconcurency: 8\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "error: unknown field `concurency`\n --> x.yaml:6:1\n  |\n6 | concurency: 8\n  | ^^^^^^^^^^\n  = hint: did you mean `concurrency`?\n"
    );
}

#[test]
fn the_guides_spec_examples_load() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide/specs.md"))
            .unwrap();
    // The full example under "Writing a spec" must load as written.
    let section = readme
        .split_once("# Writing a spec")
        .map(|(_, rest)| rest)
        .unwrap();
    let example = section
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(y, _)| y)
        .unwrap();
    let spec = ok(example);
    assert_eq!(spec.points.len(), 6);
    assert_eq!(spec.points[0].experiment.expect.len(), 1);
}
