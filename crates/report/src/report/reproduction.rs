//! Expectations (`expect:` in a spec) checked against a run: one verdict per expectation and
//! matching point. The report's Reproduction section and `servebench check` both use this.
//!
//! A simulator run at `--sim-time-scale s` measures every duration s times shorter: the
//! published value is scaled the same way (times x s, rates / s) before comparing, and the
//! report says so.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::PointRecord;
use servebench_model::results::search::{AGENTS_FIGURES, SearchRecord};
use servebench_model::spec::types::{Expectation, Tolerance};

/// Default tolerance when an expectation names none.
pub(crate) const DEFAULT_TOLERANCE_PCT: f64 = 10.0;

/// The verdict of one expectation on one point.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ExpectationResult {
    /// The point's id, when one matched.
    pub point: Option<String>,
    /// `ctx=1024` (the expectation's `where`).
    pub label: String,
    /// What was expected: the metric name, `flag X` or `failure X`.
    pub what: String,
    /// The published value (as written in the spec).
    pub published: Option<f64>,
    /// The published value in this run's time scale (equal to `published` at scale 1).
    pub expected: Option<f64>,
    /// The point's mean for the metric.
    pub measured: Option<f64>,
    /// `±10%` or `±0.05`.
    pub tolerance: String,
    /// (measured - expected) / expected, in percent.
    pub off_pct: Option<f64>,
    /// `reproduced`, `off`, `point-failed`, `not-run`, `flagged`, `not-flagged`,
    /// `failed-as-published`, `did-not-fail`.
    pub verdict: String,
    /// One line for people: `reproduced (+3.1%)`, `off by +14.2%`, `point failed (out-of-memory)`.
    pub text: String,
    /// True when the run agrees with the expectation.
    pub ok: bool,
    /// Where the published number came from.
    pub source: Option<String>,
}

/// All verdicts of a run, with the time scale they were judged at.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema, Default)]
pub struct Reproduction {
    /// One verdict per expectation and matching point, in spec order.
    pub results: Vec<ExpectationResult>,
    /// The simulator's time scale when it was not 1 (published values were scaled).
    pub time_scale: Option<f64>,
    /// Expectations that hold.
    pub ok: usize,
    /// Expectations that do not.
    pub failed: usize,
}

/// `figure` of the search whose answer probe `p` is (None when `p` set no search's capacity,
/// or the run does not know the figure: no GPU count, no measured power).
fn agents_figure(figure: &str, p: &PointRecord, searches: &[SearchRecord]) -> Option<f64> {
    let tag = p.search.as_ref().filter(|t| t.passes)?;
    let s = searches.iter().find(|s| {
        s.label == tag.label
            && p.id.starts_with(&format!("{}-s", s.seed))
            && s.capacity == Some(tag.value)
    })?;
    let a = s.agents.as_ref()?;
    match figure {
        "agents_at_slo" => Some(a.agents_at_slo),
        "agents_at_slo_per_gpu" => a.agents_at_slo_per_gpu,
        _ => a.agents_at_slo_per_mw,
    }
}

/// Whether `p` is the probe that set a live-sessions search's capacity.
fn is_agents_answer(p: &PointRecord, searches: &[SearchRecord]) -> bool {
    agents_figure("agents_at_slo", p, searches).is_some()
}

/// Checks the run's expectations against its points (the last record of each point counts);
/// `agents_at_slo`, `_per_gpu` and `_per_mw` against `searches`' answers, on the probes that
/// set them.
pub(crate) fn evaluate(
    meta: &RunMeta,
    points: &[PointRecord],
    searches: &[SearchRecord],
) -> Reproduction {
    let time_scale = time_scale(meta);
    // The figures graded against the hardware, worked out only when an expectation names one.
    let graded = if meta.experiment.expect.iter().any(|e| {
        e.metric
            .as_deref()
            .is_some_and(|m| servebench_model::catalog::Graded::from_name(m).is_some())
    }) {
        let section = super::bound_section::section(meta, points, &Default::default());
        super::bound_section::graded_values(section.as_ref())
    } else {
        Default::default()
    };
    let mut results = Vec::new();
    for e in &meta.experiment.expect {
        let label = e
            .where_
            .iter()
            .map(|(k, v)| format!("{}={}", short(k), sweep_text(v)))
            .collect::<Vec<_>>()
            .join(", ");
        let agents = e
            .metric
            .as_deref()
            .is_some_and(|m| AGENTS_FIGURES.contains(&m));
        let matching: Vec<&PointRecord> = points
            .iter()
            .filter(|p| !agents || is_agents_answer(p, searches))
            .filter(|p| {
                e.where_.iter().all(|(k, v)| {
                    let want = serde_json::to_value(v).unwrap_or_default();
                    p.values
                        .get(k)
                        .is_some_and(|got| servebench_model::spec::same_value(got, &want))
                })
            })
            .collect();
        if matching.is_empty() {
            results.push(judge(e, None, &label, time_scale, (&graded, searches)));
        }
        for p in matching {
            results.push(judge(e, Some(p), &label, time_scale, (&graded, searches)));
        }
    }
    let ok = results.iter().filter(|r| r.ok).count();
    Reproduction {
        failed: results.len() - ok,
        ok,
        results,
        time_scale: (time_scale != 1.0).then_some(time_scale),
    }
}

/// One expectation's verdict on point `p` (None: no point matched `label`).
fn judge(
    e: &Expectation,
    p: Option<&PointRecord>,
    label: &str,
    scale: f64,
    (graded, searches): (&Graded, &[SearchRecord]),
) -> ExpectationResult {
    let mut r = ExpectationResult {
        point: p.map(|p| p.id.clone()),
        label: if label.is_empty() {
            "every point".into()
        } else {
            label.into()
        },
        what: String::new(),
        published: e.value,
        expected: None,
        measured: None,
        tolerance: String::new(),
        off_pct: None,
        verdict: String::new(),
        text: String::new(),
        ok: false,
        source: e.source.clone(),
    };
    let (verdict, ok, text) = if let Some(flag) = &e.flag {
        r.what = format!("flag {flag}");
        flag_verdict(flag, p)
    } else if let Some(cause) = &e.failure {
        r.what = format!("failure {cause}");
        failure_verdict(cause, p)
    } else {
        judge_metric(e, p, scale, (graded, searches), &mut r)
    };
    (r.verdict, r.ok, r.text) = (verdict.into(), ok, text);
    r
}

/// A verdict: its name, whether the run agrees, and the line for people.
type Judged = (&'static str, bool, String);

/// Whether point `p` carries `flag`, as published.
fn flag_verdict(flag: &str, p: Option<&PointRecord>) -> Judged {
    match p {
        None => ("not-run", false, "point not run".to_string()),
        Some(p) if p.flags.iter().any(|f| f.kind.name() == flag) => {
            ("flagged", true, format!("flagged {flag}, as published"))
        }
        Some(_) => ("not-flagged", false, format!("not flagged {flag}")),
    }
}

/// Whether point `p` failed with `cause`, as published.
fn failure_verdict(cause: &str, p: Option<&PointRecord>) -> Judged {
    match (p, p.and_then(|p| p.failure.as_deref())) {
        (None, _) => ("not-run", false, "point not run".to_string()),
        (Some(_), Some(f)) if f == cause => (
            "failed-as-published",
            true,
            format!("failed with {f}, as published"),
        ),
        (Some(_), Some(f)) => (
            "point-failed",
            false,
            format!("failed with {f}, not {cause}"),
        ),
        (Some(_), None) => (
            "did-not-fail",
            false,
            format!("did not fail ({cause} expected)"),
        ),
    }
}

/// Point `p`'s mean of the expectation's metric against the published value at this run's
/// time `scale`, within its tolerance; what was expected and measured goes into `r`.
fn judge_metric(
    e: &Expectation,
    p: Option<&PointRecord>,
    scale: f64,
    (graded, searches): (&Graded, &[SearchRecord]),
    r: &mut ExpectationResult,
) -> Judged {
    let metric = e.metric.clone().unwrap_or_default();
    let is_graded = servebench_model::catalog::Graded::from_name(&metric).is_some();
    let published = e.value.unwrap_or(f64::NAN);
    let expected = published * scale_factor(&metric, scale);
    r.expected = Some(expected);
    let limit;
    (limit, r.tolerance) = tolerance(e.tolerance.as_ref(), expected, scale_factor(&metric, scale));
    r.what = metric.clone();
    let measured = p.and_then(|p| {
        if is_graded {
            return graded.get(&p.id)?.get(metric.as_str()).copied();
        }
        if AGENTS_FIGURES.contains(&metric.as_str()) {
            return agents_figure(&metric, p, searches);
        }
        p.metrics
            .get(&metric)
            .filter(|s| s.count > 0)
            .map(|s| s.mean)
    });
    r.measured = measured;
    match (p, measured) {
        (None, _) => ("not-run", false, "point not run".to_string()),
        (Some(p), None) => match &p.failure {
            Some(f) => ("point-failed", false, format!("point failed ({f})")),
            None if is_graded => (
                "not-graded",
                false,
                "not graded against the hardware (the report's section says why)".to_string(),
            ),
            None => (
                "point-failed",
                false,
                "not measured (no successful sample)".to_string(),
            ),
        },
        (Some(_), Some(m)) => {
            let off = (expected != 0.0).then(|| (m - expected) / expected * 100.0);
            r.off_pct = off;
            let pct = off
                .map(|o| format!("{o:+.1}%"))
                .unwrap_or_else(|| format!("{:+}", m - expected));
            if (m - expected).abs() <= limit {
                ("reproduced", true, format!("reproduced ({pct})"))
            } else {
                ("off", false, format!("off by {pct}"))
            }
        }
    }
}

/// How far from `expected` a measurement may be, in its units, and the tolerance as written
/// (`±10%`, `±0.05`); an absolute one moves with the time scale (`factor`), as the value does.
fn tolerance(given: Option<&Tolerance>, expected: f64, factor: f64) -> (f64, String) {
    match given {
        Some(Tolerance::Absolute(a)) => (a.abs() * factor, format!("±{}", a.abs())),
        Some(Tolerance::Percent(s)) => {
            let pct: f64 = s.trim().trim_end_matches('%').trim().parse().unwrap_or(0.0);
            (expected.abs() * pct / 100.0, format!("±{pct}%"))
        }
        None => (
            expected.abs() * DEFAULT_TOLERANCE_PCT / 100.0,
            format!("±{DEFAULT_TOLERANCE_PCT}%"),
        ),
    }
}

/// Graded figures by point id and metric name.
type Graded = indexmap::IndexMap<String, indexmap::IndexMap<&'static str, f64>>;

/// Reads a run directory and checks its expectations.
pub fn check_run_dir(
    dir: &servebench_model::results::rundir::RunDir,
) -> Result<Reproduction, servebench_model::results::rundir::RunDirError> {
    let meta = dir.read_meta()?;
    let points = dir.read_points_detailed()?;
    let searches = dir.read_search()?.map(|f| f.searches).unwrap_or_default();
    Ok(evaluate(&meta, &points.records, &searches))
}

/// The verdicts as terminal lines, then a summary line.
pub fn format_text(r: &Reproduction) -> String {
    let mut out = String::new();
    if let Some(s) = r.time_scale {
        out.push_str(&format!(
            "(simulator time scale {s}: published times x {s}, rates / {s})\n"
        ));
    }
    for x in &r.results {
        let point = x.point.as_deref().unwrap_or("-");
        let numbers = match (x.expected, x.measured) {
            (Some(e), Some(m)) => {
                format!(
                    ": measured {}, expected {} {}",
                    servebench_model::text::precise(m),
                    servebench_model::text::precise(e),
                    x.tolerance
                )
            }
            (Some(e), None) => format!(
                ": expected {} {}",
                servebench_model::text::precise(e),
                x.tolerance
            ),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{} {point} ({}) {}{numbers} -> {}\n",
            if x.ok { "ok  " } else { "FAIL" },
            x.label,
            x.what,
            x.text
        ));
    }
    out.push_str(&format!(
        "{} of {} expectations hold\n",
        r.ok,
        r.results.len()
    ));
    out
}

/// How a published value moves with the simulator's time scale: times shrink, rates grow.
fn scale_factor(metric: &str, scale: f64) -> f64 {
    servebench_model::catalog::Metric::from_name(metric).map_or(1.0, |m| m.scaling().factor(scale))
}

/// The simulator's time scale, from the recorded `/server_info` (1 for real servers).
fn time_scale(meta: &RunMeta) -> f64 {
    meta.servers
        .iter()
        .filter_map(|s| s.server_info.as_ref()?.get("sim_time_scale")?.as_f64())
        .find(|s| *s > 0.0 && s.is_finite())
        .unwrap_or(1.0)
}

fn short(dim: &str) -> &str {
    dim.rsplit('.').next().unwrap_or(dim)
}

fn sweep_text(v: &servebench_model::spec::types::SweepValue) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::{Flag, Stat};

    fn point(id: &str, ctx: i64, metrics: &[(&str, f64)]) -> PointRecord {
        PointRecord {
            id: id.into(),
            values: [("ctx".to_string(), serde_json::json!(ctx))]
                .into_iter()
                .collect(),
            group: "g1".into(),
            requested_prompt_tokens: Some(ctx as u64),
            ok: 1,
            metrics: metrics
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        Stat {
                            count: 1,
                            mean: *v,
                            ..Stat::default()
                        },
                    )
                })
                .collect(),
            ..PointRecord::default()
        }
    }

    fn expectation(yaml: &str) -> Expectation {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn tolerances_scale_and_verdicts() {
        let p = point("p001", 1024, &[("ttft_s", 0.50), ("decode_tok_s", 100.0)]);
        let e =
            expectation("{ where: { ctx: 1024 }, metric: ttft_s, value: 0.46, tolerance: 10% }");
        let r = judge(&e, Some(&p), "ctx=1024", 1.0, (&Default::default(), &[]));
        // 0.50 vs 0.46 is +8.7%: inside 10%.
        assert!(r.ok, "{r:?}");
        assert_eq!(r.text, "reproduced (+8.7%)");
        let e = expectation("{ metric: ttft_s, value: 0.46, tolerance: 0.03 }");
        let r = judge(&e, Some(&p), "", 1.0, (&Default::default(), &[]));
        assert!(!r.ok);
        assert_eq!(r.text, "off by +8.7%");
        assert_eq!(r.label, "every point");
        // At time scale 0.1 the simulator's 100 tok/s stands for 10 tok/s published.
        let e = expectation("{ metric: decode_tok_s, value: 10.5 }");
        let r = judge(&e, Some(&p), "", 0.1, (&Default::default(), &[]));
        assert!((r.expected.unwrap() - 105.0).abs() < 1e-9);
        assert!(r.ok, "{r:?}");
        let e = expectation("{ metric: ttft_s, value: 5.0, tolerance: 5% }");
        let r = judge(&e, Some(&p), "", 0.1, (&Default::default(), &[]));
        assert_eq!(r.text, "reproduced (+0.0%)");
    }

    #[test]
    fn failures_and_flags() {
        let mut p = point("p003", 32768, &[]);
        p.failure = Some("out-of-memory".into());
        let e = expectation("{ failure: out-of-memory }");
        assert!(judge(&e, Some(&p), "", 1.0, (&Default::default(), &[])).ok);
        let e = expectation("{ metric: ttft_s, value: 23.7 }");
        let r = judge(&e, Some(&p), "", 1.0, (&Default::default(), &[]));
        assert_eq!(
            (r.ok, r.text.as_str()),
            (false, "point failed (out-of-memory)")
        );
        let mut q = point("p002", 8192, &[("ttft_s", 3.9)]);
        let e = expectation("{ flag: cache-reuse-suspected }");
        assert_eq!(
            judge(&e, Some(&q), "", 1.0, (&Default::default(), &[])).verdict,
            "not-flagged"
        );
        q.flags.push(Flag {
            kind: servebench_model::catalog::FlagKind::CacheReuseSuspected,
            message: String::new(),
        });
        assert!(judge(&e, Some(&q), "", 1.0, (&Default::default(), &[])).ok);
        let e = expectation("{ failure: out-of-memory }");
        assert_eq!(
            judge(&e, Some(&q), "", 1.0, (&Default::default(), &[])).verdict,
            "did-not-fail"
        );
        assert_eq!(
            judge(&e, None, "ctx=1", 1.0, (&Default::default(), &[])).verdict,
            "not-run"
        );
    }
}
