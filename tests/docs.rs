//! The guide and the README say only what is there: every relative link resolves, every
//! `experiments/` file a page names exists, and every YAML spec snippet of the guide and the
//! README validates (a snippet
//! with a `name:` as it stands; a fragment on top of a small simulator spec, its top-level keys
//! replacing the base's).

use std::path::{Path, PathBuf};

use crate::common::*;

/// Markdown files a reader meets: the README, the architecture map and everything in `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// The page's lines outside fenced code blocks, with their line numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .map(|(i, l)| (i + 1, l))
        .collect()
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in prose(&text) {
            for m in link.captures_iter(line) {
                let target = &m[1];
                if target.contains("://")
                    || target.starts_with('#')
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let file = target.split('#').next().unwrap();
                if !page.parent().unwrap().join(file).exists() {
                    broken.push(format!("{}:{n}: {target}", page.display()));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_experiments_file_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let named =
        regex::Regex::new(r"experiments/([A-Za-z0-9_.\-/]+\.(?:yaml|jsonl|json|txt))").unwrap();
    let mut missing = Vec::new();
    let mut seen = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in text.lines().enumerate() {
            for m in named.captures_iter(line) {
                seen += 1;
                if !root.join("experiments").join(&m[1]).exists() {
                    missing.push(format!(
                        "{}:{}: experiments/{}",
                        page.display(),
                        n + 1,
                        &m[1]
                    ));
                }
            }
        }
    }
    assert!(seen > 20, "the docs name experiments files ({seen} found)");
    assert!(
        missing.is_empty(),
        "named but not there:\n{}",
        missing.join("\n")
    );
}

/// What a fragment is laid over: a spec of the simulator with one short prompt.
const BASE: &str = r#"{"name": "doc-snippet", "server": {"engine": "sim", "model": "demo-model", "args": {"profile": "fast"}},
 "workload": {"api": "sglang-generate", "prompt": {"kind": "repeat", "tokens": 64}, "output_tokens": 8}}"#;

#[test]
fn every_spec_snippet_in_the_docs_validates() {
    let ws = Workspace::new();
    let block = regex::Regex::new(r"(?s)```yaml\n(.*?)```").unwrap();
    let base: serde_json::Value = serde_json::from_str(BASE).unwrap();
    let mut checked = 0;
    // The guide and the README; design notes in docs/design describe what is not built yet.
    let guide =
        |p: &Path| p.ends_with("README.md") || p.parent().is_some_and(|d| d.ends_with("guide"));
    for page in pages().into_iter().filter(|p| guide(p)) {
        let text = std::fs::read_to_string(&page).unwrap();
        for m in block.captures_iter(&text) {
            let line = text[..m.get(0).unwrap().start()].lines().count() + 1;
            let where_ = format!("{}:{line}", page.display());
            let snippet: serde_json::Value =
                serde_saphyr::from_str(&m[1]).unwrap_or_else(|e| panic!("{where_}: not YAML: {e}"));
            let serde_json::Value::Object(fields) = &snippet else {
                panic!("{where_}: a spec snippet is a mapping");
            };
            let spec = if fields.contains_key("name") {
                snippet.clone()
            } else {
                let mut spec = base.clone();
                for (k, v) in fields {
                    spec[k] = v.clone();
                }
                spec
            };
            checked += 1;
            // JSON is YAML: the spec as servebench reads a file.
            let file = ws.write(&format!("snippet-{checked}.yaml"), &spec.to_string());
            let out = servebench()
                .arg("validate")
                .arg(&file)
                .current_dir(ws.path())
                .timeout(std::time::Duration::from_secs(60))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{where_}: the snippet does not validate:\n{}",
                show(&out)
            );
        }
    }
    assert!(checked >= 10, "the guide's spec snippets ({checked} found)");
}

#[test]
fn every_file_a_comment_cites_is_in_the_repository() {
    // Paths the code cites as its sources (`docs/reference/sglang-facts.md`, `ARCHITECTURE.md`)
    // and facts files named by their stem (`vllm-facts §3`); names of files that tests and
    // examples create (`report.md`, `mine.md`) are not citations and have no directory part.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cited = regex::Regex::new(r"((?:\.\./)?(?:docs|shared|ARCHITECTURE|README)[A-Za-z0-9_./-]*\.md)|\b((?:sglang|vllm|llama-cpp)-(?:facts|observed|extra|on-cpu))\b").unwrap();
    let mut missing = Vec::new();
    // Source paths from the repository's root (`crates/sim/src/lib.rs`,
    // `crates/sim/src/sglang_flags.txt`), in the code and in the prose, so a file that moves
    // takes its citations with it.
    let source = regex::Regex::new(r"(?:^|[^A-Za-z0-9_./-])((?:src|crates|tests|benches|scripts|reports|profiles|experiments)/[A-Za-z0-9_./*-]*[A-Za-z0-9_*])").unwrap();
    let mut dirs = vec![
        root.join("src"),
        root.join("crates"),
        root.join("tests"),
        root.join("benches"),
        root.join("docs"),
    ];
    for page in ["README.md", "ARCHITECTURE.md"] {
        check_source_paths(root, &root.join(page), &source, &mut missing);
    }
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.ends_with("docs.rs") {
                continue;
            }
            if path
                .extension()
                .is_some_and(|e| e == "md" || e == "j2" || e == "rs")
            {
                check_source_paths(root, &path, &source, &mut missing);
            }
            if path.extension().is_none_or(|e| e != "rs" && e != "txt") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                for m in cited.captures_iter(line) {
                    let file = match (m.get(1), m.get(2)) {
                        (Some(p), _) => root.join(p.as_str()),
                        (None, Some(stem)) => root
                            .join("docs/reference")
                            .join(format!("{}.md", stem.as_str())),
                        _ => continue,
                    };
                    if !file.starts_with(root)
                        || file.components().any(|c| c.as_os_str() == "..")
                        || !file.exists()
                    {
                        missing.push(format!("{}:{}: {}", path.display(), n + 1, &m[0]));
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited but not in the repository:\n{}",
        missing.join("\n")
    );
}

/// Every root-relative source path `path` names (`crates/sim/src/lib.rs`) exists. Not
/// citations: a glob (`profiles/*.yaml`), a placeholder (`experiments/NAME.yaml`), another
/// project's source (llama.cpp's `src/llama.cpp`: a `src/` path counts only when its next part
/// is, or was before the crates, one of ours), a path relative to the citing crate.
fn check_source_paths(root: &Path, path: &Path, source: &regex::Regex, missing: &mut Vec<String>) {
    const MOVED_TO_CRATES: &[&str] = &[
        "sim",
        "catalog",
        "spec",
        "results",
        "measure",
        "report",
        "text.rs",
        "redact.rs",
        "console.rs",
        "secrets.rs",
    ];
    let text = std::fs::read_to_string(path).unwrap();
    let crate_root = path
        .ancestors()
        .find(|a| a.join("Cargo.toml").exists())
        .unwrap_or(root);
    for (n, line) in text.lines().enumerate() {
        for m in source.captures_iter(line) {
            let cited = m[1].trim_end_matches('.');
            let parts: Vec<&str> = cited.split('/').collect();
            let placeholder = parts.iter().any(|p| {
                let stem = p.split('.').next().unwrap_or("");
                stem.len() > 1 && stem.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            });
            if cited.contains('*') || placeholder {
                continue;
            }
            if parts[0] == "src"
                && parts.len() > 1
                && !root.join("src").join(parts[1]).exists()
                && !MOVED_TO_CRATES.contains(&parts[1])
            {
                continue;
            }
            if !root.join(cited).exists() && !crate_root.join(cited).exists() {
                missing.push(format!("{}:{}: {cited}", path.display(), n + 1));
            }
        }
    }
}

/// The engine's profiler key is `profiler:`; the old `profile:` is named only where its rename
/// is said (the loader's warning and the guide's paragraph on the name).
#[test]
fn the_old_profile_key_is_named_only_where_its_rename_is_said() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates", "docs", "schemas", "experiments"] {
        collect(&root.join(dir), &mut files);
    }
    files.push(root.join("README.md"));
    let allowed = ["crates/model/src/spec/load.rs", "docs/guide/profiling.md"];
    let mut stale = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if allowed.contains(&rel.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.contains("`profile:`") {
                stale.push(format!("{rel}:{}: {line}", n + 1));
            }
        }
    }
    assert!(stale.is_empty(), "stale `profile:`:\n{}", stale.join("\n"));

    fn collect(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                if !p.ends_with("target") {
                    collect(&p, out);
                }
            } else if p.extension().is_some_and(|x| {
                ["rs", "md", "json", "yaml", "j2", "jinja"].contains(&x.to_str().unwrap_or(""))
            }) {
                out.push(p);
            }
        }
    }
}

/// The README's list of the guide's chapters is the guide's own (docs/guide/SUMMARY.md), in
/// its order.
#[test]
fn the_readme_lists_every_chapter_of_the_guide_in_order() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let summary = std::fs::read_to_string(root.join("docs/guide/SUMMARY.md")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let chapters: Vec<&str> = summary
        .lines()
        .filter_map(|l| l.strip_prefix("- [")?.split("](").nth(1)?.strip_suffix(')'))
        .collect();
    assert!(chapters.len() >= 19, "{chapters:?}");
    let listed: Vec<&str> = readme
        .lines()
        .filter_map(|l| {
            let (n, rest) = l.split_once(". [")?;
            n.parse::<u32>().ok()?;
            rest.split("](docs/guide/").nth(1)?.split(')').next()
        })
        .collect();
    assert_eq!(listed, chapters);
}
