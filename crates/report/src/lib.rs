//! From a run directory to numbers and pages. `measure` turns request records into metrics,
//! statistics and a point's summary (it also runs inside the runner, folding records as they
//! finish); `report` builds the report model from a run directory alone and renders it
//! (templates, charts, reproduction checks, `compare`, `bound`). `report` uses `measure`, never
//! the reverse. `history` (every run in one history: trends, what changed, change points)
//! uses `report`'s `compare`.

pub mod history;
pub mod measure;
pub mod report;
