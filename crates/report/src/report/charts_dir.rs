//! The run directory's `charts/` folder as the report leaves it: each chart drawn is written,
//! each file of a kind no longer drawn is removed, so the folder always matches the report's
//! links. The one place report writing touches `charts/`.

use std::path::{Path, PathBuf};

use servebench_model::redact;
use servebench_model::results::rundir::{CHARTS_DIR, RunDir};

use super::chart_error::ChartError;
use super::{bound_chart, bound_section, capacity, capacity_chart, charts, load};
use super::{load_charts, timeline};

/// Why a chart was not written into `charts/`, or a stale one not removed.
#[derive(Debug, thiserror::Error)]
pub enum ChartsDirError {
    /// A chart could not be drawn.
    #[error(transparent)]
    Chart(#[from] ChartError),
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A run directory's `charts/` folder.
pub(crate) struct ChartsDir {
    folder: PathBuf,
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> ChartsDirError {
    let path = path.to_path_buf();
    move |source| ChartsDirError::Write { path, source }
}

impl ChartsDir {
    pub(crate) fn of(dir: &RunDir) -> ChartsDir {
        ChartsDir {
            folder: dir.file(CHARTS_DIR),
        }
    }

    /// Writes `svg` as `file`, the folder made first.
    fn write(&self, file: &str, svg: &str) -> Result<(), ChartsDirError> {
        std::fs::create_dir_all(&self.folder).map_err(write_err(&self.folder))?;
        let path = self.folder.join(file);
        std::fs::write(&path, svg).map_err(write_err(&path))
    }

    /// Writes `file` when it is drawn (`Some(svg)`), else removes what an earlier report left.
    fn keep(&self, file: &str, svg: Option<&str>) -> Result<(), ChartsDirError> {
        match svg {
            Some(svg) => self.write(file, svg),
            None => self.remove_where(|name| name == file),
        }
    }

    /// Removes each file of the folder that `stale` picks by its name.
    fn remove_where(&self, stale: impl Fn(&str) -> bool) -> Result<(), ChartsDirError> {
        let Ok(entries) = std::fs::read_dir(&self.folder) else {
            return Ok(());
        };
        for e in entries.flatten() {
            if stale(&e.file_name().to_string_lossy()) {
                std::fs::remove_file(e.path()).map_err(write_err(&e.path()))?;
            }
        }
        Ok(())
    }

    /// The overview charts and the load charts; the files of either kind not drawn are removed.
    pub(crate) fn write_charts(
        &self,
        drawn: &[charts::Chart],
        drawn_load: Option<&load::LoadSection>,
    ) -> Result<(), ChartsDirError> {
        for chart in drawn {
            self.write(chart.file, &redact::text(&charts::render_svg(chart)?))?;
        }
        let load = drawn_load.map(load_charts::charts).unwrap_or_default();
        for chart in &load {
            self.write(chart.file, &load_charts::render_svg(chart)?)?;
        }
        self.remove_where(|name| {
            let load_file =
                load_charts::FILES.contains(&name) && !load.iter().any(|c| c.file == name);
            let chart_file =
                charts::chart_files().any(|f| f == name) && !drawn.iter().any(|c| c.file == name);
            load_file || chart_file
        })
    }

    /// Each point's time series (`<prefix>...<point>.svg`); the files of that prefix no longer
    /// drawn are removed.
    pub(crate) fn write_timelines(
        &self,
        drawn: &[timeline::Timeline],
        prefix: &str,
    ) -> Result<(), ChartsDirError> {
        for t in drawn {
            self.write(&t.file, &timeline::render_svg(t)?)?;
        }
        self.remove_where(|name| name.starts_with(prefix) && !drawn.iter().any(|t| t.file == name))
    }

    /// The capacity searches' variants chart and each search's chart
    /// (`capacity-<seed>.svg`).
    pub(crate) fn write_capacity_charts(
        &self,
        section: Option<&capacity::CapacitySection>,
    ) -> Result<(), ChartsDirError> {
        let variants = match section.filter(|s| s.variants_chart.is_some()) {
            Some(s) => {
                Some(redact::text(&capacity_chart::render_variants_svg(&s.searches)?).into_owned())
            }
            None => None,
        };
        self.keep(capacity::VARIANTS_CHART, variants.as_deref())?;
        for view in section.iter().flat_map(|s| &s.searches) {
            if view.chart.is_some() {
                let svg = capacity_chart::render_svg(view)?;
                self.write(&capacity::chart_file(&view.seed), &redact::text(&svg))?;
            }
        }
        Ok(())
    }

    /// The "Against the hardware" chart (`bound-step.svg`), or none.
    pub(crate) fn write_bound_chart(
        &self,
        section: Option<&bound_section::BoundSection>,
    ) -> Result<(), ChartsDirError> {
        let svg = match bound_chart::chart(section) {
            Some(chart) => Some(redact::text(&charts::render_svg(&chart)?).into_owned()),
            None => None,
        };
        self.keep(bound_section::CHART_FILE, svg.as_deref())
    }
}
