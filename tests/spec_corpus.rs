//! A corpus of bad specs, one mistake each, with their rendered errors snapshot-tested.
//!
//! Each file in `tests/fixtures/specs/bad/` must fail to load without panicking (as `validate`
//! loads it: with prompt files, templates and `${NAME}` references checked), every
//! diagnostic must carry a position and a message, and the text a user sees is pinned in
//! `tests/snapshots/spec_corpus/<file stem>.snap`. Files are loaded by a path relative to the
//! crate root (cargo's working directory for tests), so the path in messages is stable.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use servebench::cli::load_spec;

const CORPUS: &str = "tests/fixtures/specs/bad";

fn corpus() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(CORPUS)
        .unwrap_or_else(|e| panic!("cannot read {CORPUS}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn bad_specs_fail_with_stable_messages() {
    let files = corpus();
    assert!(files.len() >= 20, "the corpus has {} files", files.len());
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots/spec_corpus");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        for path in &files {
            let name = stem(path);
            let errors = match catch_unwind(AssertUnwindSafe(|| load_spec(path))) {
                Err(_) => panic!("{}: loading panicked", path.display()),
                Ok(Ok(_)) => panic!("{}: loaded, but it is in the bad corpus", path.display()),
                Ok(Err(errors)) => errors,
            };
            assert!(
                !errors.diagnostics.is_empty(),
                "{}: failed without a diagnostic",
                path.display()
            );
            for d in &errors.diagnostics {
                assert!(
                    d.line >= 1 && d.column >= 1 && !d.message.trim().is_empty(),
                    "{}: diagnostic without a position or message: {d:#?}",
                    path.display()
                );
                assert_eq!(d.file, path.display().to_string());
            }
            let text = errors.to_string();
            assert!(
                !text.contains('\u{1b}'),
                "{}: colour codes in {text}",
                path.display()
            );
            insta::assert_snapshot!(name, text);
        }
    });
}

#[test]
fn every_snapshot_has_a_corpus_file() {
    let stems: Vec<String> = corpus().iter().map(|p| stem(p)).collect();
    let dir = Path::new("tests/snapshots/spec_corpus");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return; // not generated yet
    };
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "snap") {
            assert!(
                stems.contains(&stem(&path)),
                "{} has no file in {CORPUS}; delete it",
                path.display()
            );
        }
    }
}
