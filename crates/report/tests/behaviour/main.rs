//! The report crate's behaviour tests (`cargo test -p servebench-report`): one binary, one
//! module per area, against the fixture runs in `tests/fixtures` (`make_runs.py` writes
//! `runs/`; `summary/` holds real simulator runs).
mod compare;
mod export;
mod report;
mod statistics;
mod summary;

/// The fixture runs (`tests/fixtures/runs`).
fn fixtures() -> testkit::runs::FixtureRuns {
    testkit::runs::FixtureRuns::at(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs"),
    )
}
