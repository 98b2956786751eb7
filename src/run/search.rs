//! Running a capacity search (`search:`) on one launch: `plan::search::CapacitySearch` picks
//! each value, each probe is measured and recorded as an ordinary point (`<seed>-s<k>`, tagged
//! with its search, probe index, value and verdict), and the answer goes to `search.json`.
//! Probes recorded by an earlier session of the run (`run --resume`) are replayed into the
//! state machine, not measured again.

use std::sync::Mutex;

use crate::plan::search::{self, CapacitySearch, Next, Probe, probe_point};
use crate::results::records::{PointRecord, PointStatus};
use crate::results::search::{SearchFile, SearchRecord, SearchTag};
use crate::spec::Point;

use super::RunError;
use super::launch::{Launch, One};

/// One writer of `search.json` at a time (groups on a pool run in parallel).
static SEARCH_FILE_LOCK: Mutex<()> = Mutex::new(());

/// Which search a point starts: the values of the other sweep dimensions (`tp=2 mem=0.8`),
/// or `all` when nothing else is swept.
pub fn search_key(seed: &Point) -> String {
    let over = seed
        .experiment
        .search
        .as_ref()
        .map(|s| s.over.to_string())
        .unwrap_or_default();
    let parts: Vec<String> = seed
        .values
        .iter()
        .filter(|(k, _)| **k != over)
        .map(|(k, v)| {
            let k = k.rsplit('.').next().unwrap_or(k);
            format!("{k}={}", v.to_string().trim_matches('"'))
        })
        .collect();
    if parts.is_empty() {
        "all".into()
    } else {
        parts.join(" ")
    }
}

/// A probe's verdict from its recorded point: it passes when the point is `ok` (no crash, no
/// errors over budget, not interrupted) and met every SLO target.
pub fn verdict(record: &PointRecord) -> (bool, Option<String>) {
    let status = record.status();
    if status != PointStatus::Ok {
        let why = match (&record.failure, status) {
            _ if record.has_flag(&crate::catalog::FlagKind::Interrupted) => {
                "the point was interrupted".to_string()
            }
            (Some(cause), _) => format!("the point failed: {cause}"),
            (None, PointStatus::Failed) => "the point failed".to_string(),
            _ => format!(
                "the point is degraded ({} of {} requests failed)",
                record.errors,
                record.ok + record.errors
            ),
        };
        return (false, Some(why));
    }
    match record.load.as_ref().and_then(|l| l.slo.as_ref()) {
        Some(slo) if slo.met => (true, None),
        Some(slo) => (
            false,
            Some(
                slo.checks
                    .iter()
                    .filter(|c| !c.met)
                    .map(|c| c.missed_text())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        ),
        None => (false, Some("the point has no SLO verdict".into())),
    }
}

/// The request throughput a probe achieved (requests/s): the system throughput of a `load:`
/// point, else its successful requests over its measured window; 0 without either.
pub fn achieved_req_s(record: &PointRecord) -> f64 {
    if let Some(s) = record.metrics.get("throughput_req_s") {
        return s.mean;
    }
    match &record.load {
        Some(l) if l.window_s > 0.0 => record.ok as f64 / l.window_s,
        _ => 0.0,
    }
}

/// Runs the search `seed` starts on this launch. Returns how the launch ended when it cannot
/// go on (the search is then recorded as incomplete, and a resume picks it up).
pub(super) async fn run_search(
    seed: &Point,
    on: &mut Launch<'_, '_>,
) -> Result<Option<One>, RunError> {
    let spec = seed
        .experiment
        .search
        .clone()
        .expect("run_search is called for a point with a search");
    let machine_spec = search::SearchSpec::from(&spec);
    let bound = search::probe_bound(&machine_spec);
    let key = search_key(seed);
    let cx = on.cx;
    let mut machine = CapacitySearch::new(machine_spec);
    // Probes an earlier session recorded (resume kept them): replayed, not measured again.
    let mut earlier: Vec<SearchTag> = cx
        .run_dir
        .read_points()
        .map_err(|e| RunError::Write {
            what: "points.jsonl".into(),
            source: std::io::Error::other(e.to_string()),
        })?
        .into_iter()
        .filter(|p| p.id.starts_with(&format!("{}-s", seed.id)))
        .filter_map(|p| p.search)
        .filter(|t| t.label == key)
        .collect();
    earlier.sort_by_key(|t| t.probe);
    for t in &earlier {
        machine.record(Probe {
            value: t.value,
            passes: t.passes,
            throughput: t.throughput_req_s,
        });
    }
    if !earlier.is_empty() {
        cx.progress.line(&format!(
            "{}: search {key}: {} recorded earlier, replayed",
            seed.id,
            crate::text::count_s(earlier.len(), "probe")
        ));
    }
    loop {
        let value = match machine.next() {
            Next::Done(answer) => {
                let record = answer_record(seed, &key, &spec, &machine_spec, &answer, true);
                cx.progress
                    .line(&format!("{}: {}", seed.id, answer_line(&record)));
                write_answer(cx.run_dir, record)?;
                return Ok(None);
            }
            Next::Probe(v) => v,
        };
        let k = machine.probes().len() + 1;
        cx.progress.line(&format!(
            "{}: search probe {k} (≤ {bound}): {}={}",
            seed.id,
            spec.over,
            crate::text::sig3(value)
        ));
        let point = probe_point(seed, spec.over, value, k);
        let mut probe = None;
        let over = spec.over.to_string();
        let key_ = key.clone();
        let end = on
            .measure_one(&point, &mut |record| {
                let (passes, why) = verdict(record);
                let throughput_req_s = achieved_req_s(record);
                record.search = Some(SearchTag {
                    label: key_.clone(),
                    over: over.clone(),
                    probe: k,
                    value,
                    passes,
                    throughput_req_s,
                    why,
                });
                probe = Some(Probe {
                    value,
                    passes,
                    throughput: throughput_req_s,
                });
            })
            .await?;
        if let Some(p) = probe {
            machine.record(p);
        }
        if let Some(end) = end {
            // Stopped mid-search: the bracket so far, marked incomplete.
            let (capacity, above) = bracket_so_far(machine.probes());
            let answer = search::Answer {
                capacity,
                above,
                saturated_at: None,
                probes: machine.probes().len(),
            };
            let record = answer_record(seed, &key, &spec, &machine_spec, &answer, false);
            cx.progress
                .line(&format!("{}: {}", seed.id, answer_line(&record)));
            write_answer(cx.run_dir, record)?;
            return Ok(Some(end));
        }
    }
}

/// The highest passing value and the lowest failing one above it, of the probes so far.
fn bracket_so_far(probes: &[Probe]) -> (Option<f64>, Option<f64>) {
    let above = probes
        .iter()
        .filter(|p| !p.passes)
        .map(|p| p.value)
        .reduce(f64::min);
    let pass = probes
        .iter()
        .filter(|p| p.passes && above.is_none_or(|a| p.value < a))
        .map(|p| p.value)
        .reduce(f64::max);
    (pass, above)
}

fn answer_record(
    seed: &Point,
    key: &str,
    spec: &crate::spec::search::SearchSpec,
    machine: &search::SearchSpec,
    answer: &search::Answer,
    complete: bool,
) -> SearchRecord {
    SearchRecord {
        label: key.to_string(),
        seed: seed.id.clone(),
        over: spec.over.to_string(),
        start: machine.start,
        max: machine.max,
        resolution: machine.resolution,
        capacity: answer.capacity,
        above: answer.above,
        saturated_at: answer.saturated_at,
        probes: answer.probes,
        complete,
    }
}

/// `search all: capacity load.rate=11.6 (passing; 12.1 fails), 7 probes`.
fn answer_line(r: &SearchRecord) -> String {
    let v = |x: f64| crate::text::sig3(x);
    let found = match (r.capacity, r.above) {
        (Some(c), Some(a)) => format!("capacity {}={} (passing; {} does not)", r.over, v(c), v(a)),
        (Some(c), None) => format!("capacity {}: at least {} (max passed)", r.over, v(c)),
        (None, Some(a)) => format!("capacity {}: below {} (no probe passed)", r.over, v(a)),
        (None, None) => format!("capacity {}: no probe measured", r.over),
    };
    format!(
        "search {}{}: {found}, {}",
        r.label,
        if r.complete { "" } else { " stopped early" },
        crate::text::count_s(r.probes, "probe")
    )
}

/// Puts `record` in `search.json`, replacing an earlier answer of the same search.
fn write_answer(
    dir: &crate::results::rundir::RunDir,
    record: SearchRecord,
) -> Result<(), RunError> {
    let _one = SEARCH_FILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let write_err = |source: std::io::Error| RunError::Write {
        what: dir
            .file(crate::results::search::SEARCH_FILE)
            .display()
            .to_string(),
        source,
    };
    let mut file: SearchFile = dir
        .read_search()
        .map_err(|e| write_err(std::io::Error::other(e.to_string())))?
        .unwrap_or_default();
    match file.searches.iter_mut().find(|s| s.seed == record.seed) {
        Some(s) => *s = record,
        None => file.searches.push(record),
    }
    dir.write_search(&file).map_err(write_err)
}
