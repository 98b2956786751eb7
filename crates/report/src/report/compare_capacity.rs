//! `compare` for capacity searches: each run's answer for the same search (matched by its
//! label, or the one search each run has), and a verdict against the baseline only when the
//! brackets [passing, failing] do not overlap: a search knows its capacity no closer than that.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::search::{SearchFile, SearchRecord};
use servebench_model::text::sig3;

use super::verdict::Verdict;

/// One search compared across the runs.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CapacityCompare {
    /// The search's label in the baseline (`all`, `tp=2`).
    pub label: String,
    /// `load.rate` or `concurrency`.
    pub over: String,
    /// One cell per run, in run order; the first is the baseline.
    pub runs: Vec<CapacityCell>,
}

/// One run's answer, and how it compares with the baseline's.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CapacityCell {
    /// The run's label (`A`, `B`).
    pub run: String,
    /// The highest passing value (None when no probe passed, or the run has no such search).
    pub capacity: Option<f64>,
    /// The lowest value known not to do better (None when the search's max passed).
    pub above: Option<f64>,
    /// The bracket in words: `[22, 23)`, `≥ 256`, `< 8`, or `no search`.
    pub bracket: String,
    /// Against the baseline (None for the baseline itself): `improvement` (higher),
    /// `regression` (lower), or `not-enough-evidence` when the brackets overlap.
    pub verdict: Option<Verdict>,
    /// Why, in words (None for the baseline).
    pub why: Option<String>,
    /// A live-sessions search: its capacity per GPU and per megawatt of measured GPU power,
    /// and where the GPU count and the power come from (None for other searches, and where
    /// the run does not know them: the sources say why).
    pub agents_per_gpu: Option<f64>,
    pub agents_per_mw: Option<f64>,
    pub gpus_source: Option<String>,
    pub power_source: Option<String>,
}

/// The comparisons, for runs that have searches (empty when the baseline has none).
pub(crate) fn compare(runs: &[(String, Option<&SearchFile>)]) -> Vec<CapacityCompare> {
    let Some((_, Some(base))) = runs.first() else {
        return Vec::new();
    };
    base.searches
        .iter()
        .map(|b| {
            let cells = runs
                .iter()
                .enumerate()
                .map(|(i, (label, file))| {
                    let found = file.and_then(|f| matching(f, b, base.searches.len()));
                    cell(label, found, (i > 0).then_some(b))
                })
                .collect();
            CapacityCompare {
                label: b.label.clone(),
                over: b.over.clone(),
                runs: cells,
            }
        })
        .collect()
}

/// The search of `file` that answers `b`'s: the same label and dimension, or, when each run
/// has exactly one search of that dimension, that one.
fn matching<'a>(
    file: &'a SearchFile,
    b: &SearchRecord,
    base_count: usize,
) -> Option<&'a SearchRecord> {
    file.searches
        .iter()
        .find(|s| s.label == b.label && s.over == b.over)
        .or_else(|| {
            (base_count == 1 && file.searches.len() == 1 && file.searches[0].over == b.over)
                .then(|| &file.searches[0])
        })
}

/// The bracket the true capacity lies in: [capacity, above), 0 below and infinity above
/// when a side is unknown.
fn bounds(s: &SearchRecord) -> (f64, f64) {
    (s.capacity.unwrap_or(0.0), s.above.unwrap_or(f64::INFINITY))
}

fn bracket_text(s: &SearchRecord) -> String {
    match (s.capacity, s.above) {
        (Some(c), Some(a)) => format!("[{}, {})", sig3(c), sig3(a)),
        (Some(c), None) => format!("≥ {}", sig3(c)),
        (None, Some(a)) => format!("< {}", sig3(a)),
        (None, None) => "no probe".into(),
    }
}

fn cell(run: &str, s: Option<&SearchRecord>, base: Option<&SearchRecord>) -> CapacityCell {
    let Some(s) = s else {
        return CapacityCell {
            run: run.to_string(),
            capacity: None,
            above: None,
            bracket: "no search".into(),
            verdict: base.map(|_| Verdict::NotCompared),
            why: base.map(|_| "this run has no such search".to_string()),
            agents_per_gpu: None,
            agents_per_mw: None,
            gpus_source: None,
            power_source: None,
        };
    };
    let (verdict, why) = match base {
        None => (None, None),
        Some(_) if !s.complete => (
            Some(Verdict::NotEnoughEvidence),
            Some("this run's search stopped before its answer".to_string()),
        ),
        Some(b) if !b.complete => (
            Some(Verdict::NotEnoughEvidence),
            Some("the baseline's search stopped before its answer".to_string()),
        ),
        Some(b) if !s.monotonic() || !b.monotonic() => (
            Some(Verdict::NotEnoughEvidence),
            Some(format!(
                "{}'s search has verdicts that are not monotonic (a value failed below one that passed): its answer rests on noise",
                if s.monotonic() {
                    "the baseline"
                } else {
                    "this run"
                }
            )),
        ),
        Some(b) => {
            let ((lo, hi), (blo, bhi)) = (bounds(s), bounds(b));
            if lo >= bhi {
                (
                    Some(Verdict::Improvement),
                    Some(format!(
                        "{} passed, at or above where the baseline failed ({})",
                        sig3(lo),
                        sig3(bhi)
                    )),
                )
            } else if hi <= blo {
                (
                    Some(Verdict::Regression),
                    Some(format!(
                        "{} failed, at or below where the baseline passed ({})",
                        sig3(hi),
                        sig3(blo)
                    )),
                )
            } else {
                (
                    Some(Verdict::NotEnoughEvidence),
                    Some(format!(
                        "the brackets {} and {} overlap: the searches cannot tell the capacities apart (a finer `resolution` may)",
                        bracket_text(b),
                        bracket_text(s)
                    )),
                )
            }
        }
    };
    CapacityCell {
        run: run.to_string(),
        capacity: s.capacity,
        above: s.above,
        bracket: bracket_text(s),
        verdict,
        why,
        agents_per_gpu: s.agents.as_ref().and_then(|a| a.agents_at_slo_per_gpu),
        agents_per_mw: s.agents.as_ref().and_then(|a| a.agents_at_slo_per_mw),
        gpus_source: s.agents.as_ref().map(|a| a.gpus_source.clone()),
        power_source: s.agents.as_ref().map(|a| a.power_source.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(capacity: Option<f64>, above: Option<f64>) -> SearchFile {
        SearchFile {
            searches: vec![SearchRecord {
                label: "all".into(),
                seed: "p001".into(),
                over: "load.rate".into(),
                start: 1.0,
                max: 64.0,
                resolution: 0.05,
                capacity,
                above,
                saturated_at: None,
                probes: 8,
                complete: true,
                sustained_req_s: None,
                inversions: Vec::new(),
                agents: None,
            }],
        }
    }

    fn verdict(a: &SearchFile, b: &SearchFile) -> (Option<Verdict>, String) {
        let out = compare(&[("A".into(), Some(a)), ("B".into(), Some(b))]);
        let c = &out[0].runs[1];
        (c.verdict, c.why.clone().unwrap_or_default())
    }

    #[test]
    fn a_verdict_only_when_the_brackets_do_not_overlap() {
        let base = search(Some(22.0), Some(23.0));
        // Passing where the baseline failed: higher, beyond the search's uncertainty.
        let (v, why) = verdict(&base, &search(Some(23.0), Some(24.0)));
        assert_eq!(v, Some(Verdict::Improvement), "{why}");
        // Failing where the baseline passed: lower.
        let (v, _) = verdict(&base, &search(Some(20.0), Some(21.0)));
        assert_eq!(v, Some(Verdict::Regression));
        // Overlapping brackets: no verdict, and why.
        let (v, why) = verdict(&base, &search(Some(22.5), Some(23.5)));
        assert_eq!(v, Some(Verdict::NotEnoughEvidence));
        assert!(
            why.contains("[22.0, 23.0) and [22.5, 23.5) overlap"),
            "{why}"
        );
        // A search whose max passed is at least max: higher than a baseline failing below it.
        let (v, _) = verdict(&base, &search(Some(64.0), None));
        assert_eq!(v, Some(Verdict::Improvement));
        // A search where nothing passed is below its start.
        let (v, _) = verdict(&base, &search(None, Some(8.0)));
        assert_eq!(v, Some(Verdict::Regression));
        let (v, _) = verdict(&base, &search(None, Some(30.0)));
        assert_eq!(v, Some(Verdict::NotEnoughEvidence));
    }

    #[test]
    fn agents_at_the_slo_are_compared_per_gpu_and_per_megawatt_with_their_sources() {
        let agents = |n: f64, power: Option<f64>| {
            let mut f = search(Some(n), Some(n + 1.0));
            f.searches[0].over = "load.agentic.live".into();
            f.searches[0].agents = Some(servebench_model::results::search::AgentsAtSlo {
                agents_at_slo: n,
                gpus: Some(2),
                gpus_source: "server: tp 2 x pp 1".into(),
                agents_at_slo_per_gpu: Some(n / 2.0),
                power_w: power,
                agents_at_slo_per_mw: power.map(|w| n / (w / 1e6)),
                power_source: if power.is_some() {
                    "measured".into()
                } else {
                    "not measured: no GPU telemetry".into()
                },
            });
            f
        };
        let (a, b) = (agents(8.0, Some(800.0)), agents(12.0, None));
        let out = compare(&[("A".into(), Some(&a)), ("B".into(), Some(&b))]);
        let (base, new) = (&out[0].runs[0], &out[0].runs[1]);
        assert_eq!(
            (base.agents_per_gpu, base.agents_per_mw),
            (Some(4.0), Some(10_000.0))
        );
        assert_eq!((new.agents_per_gpu, new.agents_per_mw), (Some(6.0), None));
        assert_eq!(
            new.power_source.as_deref(),
            Some("not measured: no GPU telemetry")
        );
        assert_eq!(new.verdict, Some(Verdict::Improvement));
    }

    #[test]
    fn an_unfinished_or_missing_search_is_not_judged() {
        let base = search(Some(22.0), Some(23.0));
        let mut stopped = search(Some(40.0), Some(41.0));
        stopped.searches[0].complete = false;
        assert_eq!(verdict(&base, &stopped).0, Some(Verdict::NotEnoughEvidence));
        let out = compare(&[("A".into(), Some(&base)), ("B".into(), None)]);
        assert_eq!(out[0].runs[1].bracket, "no search");
        assert_eq!(out[0].runs[1].verdict, Some(Verdict::NotCompared));
        assert!(compare(&[("A".into(), None), ("B".into(), Some(&base))]).is_empty());
    }
}
