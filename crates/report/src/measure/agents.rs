//! Agents at the SLO (`slo.agent`): each agent session judged on its own turns (the
//! percentile of their TTFT or first answer, and its output speed over the session), a point
//! judged on the share of its agents that meet it, and a live-sessions search's answer as
//! agents per GPU and per megawatt of measured power (Artificial Analysis's AgentPerf
//! figures; docs/guide/traces.md says where servebench chose what AgentPerf does not say).

use servebench_model::results::jobs::{AgentVerdict, JobsView};
use servebench_model::results::records::{PointRecord, RequestRecord, SloCheck};
use servebench_model::results::search::AgentsAtSlo;
use servebench_model::spec::load_model::AgentSlo;

use super::metrics::request_metrics;

/// The name the per-agent check carries among a point's SLO checks.
pub const AGENTS_CHECK: &str = "agents";

/// One session's turns as the per-agent SLO sees them.
#[derive(Debug, Clone, Default)]
pub(crate) struct AgentTurns {
    /// Each successful turn's TTFT and first answer (infinite when it never answered),
    /// seconds from its due time.
    ttft: Vec<f64>,
    ttfa: Vec<f64>,
    /// Output tokens of the successful turns (the server's count) and their summed seconds
    /// from first token to end.
    tokens: u64,
    generating_s: f64,
    failed: u32,
}

impl AgentTurns {
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        if r.error.is_some() {
            self.failed += 1;
            return;
        }
        let m = request_metrics(r);
        let Some(ttft) = m.ttft_s else { return };
        let lag = r.lag_s.unwrap_or(0.0);
        self.ttft.push(ttft + lag);
        self.ttfa.push(m.ttfa_s.map_or(f64::INFINITY, |a| a + lag));
        self.tokens += r.completion_tokens.unwrap_or(0);
        if let Some(end) = r.end_s {
            self.generating_s += (end - ttft).max(0.0);
        }
    }

    /// The session's verdict against `slo`; None when it sent nothing that came back.
    pub(crate) fn verdict(&self, slo: &AgentSlo) -> Option<AgentVerdict> {
        let turns = self.ttft.len() as u32;
        if turns == 0 && self.failed == 0 {
            return None;
        }
        let latency = slo.latency().and_then(|(metric, limit)| {
            let values = if metric == "ttfa" {
                &self.ttfa
            } else {
                &self.ttft
            };
            nearest_rank(values, slo.percentile).map(|v| (metric, v, limit))
        });
        let speed = (self.generating_s > 0.0).then(|| self.tokens as f64 / self.generating_s);
        let mut why = Vec::new();
        if self.failed > 0 {
            why.push(format!("{} failed", count(self.failed, "turn")));
        }
        if let Some((metric, v, limit)) = latency
            && v > limit
        {
            why.push(format!(
                "{metric} p{} {} > {}",
                slo.percentile,
                seconds(v),
                seconds(limit)
            ));
        }
        if slo.latency().is_some() && latency.is_none() {
            why.push("no turn came back to time".into());
        }
        if let Some(want) = slo.output_tok_s {
            match speed {
                Some(s) if s < want => why.push(format!("output {s:.1} tok/s < {want}")),
                None => why.push("no output speed: nothing was generated".into()),
                _ => {}
            }
        }
        Some(AgentVerdict {
            met: why.is_empty(),
            latency_s: latency.map(|(_, v, _)| v).filter(|v| v.is_finite()),
            output_tok_s: speed,
            turns,
            failed: self.failed,
            why: (!why.is_empty()).then(|| why.join("; ")),
        })
    }
}

/// The nearest-rank percentile (the value at rank ceil(q/100 x n) of n, sorted): a value
/// one of the turns had, never an interpolation towards an unanswered turn's infinity.
pub(crate) fn nearest_rank(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

fn count(n: u32, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn seconds(s: f64) -> String {
    if s.is_infinite() {
        "never".into()
    } else if s < 1.0 {
        format!("{:.0}ms", s * 1e3)
    } else {
        format!("{s:.2}s")
    }
}

/// The point's per-agent check, added to its SLO verdict (which then holds only if it
/// holds): the share of its judged agents that met `slo.agent` against the share it asks;
/// judged on at least one agent. Also the share as the point's `agents_slo_share` metric.
pub fn put_check(slo: &AgentSlo, record: &mut PointRecord) {
    let Some(jobs) = record.jobs.as_ref() else {
        return;
    };
    let share = met_share(jobs);
    if let Some(s) = share {
        record.metrics.insert(
            servebench_model::catalog::Metric::AgentsSloShare
                .name()
                .into(),
            super::system::single(s),
        );
    }
    let Some(verdict) = record.load.as_mut().and_then(|l| l.slo.as_mut()) else {
        return;
    };
    let limit = slo.share_fraction();
    let met = share.is_some_and(|s| s + 1e-12 >= limit);
    verdict.checks.push(SloCheck {
        target: AGENTS_CHECK.into(),
        limit,
        value: share,
        met,
        samples: jobs.agents_judged,
        needed: 1,
    });
    verdict.met = verdict.met && met;
}

/// The share of judged agents that met the per-agent SLO; None with none judged.
fn met_share(jobs: &JobsView) -> Option<f64> {
    (jobs.agents_judged > 0).then(|| jobs.agents_met as f64 / jobs.agents_judged as f64)
}

/// A live-sessions search's answer `agents` as AgentPerf's figures, from the point that set
/// it (`answer`): per GPU (the GPUs its readings covered, else the server's tp x pp, else
/// `stated_gpus`, the spec's `cost.gpus`) and per megawatt of its measured GPU power (never a
/// datasheet's: absent, with the reason, when the point measured none).
pub fn headline(answer: &PointRecord, agents: f64, stated_gpus: Option<u32>) -> AgentsAtSlo {
    let gpu = answer.gpu.as_ref();
    let probed = gpu.filter(|g| g.gpus > 0 && g.partial.is_none());
    let (gpus, gpus_source) = if let Some(g) = probed {
        let by = g.source.as_deref().unwrap_or("GPU telemetry");
        (
            Some(g.gpus as u32),
            format!("telemetry: the GPUs {by} read"),
        )
    } else if let Some(b) = answer.bound.as_ref().filter(|b| b.tp * b.pp > 0) {
        (
            Some(b.tp * b.pp),
            format!("server: tp {} x pp {}", b.tp, b.pp),
        )
    } else if let Some(n) = stated_gpus {
        (Some(n), "cost.gpus: the spec's count".into())
    } else {
        (
            None,
            "unknown: no GPU telemetry, no server config and no `cost.gpus`".into(),
        )
    };
    let power_w = answer
        .metrics
        .get(servebench_model::catalog::Metric::GpuPower.name())
        .map(|s| s.mean)
        .filter(|w| *w > 0.0);
    let power_source = match (power_w, gpu) {
        (Some(_), Some(g)) => format!(
            "measured: mean GPU power over the answer point's window ({}; GPUs only, not the host)",
            g.source.as_deref().unwrap_or("GPU telemetry")
        ),
        (Some(_), None) => "measured: mean GPU power over the answer point's window".into(),
        (None, Some(g)) if g.missing.is_some() => {
            format!("not measured: {}", g.missing.as_deref().unwrap_or_default())
        }
        (None, Some(g)) if g.partial.is_some() => format!(
            "not measured: the readings leave out {}",
            g.partial.as_deref().unwrap_or_default()
        ),
        (None, Some(_)) => {
            "not measured: the GPU readings did not cover the answer point's window with power"
                .into()
        }
        (None, None) => "not measured: the answer point had no GPU telemetry".into(),
    };
    AgentsAtSlo {
        agents_at_slo: agents,
        gpus,
        gpus_source,
        agents_at_slo_per_gpu: gpus.map(|n| agents / n as f64),
        power_w,
        agents_at_slo_per_mw: power_w.map(|w| agents / (w / 1e6)),
        power_source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::gpu::GpuView;
    use servebench_model::results::records::{Chunk, ErrorKind, RequestError, SloVerdict};

    /// A turn sent `lag` late whose first token came at `ttft` and whose `out` tokens ended at
    /// `end`; `thinking` tokens first, when given, so the answer starts at the second chunk.
    fn turn(lag: f64, ttft: f64, end: f64, out: u32, thinking: bool) -> RequestRecord {
        let mut first = Chunk::new(ttft, 1);
        first.reasoning = u32::from(thinking);
        RequestRecord {
            lag_s: Some(lag),
            end_s: Some(end),
            completion_tokens: Some(out as u64),
            chunks: vec![first, Chunk::new(end, out - 1)],
            ..RequestRecord::fixture()
        }
    }

    /// `slo.agent` from its fields, `key: value` separated by commas.
    fn slo(fields: &str) -> AgentSlo {
        let mut m = serde_json::Map::new();
        for kv in fields
            .trim_matches(|c| c == '{' || c == '}' || c == ' ')
            .split(", ")
        {
            let (k, v) = kv.split_once(": ").unwrap();
            let v = v
                .parse::<f64>()
                .map_or(serde_json::json!(v), |n| serde_json::json!(n));
            m.insert(k.into(), v);
        }
        serde_json::from_value(serde_json::Value::Object(m)).unwrap()
    }

    #[test]
    fn an_agents_verdict_is_the_nearest_rank_of_its_turns_and_its_speed_over_the_session() {
        let mut a = AgentTurns::default();
        // TTFTs from the due time: 0.1, 0.2 (0.15 + 0.05 late), 0.3, 0.4, 1.0.
        for (lag, ttft) in [(0.0, 0.1), (0.05, 0.15), (0.0, 0.3), (0.0, 0.4), (0.0, 1.0)] {
            a.add(&turn(lag, ttft, ttft + 1.0, 101, false));
        }
        // p80 of five is the 4th (0.4 s), p90 the 5th (1.0 s): a value a turn had.
        let v = a.verdict(&slo("{ ttft: 500ms, percentile: 80 }")).unwrap();
        assert_eq!((v.met, v.latency_s, v.turns), (true, Some(0.4), 5));
        let v = a.verdict(&slo("{ ttft: 500ms }")).unwrap();
        assert!(!v.met);
        assert_eq!(v.why.as_deref(), Some("ttft p90 1.00s > 500ms"));
        // 505 tokens over 5 s of generation: 101 tok/s.
        let v = a.verdict(&slo("{ output_tok_s: 120 }")).unwrap();
        assert!((v.output_tok_s.unwrap() - 101.0).abs() < 1e-9);
        assert_eq!(v.why.as_deref(), Some("output 101.0 tok/s < 120"));
        assert!(a.verdict(&slo("{ output_tok_s: 100 }")).unwrap().met);
    }

    #[test]
    fn a_failed_turn_or_an_unanswered_one_misses_and_an_idle_agent_is_not_judged() {
        assert_eq!(AgentTurns::default().verdict(&slo("{ ttft: 1s }")), None);
        let mut a = AgentTurns::default();
        a.add(&turn(0.0, 0.1, 0.5, 10, false));
        a.add(&RequestRecord {
            error: Some(RequestError {
                kind: ErrorKind::Http,
                message: "HTTP 500".into(),
                status: Some(500),
                body_head: None,
            }),
            ..RequestRecord::fixture()
        });
        let v = a.verdict(&slo("{ ttft: 1s }")).unwrap();
        assert_eq!((v.met, v.turns, v.failed), (false, 1, 1));
        assert_eq!(v.why.as_deref(), Some("1 turn failed"));
        // A turn that only thought never answered: its first answer ranks beyond any bound.
        let mut t = AgentTurns::default();
        let mut only_thinking = turn(0.0, 0.1, 0.5, 10, true);
        only_thinking.chunks[1].reasoning = 9;
        t.add(&only_thinking);
        let v = t.verdict(&slo("{ ttfa: 10s, percentile: 100 }")).unwrap();
        assert!(!v.met && v.latency_s.is_none(), "{v:?}");
        assert_eq!(v.why.as_deref(), Some("ttfa p100 never > 10.00s"));
    }

    fn point(judged: usize, met: usize) -> PointRecord {
        PointRecord {
            jobs: Some(JobsView {
                agents_judged: judged,
                agents_met: met,
                ..JobsView::default()
            }),
            load: Some(servebench_model::results::records::LoadSummary {
                slo: Some(SloVerdict {
                    met: true,
                    ..SloVerdict::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_point_meets_the_agent_slo_when_the_share_it_asks_does() {
        let mut p = point(20, 19);
        put_check(&slo("{ ttft: 1s, share: 95% }"), &mut p);
        let v = p.load.as_ref().unwrap().slo.as_ref().unwrap();
        assert!(v.met, "{v:?}");
        assert_eq!(p.metrics["agents_slo_share"].mean, 0.95);
        let mut p = point(20, 19);
        put_check(&slo("{ ttft: 1s }"), &mut p);
        let v = p.load.as_ref().unwrap().slo.as_ref().unwrap();
        assert!(!v.met);
        assert_eq!(
            v.checks[0].missed_text(),
            "agents meeting the per-agent SLO 95.0% < 100%"
        );
        // No agent judged: not met, and said so as unjudged.
        let mut p = point(0, 0);
        put_check(&slo("{ ttft: 1s }"), &mut p);
        let v = p.load.as_ref().unwrap().slo.as_ref().unwrap();
        assert!(!v.met && v.checks[0].insufficient());
    }

    #[test]
    fn per_gpu_and_per_megawatt_come_from_the_answer_points_readings() {
        // 8 GPUs read by nvidia-smi drawing 5,600 W together: 40 agents are 5 per GPU and
        // 40 / 0.0056 MW = 7,142.9 per MW.
        let mut p = PointRecord {
            gpu: Some(GpuView {
                source: Some("nvidia-smi".into()),
                gpus: 8,
                ..GpuView::default()
            }),
            ..Default::default()
        };
        p.metrics
            .insert("gpu_power_w".into(), crate::measure::system::single(5600.0));
        let h = headline(&p, 40.0, Some(2));
        assert_eq!((h.gpus, h.agents_at_slo_per_gpu), (Some(8), Some(5.0)));
        assert_eq!(h.gpus_source, "telemetry: the GPUs nvidia-smi read");
        assert!((h.agents_at_slo_per_mw.unwrap() - 40.0 / 0.0056).abs() < 1e-6);
        assert!(h.power_source.starts_with("measured"), "{}", h.power_source);
        // No telemetry: the spec's count, and no per-MW figure, with the reason.
        let h = headline(&PointRecord::default(), 40.0, Some(2));
        assert_eq!((h.gpus, h.agents_at_slo_per_gpu), (Some(2), Some(20.0)));
        assert_eq!((h.power_w, h.agents_at_slo_per_mw), (None, None));
        assert_eq!(
            h.power_source,
            "not measured: the answer point had no GPU telemetry"
        );
        let missing = PointRecord {
            gpu: Some(GpuView {
                missing: Some("nvidia-smi not found on local".into()),
                ..GpuView::default()
            }),
            ..Default::default()
        };
        let h = headline(&missing, 3.0, None);
        assert_eq!(
            h.power_source,
            "not measured: nvidia-smi not found on local"
        );
        assert_eq!(h.agents_at_slo_per_gpu, None);
    }
}
