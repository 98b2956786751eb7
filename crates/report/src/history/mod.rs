//! `servebench history`: every run of every experiment in one history. Runs are found in run
//! directories (`source`), in a git repository's history without checking anything out
//! (`git`), or through an index that keeps it fast (`index`); `build` groups them by
//! experiment, says what changed in each run and judges each point's series with `compare`'s
//! own matching and verdict; `markdown` and `charts` render it.
//!
//! Files point one way: `model` (the types) below `build` (pure) below the renderers; the
//! sources only produce loaded runs.

pub mod build;
pub mod charts;
pub mod db;
mod db_tls;
pub mod git;
pub mod index;
pub mod markdown;
pub mod model;
pub mod page;
pub mod source;

pub use build::{build, build_names, default_metrics};
pub use model::*;

/// The newest runs' regressions against their series' good levels, one line each
/// (`quickstart #3: decode at ctx=1024: -20.1% against the last good level, #1 (...)`), for
/// `--fail-on-regression`.
pub fn regressions(model: &HistoryModel) -> Vec<String> {
    latest_lines(
        model,
        |_, l| l.verdict == Some(crate::report::compare::Verdict::Regression),
        "against the last good level,",
        "",
    )
}

/// The newest runs' changes above the threshold that the evidence does not settle, one line
/// each, split by direction: `(worse, better)`. A change the wrong way fails the gate unless
/// accepted (`--accept-unresolved`): its intervals are too wide to clear it, not narrow enough
/// to convict it, and a gate must not pass what it could not judge.
pub fn unresolved(model: &HistoryModel) -> (Vec<String>, Vec<String>) {
    let worse = |s: &Series, l: &LatestCheck| {
        use servebench_model::catalog::Direction;
        l.change_pct.is_none_or(|c| match s.better {
            Some(Direction::Lower) => c > 0.0,
            Some(Direction::Higher) => c < 0.0,
            None => true,
        })
    };
    (
        latest_lines(
            model,
            |s, l| l.unresolved && worse(s, l),
            "against",
            ", unresolved",
        ),
        latest_lines(
            model,
            |s, l| l.unresolved && !worse(s, l),
            "against",
            ", unresolved",
        ),
    )
}

/// A line per series whose newest run `keep`s: `experiment #run: metric at point: change
/// {against} level{after} (reason)`.
fn latest_lines(
    model: &HistoryModel,
    keep: impl Fn(&Series, &LatestCheck) -> bool,
    against: &str,
    after: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for e in &model.experiments {
        for s in &e.series {
            let Some(l) = s.latest.as_ref().filter(|l| keep(s, l)) else {
                continue;
            };
            out.push(format!(
                "{} {}: {} at {}: {} {against} {}{after} ({})",
                e.name,
                e.runs[l.run].label,
                s.label,
                s.point,
                markdown::change(l.change_pct),
                l.good.map_or("—", |g| e.runs[g].label.as_str()),
                l.reason
            ));
        }
    }
    out
}

/// Series whose newest run was judged against a good level (any verdict but "not judged").
pub fn judged_latest(model: &HistoryModel) -> usize {
    use crate::report::compare::Verdict;
    model
        .experiments
        .iter()
        .flat_map(|e| &e.series)
        .filter_map(|s| s.latest.as_ref())
        .filter(|l| {
            matches!(
                l.verdict,
                Some(
                    Verdict::Regression
                        | Verdict::Improvement
                        | Verdict::WithinNoise
                        | Verdict::BelowThreshold
                )
            )
        })
        .count()
}

/// The history's Markdown file in its output folder.
pub(crate) const MARKDOWN_FILE: &str = "history.md";
/// The history's page, beside it.
pub(crate) const HTML_FILE: &str = "history.html";
/// The folder of its trend charts, beside it.
pub const CHARTS_DIR: &str = "charts";
/// The list of charts `history` wrote into [`CHARTS_DIR`], one name a line: the only files
/// a later call removes there.
pub const CHARTS_MANIFEST: &str = ".servebench-history-charts";

/// Writes `bytes` to `path` as a new file, never through a link planted there.
fn write_fresh(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = servebench_model::results::rundir::create_fresh(path)?;
    file.write_all(bytes)
}

/// Writes the history into `out`: `history.md`, its trend charts in `charts/` (charts an
/// earlier call wrote and this one no longer draws are removed, by the manifest; no other
/// file) and `history.html` (self-contained). Returns the Markdown's path.
pub fn write(
    model: &HistoryModel,
    out: &std::path::Path,
) -> Result<std::path::PathBuf, crate::report::ReportError> {
    use crate::report::ReportError;
    let write_err = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Write { path, source }
    };
    let folder = out.join(CHARTS_DIR);
    std::fs::create_dir_all(&folder).map_err(write_err(&folder))?;
    // The charts an earlier call wrote here, by its manifest: only those are ever removed.
    let manifest = folder.join(CHARTS_MANIFEST);
    let earlier: Vec<String> = {
        use std::io::Read;
        let mut text = String::new();
        if let Ok(f) = servebench_model::results::rundir::open_regular(&manifest, 1 << 20) {
            let _ = f.take(1 << 20).read_to_string(&mut text);
        }
        text.lines().map(str::to_string).collect()
    };
    let mut drawn: Vec<String> = Vec::new();
    for e in &model.experiments {
        for chart in charts::charts(e) {
            let svg = charts::render_svg(&chart)?;
            let path = folder.join(&chart.file);
            write_fresh(&path, servebench_model::redact::text(&svg).as_bytes())
                .map_err(write_err(&path))?;
            drawn.push(chart.file);
        }
    }
    // Charts this command drew before and no longer draws (an experiment gone); a name with
    // a path in it is no chart of ours.
    for name in earlier {
        if name.ends_with(".svg") && !name.contains('/') && !drawn.contains(&name) {
            let _ = std::fs::remove_file(folder.join(&name));
        }
    }
    write_fresh(&manifest, format!("{}\n", drawn.join("\n")).as_bytes())
        .map_err(write_err(&manifest))?;
    let path = out.join(MARKDOWN_FILE);
    let markdown = markdown::render(model, Some(CHARTS_DIR))?;
    std::fs::write(&path, servebench_model::redact::text(&markdown).as_bytes())
        .map_err(write_err(&path))?;
    let page_path = out.join(HTML_FILE);
    let html = page::render(model, &markdown, &folder)?;
    std::fs::write(&page_path, servebench_model::redact::text(&html).as_bytes())
        .map_err(write_err(&page_path))?;
    Ok(path)
}
