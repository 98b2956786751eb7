//! Running a capacity search (`search:`) on one launch: `plan::search::CapacitySearch` picks
//! each value, each probe is measured and recorded as an ordinary point (`<seed>-s<k>`, tagged
//! with its search, probe index, value and verdict), and the answer goes to `search.json`.
//! Probes recorded by an earlier session of the run (`run --resume`) are replayed into the
//! state machine, not measured again.

use std::sync::Mutex;

use crate::plan::search::{self, CapacitySearch, Next, Probe, probe_point};
use servebench_model::results::records::{PointRecord, PointStatus};
use servebench_model::results::search::{SearchFile, SearchRecord, SearchTag};
use servebench_model::spec::Point;

use super::errors::RunError;
use super::on_server::{Launch, LaunchContext, One};

/// One writer of `search.json` at a time (groups on a pool run in parallel).
static SEARCH_FILE_LOCK: Mutex<()> = Mutex::new(());

/// Which search a point starts: the values of the other sweep dimensions (`tp=2 mem=0.8`),
/// or `all` when nothing else is swept.
pub(crate) fn search_key(seed: &Point) -> String {
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
/// errors over budget, not interrupted) and met every SLO target on enough measured requests
/// (`measure::system::min_samples`): a probe short of them is not judged a pass, whatever its
/// percentiles (the search extends each probe to the minimum first, see [`extend_to_judge`],
/// so this takes failed requests or a probe cut short).
pub(crate) fn verdict(record: &PointRecord) -> (bool, Option<String>) {
    let status = record.status();
    if status != PointStatus::Ok {
        let why = match (&record.failure, status) {
            _ if record.has_flag(&servebench_model::catalog::FlagKind::Interrupted) => {
                "the point was interrupted".to_string()
            }
            _ if let Some(f) = record.flags.iter().find(|f| f.kind.voids_output()) => {
                format!("the point's output is invalid: {}", f.message)
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
        Some(slo) if slo.unjudged().next().is_some() => (
            false,
            Some(format!(
                "insufficient sample, counted as failing: {}",
                slo.unjudged()
                    .map(|c| c.unjudged_text())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        ),
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
pub(crate) fn achieved_req_s(record: &PointRecord) -> f64 {
    if let Some(s) = record.metrics.get("throughput_req_s") {
        return s.mean;
    }
    match &record.load {
        Some(l) if l.window_s > 0.0 => record.ok as f64 / l.window_s,
        _ => 0.0,
    }
}

/// Makes probe `point` measure at least the requests its SLO targets need to be judged
/// (`measure::system::min_requests`: a p99 needs 100): an open loop's `stop.requests` and
/// `stop.duration` (at its rate) are raised to them, a closed loop's `requests` per round.
/// Returns the minimum when the point had to be extended.
pub(crate) fn extend_to_judge(point: &mut Point) -> Option<usize> {
    let exp = &mut point.experiment;
    let needed = servebench_report::measure::system::min_requests(exp.slo.as_ref()?);
    if exp.load.is_some() {
        let rate = exp
            .load
            .as_ref()
            .and_then(|l| match l.rate() {
                Some(servebench_model::spec::load_model::Rate::PerSecond(r)) => Some(*r),
                _ => None,
            })
            .filter(|r| r.is_finite() && *r > 0.0);
        let stop = exp.stop.as_mut()?;
        let mut extended = false;
        if let Some(n) = stop.requests
            && (n as usize) < needed
        {
            stop.requests = Some(needed as u32);
            extended = true;
        }
        if let (Some(d), Some(rate)) = (stop.duration, rate)
            && d.as_secs_f64() * rate < needed as f64
        {
            // A tenth more than the schedule needs: a Poisson schedule may fall short.
            stop.duration = Some(std::time::Duration::from_secs_f64(
                (needed as f64 / rate * 1.1).ceil(),
            ));
            extended = true;
        }
        return extended.then_some(needed);
    }
    let rounds = exp.repeat.max(1) as usize;
    let per_round = needed.div_ceil(rounds);
    if (exp.requests as usize) * rounds < needed {
        exp.requests = per_round as u32;
        return Some(needed);
    }
    None
}

/// Pairs of probes whose verdicts contradict each other: a value that failed below one that
/// passed (`(failed, passed)`, in probe order). Capacity should fall as load grows; where it
/// does not, the verdicts are noise or the server changed between probes.
pub(crate) fn inversions(probes: &[Probe]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for f in probes.iter().filter(|p| !p.passes) {
        for p in probes.iter().filter(|p| p.passes && p.value > f.value) {
            out.push((f.value, p.value));
        }
    }
    out
}

/// Runs the search `spec` that `seed` starts on this launch. Returns how the launch ended when
/// it cannot go on (the search is then recorded as incomplete, and a resume picks it up).
pub(super) async fn run_search(
    seed: &Point,
    spec: servebench_model::spec::search::SearchSpec,
    on: &mut Launch<'_, '_>,
) -> Result<Option<One>, RunError> {
    let machine_spec = search::SearchSpec::from(&spec);
    let mut search = OneSearch {
        seed,
        key: search_key(seed),
        spec,
        machine_spec,
        machine: CapacitySearch::new(machine_spec),
    };
    let bound = search::probe_bound(&machine_spec);
    search.replay_earlier(on.cx)?;
    loop {
        let value = match search.machine.next() {
            Next::Done(answer) => {
                search.write_answer(&answer, true, on.cx)?;
                return profile_answer(seed, &search.spec, answer.capacity, on).await;
            }
            Next::Probe(v) => v,
        };
        let k = search.machine.probes().len() + 1;
        on.cx.progress.line(&format!(
            "{}: search probe {k} (≤ {bound}): {}={}",
            seed.id,
            search.spec.over,
            servebench_model::text::sig3(value)
        ));
        let (probe, end) = search.measure_probe(value, k, on).await?;
        if let Some(p) = probe {
            search.machine.record(p);
        }
        if let Some(end) = end {
            // Stopped mid-search: the bracket so far, marked incomplete.
            let (capacity, above) = bracket_so_far(search.machine.probes());
            let answer = search::Answer {
                capacity,
                above,
                saturated_at: None,
                probes: search.machine.probes().len(),
            };
            search.write_answer(&answer, false, on.cx)?;
            return Ok(Some(end));
        }
    }
}

/// One search running on a launch: the point that starts it, its spec and its state machine.
struct OneSearch<'s> {
    seed: &'s Point,
    /// Which search of the seed's sweep (see [`search_key`]).
    key: String,
    spec: servebench_model::spec::search::SearchSpec,
    machine_spec: search::SearchSpec,
    machine: CapacitySearch,
}

impl OneSearch<'_> {
    /// Replays into the state machine the probes an earlier session recorded (resume kept
    /// them): they are not measured again.
    fn replay_earlier(&mut self, cx: &LaunchContext<'_>) -> Result<(), RunError> {
        let mut earlier: Vec<SearchTag> = cx
            .run_dir
            .read_points()
            .map_err(|e| RunError::Write {
                what: "points.jsonl".into(),
                source: std::io::Error::other(e.to_string()),
            })?
            .into_iter()
            .filter(|p| p.id.starts_with(&format!("{}-s", self.seed.id)))
            .filter_map(|p| p.search)
            .filter(|t| t.label == self.key)
            .collect();
        earlier.sort_by_key(|t| t.probe);
        for t in &earlier {
            self.machine.record(Probe {
                value: t.value,
                passes: t.passes,
                throughput: t.throughput_req_s,
            });
        }
        if !earlier.is_empty() {
            cx.progress.line(&format!(
                "{}: search {}: {} recorded earlier, replayed",
                self.seed.id,
                self.key,
                servebench_model::text::count_s(earlier.len(), "probe")
            ));
        }
        Ok(())
    }

    /// Measures probe `k` at `value` as a point tagged with its search and verdict: the
    /// probe, once recorded, and how the launch ended when it cannot go on.
    async fn measure_probe(
        &self,
        value: f64,
        k: usize,
        on: &mut Launch<'_, '_>,
    ) -> Result<(Option<Probe>, Option<One>), RunError> {
        let mut point = probe_point(self.seed, self.spec.over, value, k);
        if let Some(needed) = extend_to_judge(&mut point)
            && k == 1
        {
            on.cx.progress.line(&format!(
                "{}: search: each probe measures at least {needed} requests, the fewest its SLO targets are judged on ({})",
                self.seed.id,
                servebench_report::measure::system::MIN_SAMPLES_RULE
            ));
        }
        let mut probe = None;
        let over = self.spec.over.to_string();
        let end = on
            .point(&point, &mut |record| {
                let (passes, why) = verdict(record);
                let throughput_req_s = achieved_req_s(record);
                record.search = Some(SearchTag {
                    label: self.key.clone(),
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
        Ok((probe, end))
    }

    /// Says the search's `answer` on the console and writes it to `search.json`
    /// (`complete`: the search decided it; otherwise the bracket when it stopped).
    fn write_answer(
        &self,
        answer: &search::Answer,
        complete: bool,
        cx: &LaunchContext<'_>,
    ) -> Result<(), RunError> {
        let mut record = answer_record(
            self.seed,
            &self.key,
            &self.spec,
            &self.machine_spec,
            answer,
            self.machine.probes(),
            complete,
        );
        record.agents = self.agents_headline(answer.capacity, cx);
        cx.progress
            .line(&format!("{}: {}", self.seed.id, answer_line(&record)));
        write_answer(cx.run_dir, record)
    }
}

impl OneSearch<'_> {
    /// A live-sessions search's answer as agents at the SLO, per GPU and per megawatt, from
    /// the recorded probe that set it (None for other searches and without a capacity).
    fn agents_headline(
        &self,
        capacity: Option<f64>,
        cx: &LaunchContext<'_>,
    ) -> Option<servebench_model::results::search::AgentsAtSlo> {
        if self.spec.over != servebench_model::spec::search::SearchOver::LiveSessions {
            return None;
        }
        let capacity = capacity?;
        let prefix = format!("{}-s", self.seed.id);
        let points = cx.run_dir.read_points().ok()?;
        let answer = points.iter().rev().find(|p| {
            p.id.starts_with(&prefix)
                && p.search
                    .as_ref()
                    .is_some_and(|t| t.label == self.key && t.passes && t.value == capacity)
        })?;
        let stated = self.seed.experiment.cost.as_ref().and_then(|c| c.gpus);
        Some(servebench_report::measure::agents::headline(
            answer, capacity, stated,
        ))
    }
}

/// `profile: { points: [answer] }`: the search's answer measured once more with the engine's
/// profiler (`<seed>-answer`, not a probe: the search is decided already, and a profiled
/// point's numbers carry the profiler's overhead).
async fn profile_answer(
    seed: &Point,
    spec: &servebench_model::spec::search::SearchSpec,
    capacity: Option<f64>,
    on: &mut Launch<'_, '_>,
) -> Result<Option<One>, RunError> {
    let wanted = seed
        .experiment
        .profiler
        .as_ref()
        .is_some_and(|p| p.answer());
    let Some(value) = capacity.filter(|_| wanted) else {
        return Ok(None);
    };
    let mut point = probe_point(seed, spec.over, value, 0);
    point.id = format!(
        "{}{}",
        seed.id,
        servebench_model::spec::profiler::ANSWER_SUFFIX
    );
    on.cx.progress.line(&format!(
        "{}: the answer, {}={}, once more with the profiler",
        seed.id,
        spec.over,
        servebench_model::text::sig3(value)
    ));
    on.point(&point, &mut |_| {}).await
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
    spec: &servebench_model::spec::search::SearchSpec,
    machine: &search::SearchSpec,
    answer: &search::Answer,
    probes: &[Probe],
    complete: bool,
) -> SearchRecord {
    let sustained_req_s = answer.capacity.and_then(|c| {
        probes
            .iter()
            .find(|p| p.passes && p.value == c)
            .map(|p| p.throughput)
    });
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
        sustained_req_s,
        inversions: inversions(probes)
            .into_iter()
            .map(|(f, p)| [f, p])
            .collect(),
        agents: None,
    }
}

/// `search all: capacity 10.3 req/s completed at load.rate=11.6 (passing; 12.1 does not),
/// 7 probes`, with any verdicts that contradict each other.
fn answer_line(r: &SearchRecord) -> String {
    let mut values: Vec<f64> = [r.capacity, r.above].into_iter().flatten().collect();
    values.extend(r.inversions.iter().flatten());
    let digits = servebench_model::text::distinguishing_digits(&values);
    let v = |x: f64| servebench_model::text::sig(x, digits);
    let sustained = r
        .sustained_req_s
        .map(|t| format!("{} req/s completed at ", servebench_model::text::sig3(t)))
        .unwrap_or_default();
    let found = match (r.capacity, r.above) {
        (Some(c), Some(a)) => format!(
            "capacity {sustained}{}={} (passing; {} does not)",
            r.over,
            v(c),
            v(a)
        ),
        (Some(c), None) => format!(
            "capacity {sustained}{}: at least {} (max passed)",
            r.over,
            v(c)
        ),
        // Saturation is found only after two passing probes: the first already at the plateau.
        (None, Some(a)) if r.saturated_at.is_some() => format!(
            "capacity {}: at or below {} (throughput was already at its plateau there; lower `search.start` to find the knee)",
            r.over,
            v(a)
        ),
        (None, Some(a)) => format!("capacity {}: below {} (no probe passed)", r.over, v(a)),
        (None, None) => format!("capacity {}: no probe measured", r.over),
    };
    let contradictions = if r.inversions.is_empty() {
        String::new()
    } else {
        let pairs: Vec<String> = r
            .inversions
            .iter()
            .map(|[f, p]| format!("{} failed below {} passing", v(*f), v(*p)))
            .collect();
        format!(
            "; NOT MONOTONIC: {} (noise, or the server changed between probes: the answer stays below the lowest failure)",
            pairs.join(", ")
        )
    };
    format!(
        "search {}{}: {found}, {}{contradictions}{}",
        r.label,
        if r.complete { "" } else { " stopped early" },
        servebench_model::text::count_s(r.probes, "probe"),
        r.agents.as_ref().map(agents_text).unwrap_or_default()
    )
}

/// `; 12 agents at the SLO: 6 per GPU (server: tp 2 x pp 1), 20,000 per MW (measured: ...)`.
fn agents_text(a: &servebench_model::results::search::AgentsAtSlo) -> String {
    use servebench_model::text::sig3;
    let per_gpu = match a.agents_at_slo_per_gpu {
        Some(v) => format!("{} per GPU ({})", sig3(v), a.gpus_source),
        None => format!("per GPU {}", a.gpus_source),
    };
    let per_mw = match (a.agents_at_slo_per_mw, a.power_w) {
        (Some(v), Some(w)) => format!("{} per MW at {} W ({})", sig3(v), sig3(w), a.power_source),
        _ => format!("per MW {}", a.power_source),
    };
    format!(
        "; {} agents at the SLO: {per_gpu}, {per_mw}",
        servebench_model::text::sig(a.agents_at_slo, 0)
    )
}

/// Puts `record` in `search.json`, replacing an earlier answer of the same search.
fn write_answer(
    dir: &servebench_model::results::rundir::RunDir,
    record: SearchRecord,
) -> Result<(), RunError> {
    let _one = SEARCH_FILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let write_err = |source: std::io::Error| RunError::Write {
        what: dir
            .file(servebench_model::results::search::SEARCH_FILE)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn point(yaml_tail: &str) -> Point {
        servebench_model::spec::load_str(
            "t.yaml",
            &format!(
                "name: t\nserver: {{ engine: sim }}\nworkload:\n  prompt: {{ kind: repeat, tokens: 100 }}\n  output_tokens: 4\n{yaml_tail}"
            ),
        )
        .unwrap()
        .points
        .remove(0)
    }

    /// A probe of 4 req/s for 5 s judges a p99 on ~20 requests: it is extended to the 100 a
    /// p99 needs, in requests and in time (a tenth over, whole seconds).
    #[test]
    fn a_probe_is_extended_to_the_requests_its_percentile_needs() {
        let mut p = point(
            "load: { kind: rate, rate: 4 }\nstop: { requests: 20, duration: 5s }\n\
             slo: { targets: { ttft_p99: 1s, tpot_p90: 50ms } }\n\
             search: { over: load.rate, start: 4, max: 64 }\n",
        );
        assert_eq!(extend_to_judge(&mut p), Some(100));
        let stop = p.experiment.stop.as_ref().unwrap();
        assert_eq!(stop.requests, Some(100));
        assert_eq!(stop.duration, Some(std::time::Duration::from_secs(28)));
        // Enough already: untouched.
        let mut p = point(
            "load: { kind: rate, rate: 4 }\nstop: { requests: 200, duration: 60s }\n\
             slo: { targets: { ttft_p99: 1s } }\n\
             search: { over: load.rate, start: 4, max: 64 }\n",
        );
        assert_eq!(extend_to_judge(&mut p), None);
        // A closed loop: requests per round, over its rounds.
        let mut p = point(
            "requests: 4\nrepeat: 2\nslo: { targets: { e2e_p90: 1s } }\n\
             search: { over: concurrency, start: 1, max: 8 }\n",
        );
        assert_eq!(extend_to_judge(&mut p), Some(10));
        assert_eq!(p.experiment.requests, 5);
    }

    #[test]
    fn a_probe_short_of_its_sample_is_not_a_pass() {
        let p = point("load: { kind: rate, rate: 4 }\nstop: { requests: 5 }\n");
        let mut r = PointRecord::empty(&p, "g1");
        r.ok = 5;
        r.status = Some(PointStatus::Ok);
        r.load = Some(servebench_model::results::records::LoadSummary {
            slo: Some(servebench_model::results::records::SloVerdict {
                met: false,
                good: 5,
                judged: 5,
                checks: vec![servebench_model::results::records::SloCheck {
                    target: "ttft_p99".into(),
                    limit: 1.0,
                    value: Some(0.2),
                    met: false,
                    samples: 5,
                    needed: 100,
                }],
            }),
            ..Default::default()
        });
        let (passes, why) = verdict(&r);
        assert!(!passes);
        let why = why.unwrap();
        assert!(
            why.starts_with("insufficient sample, counted as failing: ttft_p99 not judged: 5 measured values, a p99 needs at least 100"),
            "{why}"
        );
    }

    #[test]
    fn verdicts_that_rise_with_load_are_inversions() {
        let probe = |value, passes| Probe {
            value,
            passes,
            throughput: value,
        };
        let monotonic = [probe(4.0, true), probe(8.0, true), probe(16.0, false)];
        assert!(inversions(&monotonic).is_empty());
        let noisy = [
            probe(4.0, true),
            probe(8.0, false),
            probe(6.0, true),
            probe(7.0, false),
            probe(6.5, true),
            probe(12.0, true),
        ];
        assert_eq!(inversions(&noisy), [(8.0, 12.0), (7.0, 12.0)]);
        let record = SearchRecord {
            label: "all".into(),
            seed: "p001".into(),
            over: "load.rate".into(),
            start: 4.0,
            max: 16.0,
            resolution: 0.05,
            capacity: Some(6.5),
            above: Some(7.0),
            saturated_at: None,
            probes: 6,
            complete: true,
            sustained_req_s: Some(6.1),
            inversions: vec![[8.0, 12.0], [7.0, 12.0]],
            agents: None,
        };
        let line = answer_line(&record);
        assert!(
            line.starts_with("search all: capacity 6.10 req/s completed at load.rate=6.50 (passing; 7.00 does not), 6 probes; NOT MONOTONIC: 8.00 failed below 12.0 passing, 7.00 failed below 12.0 passing"),
            "{line}"
        );
    }

    /// Every probe passed, and the first already reached the throughput plateau: the answer
    /// says so, never "no probe passed".
    #[test]
    fn a_plateau_from_the_first_probe_is_not_said_to_be_a_failure() {
        let record = SearchRecord {
            label: "all".into(),
            seed: "p001".into(),
            over: "concurrency".into(),
            start: 1.0,
            max: 64.0,
            resolution: 0.05,
            capacity: None,
            above: Some(1.0),
            saturated_at: Some(2.0),
            probes: 2,
            complete: true,
            sustained_req_s: None,
            inversions: Vec::new(),
            agents: None,
        };
        let line = answer_line(&record);
        assert!(!line.contains("no probe passed"), "{line}");
        assert!(line.contains("at or below 1"), "{line}");
        assert!(line.contains("already at its plateau"), "{line}");
        let failed = SearchRecord {
            saturated_at: None,
            ..record
        };
        assert!(answer_line(&failed).contains("no probe passed"));
    }
}
