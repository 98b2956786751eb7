//! The module layers of ARCHITECTURE.md, enforced: a module may use only modules in lower
//! layers (no cycles, no reaching back from an early stage into a later one).

use std::path::Path;

/// (module, layer), as ARCHITECTURE.md lists them.
const LAYERS: &[(&str, u8)] = &[
    ("catalog", 0),
    ("text", 0),
    ("exit", 0),
    ("console", 0),
    ("redact", 0),
    ("spec", 1),
    ("secrets", 2),
    ("prompt", 3),
    ("engine", 2),
    ("results", 2),
    ("sim", 2),
    ("client", 3),
    ("measure", 3),
    ("host", 3),
    ("load", 3),
    ("plan", 4),
    ("report", 5),
    ("run", 6),
    ("error", 7),
    ("cli", 8),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn modules_use_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
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
            violations.push(format!("{}: module `{top}` has no layer", rel.display()));
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(i) = rest.find("crate::") {
                rest = &rest[i + "crate::".len()..];
                let used: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // `crate::{a, b::c}` on one line names each module in the braces.
                let names: Vec<String> = if used.is_empty() && rest.starts_with('{') {
                    let inner = rest[1..].split('}').next().unwrap_or("");
                    inner
                        .split(',')
                        .map(|p| p.trim().split("::").next().unwrap_or("").to_string())
                        .filter(|n| !n.is_empty())
                        .collect()
                } else {
                    vec![used]
                };
                for used in names {
                    if used == top || used == "self" {
                        continue;
                    }
                    match layer(&used) {
                        Some(l)
                            if l < own
                                || (own == 0 && matches!(used.as_str(), "catalog" | "redact")) => {}
                        Some(l) => violations.push(format!(
                            "{}:{}: `{top}` (layer {own}) uses `{used}` (layer {l})",
                            rel.display(),
                            n + 1
                        )),
                        None => violations.push(format!(
                            "{}:{}: `{used}` has no layer",
                            rel.display(),
                            n + 1
                        )),
                    }
                }
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
