//! A point's summary (counts, cache verification, aggregates, flags) is a pure function of
//! its request records: recomputed from recorded runs, it gives back exactly the recorded
//! points. The fixtures are real simulator runs of the specs beside them (streaming over three
//! rounds, two-point pairs, warm and as-is caches, a cold run without nonces that hits the
//! cache, two-point pairs that reuse it, and a point whose every request failed).

use std::path::Path;

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{PointRecord, RequestRecord};
use servebench_report::measure::summary::summarize;

/// Flags the runner adds before summarising (they come from calibration and cache flushes,
/// not from the records).
fn runner_flag(kind: &FlagKind) -> bool {
    matches!(
        kind,
        FlagKind::Calibration | FlagKind::FlushFailed | FlagKind::WriteFailed
    )
}

fn lines<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect()
}

#[test]
fn recorded_points_are_recomputed_exactly_from_their_requests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summary");
    let mut cases = 0;
    let mut kinds_seen: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(&root).expect("fixtures") {
        let dir = entry.expect("entry").path();
        let spec =
            servebench_model::spec::load(&dir.join("spec.yaml")).expect("fixture spec loads");
        let points: Vec<PointRecord> = lines(&dir.join("points.jsonl"));
        let requests: Vec<RequestRecord> = lines(&dir.join("requests.jsonl"));
        for recorded in &points {
            let point = spec
                .points
                .iter()
                .find(|p| p.id == recorded.id)
                .expect("the point is in the spec");
            let measured: Vec<RequestRecord> = requests
                .iter()
                .filter(|r| r.point == recorded.id && r.role.is_measured())
                .cloned()
                .collect();
            let given: Vec<_> = recorded
                .flags
                .iter()
                .filter(|f| runner_flag(&f.kind))
                .cloned()
                .collect();
            let s = summarize(&point.experiment, &measured, given.clone(), false);
            let case = format!("{} {}", dir.display(), recorded.id);
            // The records as a load point keeps them (trimmed as they are written) give the
            // same summary.
            let mut lean = measured.clone();
            lean.iter_mut().for_each(RequestRecord::drop_detail);
            assert_eq!(
                summarize(&point.experiment, &lean, given, false),
                s,
                "{case}: trimmed records"
            );
            assert_eq!(s.ok, recorded.ok, "{case}: ok");
            assert_eq!(s.errors, recorded.errors, "{case}: errors");
            assert_eq!(s.error_kinds, recorded.error_kinds, "{case}: error kinds");
            assert_eq!(s.metrics, recorded.metrics, "{case}: metrics");
            assert_eq!(s.flags, recorded.flags, "{case}: flags");
            assert_eq!(s.incomplete, recorded.incomplete, "{case}: incomplete");
            assert_eq!(s.status, recorded.status(), "{case}: status");
            kinds_seen.extend(s.flags.iter().map(|f| f.kind.to_string()));
            cases += 1;
        }
    }
    assert!(cases >= 8, "only {cases} recorded points");
    // The fixtures exercise every flag the summary itself raises.
    for kind in [
        "errors",
        "cold-cache-hit",
        "cache-hits",
        "cache-reuse-suspected",
        "high-variance",
    ] {
        assert!(
            kinds_seen.iter().any(|k| k == kind),
            "no fixture raises {kind}: {kinds_seen:?}"
        );
    }
}

#[test]
fn an_interrupted_point_is_incomplete_and_says_how_far_it_got() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summary/streaming");
    let spec = servebench_model::spec::load(&dir.join("spec.yaml")).expect("fixture spec loads");
    let requests: Vec<RequestRecord> = lines(&dir.join("requests.jsonl"));
    // The first two requests of p001's first round, then Ctrl-C.
    let measured: Vec<RequestRecord> = requests
        .iter()
        .filter(|r| r.point == "p001")
        .take(2)
        .cloned()
        .collect();
    let s = summarize(&spec.points[0].experiment, &measured, Vec::new(), true);
    assert!(s.incomplete);
    assert_eq!((s.ok, s.errors), (2, 0));
    let last = s.flags.last().expect("a flag");
    assert_eq!(last.kind, FlagKind::Interrupted);
    assert_eq!(
        last.message,
        "2 of 9 requests finished before the run stopped"
    );
    assert_eq!(s.metrics["ttft_s"].count, 2);
}

/// A request sent again after a stale connection is not an error: the point keeps its counts
/// and numbers and says how many were retried (informational, so compare still judges it).
/// Chunks without their own token counts that held several tokens make ITL per chunk.
#[test]
fn retried_requests_are_not_errors_and_assumed_chunk_counts_are_flagged() {
    use servebench_model::results::records::{ChunkTokens, ErrorKind, RequestError};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summary/streaming");
    let spec = servebench_model::spec::load(&dir.join("spec.yaml")).expect("fixture spec loads");
    let requests: Vec<RequestRecord> = lines(&dir.join("requests.jsonl"));
    let mut measured: Vec<RequestRecord> = requests
        .iter()
        .filter(|r| r.point == "p001" && r.role.is_measured())
        .cloned()
        .collect();
    let exp = &spec.points[0].experiment;
    let before = summarize(exp, &measured, Vec::new(), false);
    measured[1].retried = true;
    measured[1].first_attempt = Some(RequestError {
        kind: ErrorKind::StaleConnection,
        message: "the server had closed the idle connection".into(),
        status: None,
        body_head: None,
    });
    let s = summarize(exp, &measured, Vec::new(), false);
    assert_eq!((s.ok, s.errors), (before.ok, before.errors));
    assert_eq!(s.metrics, before.metrics);
    let flag = s
        .flags
        .iter()
        .find(|f| f.kind == FlagKind::StaleConnections)
        .expect("stale-connections");
    assert!(
        flag.message.starts_with(&format!(
            "1 of {} requests met a stale connection",
            measured.len()
        )),
        "{}",
        flag.message
    );
    assert!(FlagKind::StaleConnections.is_informational());
    assert!(!s.flags.iter().any(|f| f.kind == FlagKind::ItlPerChunk));

    // The same chunks, counted one token each, against a server total twice as large.
    for r in &mut measured {
        let chunks = r.chunks.iter().filter(|c| c.tokens > 0).count() as u64;
        for c in r.chunks.iter_mut().filter(|c| c.tokens > 0) {
            c.tokens = 1;
        }
        r.completion_tokens = Some(2 * chunks);
        r.chunk_tokens = Some(ChunkTokens::AssumedOne);
    }
    let s = summarize(exp, &measured, Vec::new(), false);
    let flag = s
        .flags
        .iter()
        .find(|f| f.kind == FlagKind::ItlPerChunk)
        .expect("itl-per-chunk");
    assert!(flag.message.contains("2.00 per chunk"), "{}", flag.message);
    assert_eq!(s.metrics["itl_s"], s.metrics["icl_s"]);
}
