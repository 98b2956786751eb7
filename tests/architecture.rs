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
    // What the tests share; every crate lists it under [dev-dependencies] only.
    ("crates/testkit", &["servebench-model", "servebench-report"]),
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

/// Per crate directory: (module, layer), read from ARCHITECTURE.md's layer table (rows
/// `| model | 0 | `catalog`, `text` | ... |`): the document is the rule the test holds. A module
/// may use one in a lower layer; in layer 0, `text` and `console` may also use `catalog` and
/// `redact`.
fn layers() -> Vec<(&'static str, Vec<(String, u8)>)> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut out: Vec<(&'static str, Vec<(String, u8)>)> = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 {
            continue;
        }
        let dir = match cells[1] {
            "model" => "crates/model",
            "report" => "crates/report",
            "root" => ".",
            _ => continue,
        };
        let Ok(layer) = cells[2].parse::<u8>() else {
            continue;
        };
        let modules = cells[3]
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|m| !m.contains(' '))
            .map(|m| (m.to_string(), layer));
        match out.iter_mut().find(|(d, _)| *d == dir) {
            Some((_, l)) => l.extend(modules),
            None => out.push((dir, modules.collect())),
        }
    }
    out
}

#[test]
fn the_layer_table_is_read_from_architecture_md() {
    let l = layers();
    let of = |dir: &str, m: &str| {
        l.iter()
            .find(|(d, _)| *d == dir)
            .and_then(|(_, ms)| ms.iter().find(|(n, _)| n == m))
            .map(|(_, layer)| *layer)
    };
    assert_eq!(of("crates/model", "catalog"), Some(0));
    assert_eq!(of("crates/model", "results"), Some(2));
    assert_eq!(of("crates/report", "history"), Some(2));
    assert_eq!(of(".", "run"), Some(4));
    assert_eq!(of(".", "cli"), Some(6));
}

/// Every module the layer table names exists, and every top-level module of a crate is in it.
#[test]
fn the_layer_table_names_every_module_and_no_other() {
    let mut wrong = Vec::new();
    for (dir, layers) in layers() {
        let src = root().join(dir).join("src");
        for (m, _) in &layers {
            let inline = std::fs::read_to_string(src.join("lib.rs"))
                .is_ok_and(|lib| lib.contains(&format!("mod {m} {{")));
            if !src.join(format!("{m}.rs")).is_file()
                && !src.join(m).join("mod.rs").is_file()
                && !inline
            {
                wrong.push(format!(
                    "ARCHITECTURE.md names `{m}` in {dir}: no such module"
                ));
            }
        }
        for entry in std::fs::read_dir(&src).expect("src").flatten() {
            let name = entry
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            let is_module = entry.path().extension().is_some_and(|e| e == "rs")
                || entry.path().join("mod.rs").is_file();
            if is_module
                && !matches!(name.as_str(), "lib" | "main")
                && !layers.iter().any(|(n, _)| *n == name)
            {
                wrong.push(format!(
                    "{dir}/src: module `{name}` is in no layer of ARCHITECTURE.md"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every file, folder and `a::b` path ARCHITECTURE.md names in backquotes exists: a file
/// (`round.rs`, `agent/session.rs`) as the end of a source path, a folder (`run/point/`) in
/// the tree, each segment of a path (`run::request::RequestPath::send`) as a module, a crate
/// or an item declared in the sources.
#[test]
fn architecture_md_names_only_what_exists() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "benches"] {
        rust_files(&root().join(dir), &mut files);
    }
    let rel: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    let declared = declared_names(&files);
    let mut missing = Vec::new();
    for token in doc.split('`').skip(1).step_by(2) {
        if token.contains(' ') || token.is_empty() {
            continue;
        }
        if token.ends_with(".rs") {
            if !rel
                .iter()
                .any(|f| f == token || f.ends_with(&format!("/{token}")))
            {
                missing.push(format!("file `{token}`"));
            }
        } else if token.ends_with('/') && !token.starts_with('/') {
            let t = token.trim_end_matches('/');
            let found = root().join(t).is_dir()
                || rel
                    .iter()
                    .any(|f| f.contains(&format!("/{t}/")) || f.starts_with(&format!("{t}/")));
            if !found {
                missing.push(format!("folder `{token}`"));
            }
        } else if token.contains("::") {
            for seg in token.split("::").filter(|s| !s.is_empty()) {
                let seg = seg.trim_end_matches("()");
                if !declared.contains(seg) {
                    missing.push(format!("`{seg}` of `{token}`"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what does not exist:\n{}",
        missing.join("\n")
    );
}

/// Every name a source declares (modules, types, traits, functions, constants, statics) and
/// the crates by their Rust names.
fn declared_names(files: &[PathBuf]) -> std::collections::HashSet<String> {
    let mut names: std::collections::HashSet<String> = [
        "servebench_model",
        "servebench_report",
        "servebench_roofline",
        "sim",
        "testkit",
        "crate",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        if let Some(stem) = f.file_stem().and_then(|s| s.to_str())
            && stem != "mod"
        {
            names.insert(stem.to_string());
        }
        for word in [
            "mod ", "struct ", "enum ", "trait ", "fn ", "type ", "const ", "static ",
        ] {
            for (at, _) in text.match_indices(word) {
                let before = text[..at].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let name: String = text[at + word.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        }
    }
    names
}

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

/// The binary users build (`cargo build`, `cargo install`) reads a run's numbers back exactly:
/// the workspace's serde_json parses floats with `float_roundtrip`. Test builds get it from a
/// dev-dependency whatever this says, so no test through the binary can see it missing (a
/// binary built without it re-rendered an accept length of 63 / 22, 2.8636363636363638 in
/// `requests.jsonl`, as 2.863636363636364 in `requests.csv`); this check of the manifest can.
#[test]
fn the_shipped_binary_parses_floats_exactly() {
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let line = workspace
        .lines()
        .find(|l| l.starts_with("serde_json ="))
        .expect("serde_json is a workspace dependency");
    assert!(line.contains("\"float_roundtrip\""), "{line}");
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
    for (dir, layers) in layers() {
        let layer = |m: &str| layers.iter().find(|(n, _)| n == m).map(|(_, l)| *l);
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

/// A crate's source files by module path (`["run", "launch"]`; the root is `[]`).
fn modules(src: &Path) -> std::collections::BTreeMap<Vec<String>, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).expect("under src").with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            (parts, f)
        })
        .collect()
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests`.
fn code_of(text: &str) -> String {
    let code: Vec<&str> = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect();
    let code = code.join("\n");
    match code.find("#[cfg(test)]\nmod tests") {
        Some(i) => code[..i].to_string(),
        None => code,
    }
}

/// The paths of a `use` tree's braces (`a::{b, c::{d, e}}` inside the outer braces): each as
/// its segments.
fn tree_paths(inner: &str) -> Vec<Vec<String>> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let mut out = Vec::new();
    for item in items.into_iter().map(str::trim).filter(|i| !i.is_empty()) {
        let segs = |s: &str| -> Vec<String> {
            s.split(" as ")
                .next()
                .unwrap_or("")
                .split("::")
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        };
        match item.find('{') {
            Some(b) => {
                let prefix = segs(&item[..b]);
                let rest = &item[b + 1..item.rfind('}').unwrap_or(item.len())];
                for sub in tree_paths(rest) {
                    out.push(prefix.iter().cloned().chain(sub).collect());
                }
            }
            None => out.push(segs(item)),
        }
    }
    out
}

/// The text inside the braces that open at `code[at]`.
fn braced(code: &str, at: usize) -> &str {
    let mut depth = 0;
    for (i, c) in code[at..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &code[at + 1..at + i];
                }
            }
            _ => {}
        }
    }
    &code[at + 1..]
}

/// Every path a file names from `crate::`, `super::` or `self::` (use trees expanded), and the
/// first segment of every other `name::` path.
fn named_paths(code: &str) -> (Vec<Vec<String>>, Vec<String>) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let (mut anchored, mut bare) = (Vec::new(), Vec::new());
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let prev_ok = i == 0 || !(word(bytes[i - 1]) || bytes[i - 1] == ':');
        if !prev_ok || !word(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        let first: String = bytes[start..i].iter().collect();
        if !(i + 1 < bytes.len() && bytes[i] == ':' && bytes[i + 1] == ':') {
            continue;
        }
        // Read `a::b::c` and an optional `::{...}` tree.
        let mut segs = vec![first.clone()];
        let mut tree = None;
        while i + 1 < bytes.len() && bytes[i] == ':' && bytes[i + 1] == ':' {
            i += 2;
            if i < bytes.len() && bytes[i] == '{' {
                let at: usize = bytes[..i].iter().map(|c| c.len_utf8()).sum();
                let inner = braced(code, at);
                tree = Some(tree_paths(inner));
                i += inner.chars().count() + 2;
                break;
            }
            let s = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            if s == i {
                break;
            }
            segs.push(bytes[s..i].iter().collect());
        }
        if matches!(first.as_str(), "crate" | "super" | "self") {
            match tree {
                Some(paths) => {
                    for p in paths {
                        anchored.push(segs.iter().cloned().chain(p).collect());
                    }
                }
                None => anchored.push(segs),
            }
        } else {
            bare.push(first);
        }
    }
    (anchored, bare)
}

/// File-level dependencies inside one crate: file A -> file B when A names an item B defines
/// (a `mod.rs` re-export counts as the file it re-exports from).
fn file_graph(
    src: &Path,
) -> std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mods = modules(src);
    let code: BTreeMap<&Vec<String>, String> = mods
        .iter()
        .map(|(m, f)| (m, code_of(&std::fs::read_to_string(f).unwrap())))
        .collect();
    let is_dir = |f: &Path| {
        matches!(
            f.file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs" | "main.rs")
        )
    };
    // The longest module prefix of `path` from `base`, and the segment after it.
    let resolve = |base: &[String], rest: &[String]| -> (Vec<String>, Option<String>) {
        let mut target = base.to_vec();
        for (k, s) in rest.iter().enumerate() {
            let mut next = target.clone();
            next.push(s.clone());
            if mods.contains_key(&next) {
                target = next;
            } else {
                return (target, Some(rest[k].clone()));
            }
        }
        (target, None)
    };
    // Re-exports: (module, name) -> the file the name comes from.
    let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for (m, f) in &mods {
        if !is_dir(f) {
            continue;
        }
        let (anchored, _) = named_paths(&code[m].replace("use ", "use self::"));
        for p in anchored {
            if p.first().map(String::as_str) != Some("self") || p.len() < 3 {
                continue;
            }
            let (target, _) = resolve(m, &p[1..p.len() - 1]);
            if &target != m {
                reexports.insert((m.clone(), p[p.len() - 1].clone()), target);
            }
        }
    }
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (m, f) in &mods {
        let own = edges.entry(m.clone()).or_default();
        // A re-export (`pub use child::X;`) shows a child's item; it is not a use of it.
        let used: String = code[m]
            .split(';')
            .filter(|stmt| {
                let s = stmt.trim_start();
                !(s.starts_with("pub use ") || s.starts_with("pub(crate) use "))
            })
            .collect::<Vec<_>>()
            .join(";");
        let (anchored, bare) = named_paths(&used);
        for p in anchored {
            let mut base = match p[0].as_str() {
                "crate" => Vec::new(),
                _ => m.clone(),
            };
            let mut rest = &p[1..];
            if p[0] == "super" {
                base.pop();
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            let (mut target, next) = resolve(&base, rest);
            if let Some(name) = next
                && let Some(from) = reexports.get(&(target.clone(), name))
            {
                target = from.clone();
            }
            if &target != m {
                own.insert(target);
            }
        }
        for first in bare {
            let mut child = m.clone();
            child.push(first);
            if mods.contains_key(&child) && (is_dir(f) || child.len() > 1) {
                own.insert(child);
            }
        }
    }
    edges
}

/// The cycles of `edges` (each as its files), found by depth-first search.
fn cycles(
    edges: &std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>>,
) -> Vec<Vec<String>> {
    let name = |m: &Vec<String>| {
        if m.is_empty() {
            "<root>".to_string()
        } else {
            m.join("/")
        }
    };
    let mut found = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = std::collections::BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if next == start {
                    let mut names: Vec<String> = path.iter().map(name).collect();
                    names.sort();
                    if done.insert(names.clone()) {
                        found.push(path.iter().map(name).collect());
                    }
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    found
}

#[test]
fn the_loop_finder_sees_a_use_tree_and_a_child_calling_back() {
    let (anchored, bare) = named_paths("use super::{a::X, b::{Y, Z}};\nfn f() { child::g(); }");
    assert_eq!(
        anchored,
        vec![
            vec!["super", "a", "X"],
            vec!["super", "b", "Y"],
            vec!["super", "b", "Z"]
        ]
    );
    assert_eq!(bare, vec!["child"]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("run")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod run;").unwrap();
    std::fs::write(
        src.join("run/mod.rs"),
        "mod pool;\nmod errors;\npub use errors::RunError;\npub fn go() { pool::start(); }\npub struct Interrupt;",
    )
    .unwrap();
    std::fs::write(
        src.join("run/pool.rs"),
        "use super::{RunError, Interrupt};\npub fn start() {}",
    )
    .unwrap();
    std::fs::write(src.join("run/errors.rs"), "pub struct RunError;").unwrap();
    let found = cycles(&file_graph(src));
    assert_eq!(found, vec![vec!["run".to_string(), "run/pool".to_string()]]);
    // Interrupt moved out of mod.rs: the re-exported RunError alone is no loop.
    std::fs::write(
        src.join("run/pool.rs"),
        "use super::RunError;\npub fn start() {}",
    )
    .unwrap();
    assert!(cycles(&file_graph(src)).is_empty());
}

#[test]
fn no_file_uses_one_that_uses_it_back() {
    let mut problems = Vec::new();
    for (dir, _) in CRATES {
        let src = root().join(dir).join("src");
        for cycle in cycles(&file_graph(&src)) {
            problems.push(format!("{dir}/src: {}", cycle.join(" -> ")));
        }
    }
    assert!(
        problems.is_empty(),
        "module loops (move what both use into a file of its own):\n{}",
        problems.join("\n")
    );
}

/// The root re-exports no other crate (issue 34 item 3): `crate::spec` would hide which crate
/// a path reaches into.
#[test]
fn the_root_re_exports_no_crate() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    for line in lib
        .lines()
        .filter(|l| l.trim_start().starts_with("pub use"))
    {
        assert!(
            ![
                "servebench_model",
                "servebench_report",
                "servebench_roofline",
                "sim"
            ]
            .iter()
            .any(|c| line.contains(c)),
            "src/lib.rs re-exports a crate: {line}"
        );
    }
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for name in [
            "spec", "results", "report", "measure", "catalog", "sim", "history",
        ] {
            assert!(
                !text.contains(&format!("crate::{name}::")),
                "{} names `crate::{name}`: name the crate it lives in",
                f.display()
            );
        }
    }
}
