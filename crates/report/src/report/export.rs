//! CSV exports beside the report, for pandas and spreadsheets: `points.csv` (one row per
//! point: sweep values, status, load basis, every metric's mean, p50, p90, p99) and
//! `requests.csv` (one row per recorded request with its derived latencies and tool calls).
//! Values are in the unit the report shows, and each column's name says it (`ttft_ms_mean`:
//! times in milliseconds, as the console and the report write them; `decode_tok_s_mean`).
//! Each reads in one line: `pd.read_csv("points.csv")`. `requests.csv` is converted line by line, so its
//! memory does not grow with the run.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use indexmap::IndexSet;

use crate::measure::metrics::request_metrics;
use indexmap::IndexMap;
use servebench_model::catalog::{Graded, Metric};
use servebench_model::results::records::{PointBound, PointRecord, RequestRecord};

/// File names inside the run directory.
pub(crate) const POINTS_CSV: &str = "points.csv";
pub(crate) const REQUESTS_CSV: &str = "requests.csv";
pub(crate) const SESSIONS_CSV: &str = "sessions.csv";

/// The statistics each metric gets a column for.
const FIELDS: [&str; 4] = ["mean", "p50", "p90", "p99"];

/// `points.csv` as bytes: `id, group, status, ok, errors, <dimension>..., offered_req_s,
/// window_s, slo_met, [<graded figure>..., bound_gpu, bound_assumptions,] <column>_<stat>...` (a metric's column names its shown unit:
/// [`Metric::column`]). A missing value is an empty cell.
/// `bounds`: the grades of points whose record has none (runs that predate it).
pub(crate) fn points_csv(
    points: &[PointRecord],
    bounds: &IndexMap<String, PointBound>,
) -> Result<Vec<u8>, csv::Error> {
    fn bound_of<'a>(
        p: &'a PointRecord,
        bounds: &'a IndexMap<String, PointBound>,
    ) -> Option<&'a PointBound> {
        p.bound.as_ref().or_else(|| bounds.get(&p.id))
    }
    let dims: IndexSet<&str> = points
        .iter()
        .flat_map(|p| p.values.keys().map(String::as_str))
        .collect();
    let metrics: IndexSet<&str> = points
        .iter()
        .flat_map(|p| p.metrics.keys().map(String::as_str))
        .collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = ["id", "group", "status", "ok", "errors"]
        .map(String::from)
        .to_vec();
    header.extend(dims.iter().map(|d| d.to_string()));
    header.extend(["offered_req_s", "window_s", "slo_met"].map(String::from));
    // The figures graded against the hardware (catalogue names, which say their units), the
    // GPU and what was assumed: only when a point is graded.
    let graded = points.iter().any(|p| bound_of(p, bounds).is_some());
    if graded {
        header.extend(Graded::all().iter().map(|g| g.name.to_string()));
        header.extend(["bound_gpu", "bound_assumptions"].map(String::from));
    }
    for m in &metrics {
        let column = Metric::from_name(m).map_or_else(|| m.to_string(), Metric::column);
        header.extend(FIELDS.iter().map(|f| format!("{column}_{f}")));
    }
    w.write_record(&header)?;
    for p in points {
        let mut row: Vec<String> = vec![
            p.id.clone(),
            p.group.clone(),
            p.status().to_string(),
            p.ok.to_string(),
            p.errors.to_string(),
        ];
        for d in &dims {
            row.push(match p.values.get(*d) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            });
        }
        let load = p.load.as_ref();
        row.push(opt(load.and_then(|l| l.offered_req_s)));
        row.push(opt(load.map(|l| l.window_s)));
        row.push(
            load.and_then(|l| l.slo.as_ref())
                .map(|s| s.met.to_string())
                .unwrap_or_default(),
        );
        if graded {
            let b = bound_of(p, bounds);
            for g in Graded::all() {
                row.push(opt(b.and_then(|b| b.figures.get(g.name).copied())));
            }
            row.push(b.map(|b| b.gpu.clone()).unwrap_or_default());
            row.push(b.map(|b| b.assumptions.join(" ")).unwrap_or_default());
        }
        for m in &metrics {
            let s = p.metrics.get(*m);
            let shown = |x: f64| Metric::from_name(m).map_or(x, |m| m.shown(x));
            for f in FIELDS {
                row.push(opt(s.map(|s| {
                    shown(match f {
                        "mean" => s.mean,
                        "p50" => s.p50,
                        "p90" => s.p90,
                        _ => s.p99,
                    })
                })));
            }
        }
        w.write_record(&row)?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

/// Converts `requests.jsonl` into `requests.csv`, record by record. A line that is not a
/// record (a cut-off last line) is skipped, as the report skips it.
pub(crate) fn write_requests_csv(jsonl: &Path, out: &Path) -> Result<(), csv::Error> {
    let reader = BufReader::new(std::fs::File::open(jsonl)?);
    let mut w = csv::Writer::from_writer(std::io::BufWriter::new(std::fs::File::create(out)?));
    w.write_record([
        "point",
        "round",
        "index",
        "role",
        "phase",
        "scheduled_at",
        "sent_at",
        "lag_ms",
        "ttft_ms",
        "ttfa_ms",
        "tpot_ms",
        "e2e_ms",
        "ttft_sched_ms",
        "e2e_sched_ms",
        "read_wait_ms",
        "prompt_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "answer_tokens",
        "cached_tokens",
        "max_tokens",
        "tool_calls",
        "tool_call_valid",
        "error",
        "verify_steps",
        "accept_length",
    ])?;
    for line in reader.lines() {
        let line = line?;
        let Ok(r) = serde_json::from_str::<RequestRecord>(&line) else {
            continue;
        };
        let m = request_metrics(&r);
        let lag = r.lag_s.unwrap_or(0.0);
        let count = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
        w.write_record([
            r.point.clone(),
            r.round.to_string(),
            r.index.to_string(),
            r.role.to_string(),
            r.phase.map(|p| p.to_string()).unwrap_or_default(),
            opt(r.scheduled_at),
            opt(Some(r.sent_at)),
            ms(r.lag_s),
            ms(m.ttft_s),
            // The record's own where it has them; older records' from their chunks (the same
            // rule: `RequestRecord::split`).
            ms(r.ttfa_s.or(m.ttfa_s)),
            ms(m.tpot_s),
            ms(r.end_s),
            ms(r.lag_s.and(m.ttft_s).map(|t| t + lag)),
            ms(r.lag_s.and(r.end_s).map(|e| e + lag)),
            ms(r.read_wait_s),
            count(r.prompt_tokens),
            count(r.completion_tokens),
            // Thinking and answer tokens: 0 thinking for a request that did not think.
            count(r.reasoning_tokens.or(m.reasoning_tokens.map(|n| n as u64))),
            count(r.answer_tokens.or(m.answer_tokens.map(|n| n as u64))),
            count(r.cached_tokens),
            r.max_tokens.to_string(),
            // Tool calls (`workload.tools`): the calls made and whether all were valid
            // (empty for a request sent no tools; `tool_call_valid` empty when it made none).
            r.tool_calls.map(|n| n.to_string()).unwrap_or_default(),
            r.tool_call_valid.map(|v| v.to_string()).unwrap_or_default(),
            r.error.map(|e| e.kind.to_string()).unwrap_or_default(),
            // Speculative decoding: the request's verify steps and decode tokens per step
            // (empty for plain decoding and where the stream could not tell).
            count(r.verify_steps),
            opt(r.accept_length),
        ])?;
    }
    w.flush()?;
    Ok(())
}

/// Writes both files into `dir`.
pub(crate) fn write_csvs(
    dir: &Path,
    points: &[PointRecord],
    bounds: &IndexMap<String, PointBound>,
) -> Result<(), csv::Error> {
    let bytes = points_csv(points, bounds)?;
    std::fs::File::create(dir.join(POINTS_CSV))?.write_all(&bytes)?;
    let jsonl = dir.join(servebench_model::results::rundir::REQUESTS_FILE);
    if jsonl.exists() {
        write_requests_csv(&jsonl, &dir.join(REQUESTS_CSV))?;
    }
    if points.iter().any(|p| p.jobs.is_some()) {
        let bytes = sessions_csv(points)?;
        std::fs::File::create(dir.join(SESSIONS_CSV))?.write_all(&bytes)?;
    }
    Ok(())
}

/// `sessions.csv` as bytes: one row per agent session a point kept (`load: { kind: agentic
/// }`): its turns, how it ended, its duration and completion time (ms) and its successful
/// turns' tokens. Written only when a point ran agent sessions.
pub(crate) fn sessions_csv(points: &[PointRecord]) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "point",
        "session",
        "trace_id",
        "turns",
        "sent",
        "failed",
        "completed",
        "truncated",
        "stopped",
        "duration_ms",
        "completion_ms",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
    ])?;
    for p in points {
        for s in p.jobs.iter().flat_map(|j| &j.sessions) {
            w.write_record([
                p.id.clone(),
                s.session.to_string(),
                s.trace_id.clone(),
                s.turns.to_string(),
                s.sent.to_string(),
                s.failed.to_string(),
                s.stopped.is_none().to_string(),
                s.truncated().to_string(),
                s.stopped.clone().unwrap_or_default(),
                ms(s.duration_s),
                ms(s.completion_s),
                s.prompt_tokens.to_string(),
                s.completion_tokens.to_string(),
                s.cached_tokens.to_string(),
            ])?;
        }
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// Seconds written as milliseconds, the unit every time is shown in.
fn ms(x: Option<f64>) -> String {
    opt(x.map(|s| s * 1000.0))
}

fn opt(x: Option<f64>) -> String {
    x.filter(|x| x.is_finite())
        .map(|x| x.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record made by this version carries its first answer and split; an older one (no
    /// `ttfa_s`, no `answer_tokens`) gets them from its chunks by the same rule.
    #[test]
    fn requests_csv_has_each_requests_first_answer_and_split_old_records_too() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = dir.path().join("requests.jsonl");
        // 2 thinking tokens at 10 and 20 ms, the answer's 3 at 30 and 40 ms.
        let old = r#"{"point":"p000","round":0,"index":0,"role":"measure","api":"openai-chat","sent_at":1.0,"max_tokens":8,"chunks":[{"t_s":0.01,"tokens":1,"reasoning":1},{"t_s":0.02,"tokens":1,"reasoning":1},{"t_s":0.03,"tokens":2},{"t_s":0.04,"tokens":1}],"completion_tokens":5,"token_source":"usage","reasoning_tokens":2,"reasoning_source":"chunks"}"#;
        let mut new: RequestRecord = serde_json::from_str(old).unwrap();
        assert_eq!((new.ttfa_s, new.answer_tokens), (None, None));
        new.index = 1;
        new.set_split();
        assert_eq!((new.ttfa_s, new.answer_tokens), (Some(0.03), Some(3)));
        let plain = RequestRecord {
            index: 2,
            chunks: vec![
                servebench_model::results::records::Chunk::new(0.005, 1),
                servebench_model::results::records::Chunk::new(0.006, 1),
            ],
            completion_tokens: Some(2),
            ..RequestRecord::fixture()
        };
        let lines = [
            old.to_string(),
            serde_json::to_string(&new).unwrap(),
            serde_json::to_string(&plain).unwrap(),
        ];
        std::fs::write(&jsonl, lines.join("\n")).unwrap();
        let out = dir.path().join("requests.csv");
        write_requests_csv(&jsonl, &out).unwrap();
        let mut csv = csv::Reader::from_path(&out).unwrap();
        let header: Vec<String> = csv.headers().unwrap().iter().map(String::from).collect();
        let col = |h: &str| header.iter().position(|x| x == h).unwrap();
        let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
        let cells = |row: &csv::StringRecord| {
            [
                row[col("ttft_ms")].to_string(),
                row[col("ttfa_ms")].to_string(),
                row[col("reasoning_tokens")].to_string(),
                row[col("answer_tokens")].to_string(),
            ]
        };
        assert_eq!(cells(&rows[0]), ["10", "30", "2", "3"]);
        assert_eq!(cells(&rows[1]), cells(&rows[0]));
        // No thinking: the first answer is the first token, and all of it is answer.
        assert_eq!(cells(&rows[2]), ["5", "5", "0", "2"]);
    }
}
