//! The architecture of ARCHITECTURE.md, enforced. Between crates the compiler holds the
//! direction (a crate cannot name one that does not list it); this file holds which crate may
//! list which, and inside each crate the module layers: a module uses only modules in lower
//! layers (no cycles, no reaching back from an early stage into a later one).

use std::path::{Path, PathBuf};

/// Each workspace crate (its directory) and the servebench crates it may depend on.
const CRATES: &[(&str, &[&str])] = &[
    ("crates/roofline", &[]),
    ("crates/sim", &[]),
    ("crates/model", &[]),
    (
        "crates/report",
        &["servebench-model", "servebench-roofline"],
    ),
    (
        ".",
        &[
            "servebench-model",
            "servebench-report",
            "servebench-roofline",
            "servebench-sim",
        ],
    ),
];

/// Per crate: (module, layer), as ARCHITECTURE.md lists them. A module may use one in a lower
/// layer; in layer 0, `text` and `console` may also use `catalog` and `redact`.
const LAYERS: &[(&str, &[(&str, u8)])] = &[
    (
        "crates/model",
        &[
            ("catalog", 0),
            ("text", 0),
            ("redact", 0),
            ("console", 0),
            ("spec", 1),
            ("secrets", 2),
            ("results", 2),
        ],
    ),
    ("crates/report", &[("measure", 0), ("report", 1)]),
    (
        ".",
        &[
            // The crates below, re-exported at the root (`crate::spec`): every module may use them.
            ("catalog", 0),
            ("console", 0),
            ("redact", 0),
            ("results", 0),
            ("secrets", 0),
            ("spec", 0),
            ("text", 0),
            ("measure", 0),
            ("report", 0),
            ("sim", 0),
            ("exit", 0),
            ("engine", 1),
            ("client", 2),
            ("host", 2),
            ("prompt", 2),
            ("load", 2),
            ("plan", 3),
            ("run", 4),
            ("error", 5),
            ("cli", 6),
        ],
    ),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The servebench crates a Cargo.toml's `[dependencies]` lists.
fn servebench_dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && line.starts_with("servebench-") {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            out.push(name);
        }
    }
    out
}

#[test]
fn crates_depend_only_on_the_crates_below_them() {
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let mut problems = Vec::new();
    for (dir, allowed) in CRATES {
        assert!(
            workspace.contains(&format!("\"{dir}\"")),
            "{dir} is not a workspace member"
        );
        let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).unwrap();
        for dep in servebench_dependencies(&manifest) {
            if !allowed.contains(&dep.as_str()) {
                problems.push(format!("{dir} depends on {dep}"));
            }
        }
    }
    let members = workspace
        .lines()
        .find(|l| l.starts_with("members"))
        .unwrap_or_default();
    for member in members.split('"').skip(1).step_by(2) {
        if !CRATES.iter().any(|(d, _)| d == &member) {
            problems.push(format!("workspace member {member} has no place in CRATES"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The top-level modules a source file names through `crate::`, with their lines: `crate::a`,
/// and each name of `crate::{a, b::c}` even when the braces span lines.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("crate::") {
        let at = from + i;
        let rest = &code[at + "crate::".len()..];
        from = at + "crate::".len();
        if let Some(inner) = rest.strip_prefix('{') {
            let (mut depth, mut end) = (1, inner.len());
            for (j, c) in inner.char_indices() {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    end = j;
                    break;
                }
            }
            let (mut depth, mut start) = (0, 0);
            let inner = &inner[..end];
            let mut names = Vec::new();
            for (j, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(&inner[start..j]);
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            names.push(&inner[start..]);
            for n in names {
                let n = n.trim().split("::").next().unwrap_or("").trim();
                if !n.is_empty() {
                    out.push((line_of(at), n.to_string()));
                }
            }
        } else {
            let used: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((line_of(at), used));
        }
    }
    out
}

#[test]
fn a_multi_line_use_names_every_module_in_its_braces() {
    let text = "use crate::{\n    spec::Spec,\n    results::{self, RunDir},\n};\nfn f() { crate::text::sig(1.0); }";
    let names: Vec<(usize, String)> = crate_paths(text);
    assert_eq!(
        names,
        vec![
            (1, "spec".to_string()),
            (1, "results".to_string()),
            (5, "text".to_string())
        ]
    );
}

#[test]
fn modules_use_only_lower_layers() {
    let mut violations = Vec::new();
    for (dir, layers) in LAYERS {
        let layer = |m: &str| layers.iter().find(|(n, _)| *n == m).map(|(_, l)| *l);
        let src = root().join(dir).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let rel = file.strip_prefix(&src).expect("under src");
            let top = rel
                .components()
                .next()
                .and_then(|c| c.as_os_str().to_str())
                .map(|s| s.trim_end_matches(".rs").to_string())
                .unwrap_or_default();
            if matches!(top.as_str(), "lib" | "main") {
                continue;
            }
            let Some(own) = layer(&top) else {
                violations.push(format!(
                    "{dir}/src/{}: module `{top}` has no layer",
                    rel.display()
                ));
                continue;
            };
            let text = std::fs::read_to_string(&file).expect("read");
            for (line, used) in crate_paths(&text) {
                if used == top || used == "self" {
                    continue;
                }
                match layer(&used) {
                    Some(l)
                        if l < own
                            || (own == 0 && matches!(used.as_str(), "catalog" | "redact")) => {}
                    Some(l) => violations.push(format!(
                        "{dir}/src/{}:{line}: `{top}` (layer {own}) uses `{used}` (layer {l})",
                        rel.display()
                    )),
                    None => violations.push(format!(
                        "{dir}/src/{}:{line}: `{used}` has no layer",
                        rel.display()
                    )),
                }
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
