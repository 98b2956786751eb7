//! The report's speculative-decoding section: per point, the accept length (tokens per verify
//! step) and the verify step time it costs; for a run that measured the same points with
//! speculation on and off (a server variant, e.g. `server.args.speculative-algorithm:
//! [false, EAGLE]`), the decode speed-up per point and, along each numeric dimension, where
//! speculation stops paying (speed-up under 1), in words.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::catalog::{FlagKind, Metric};
use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::PointRecord;

use super::format::values_text;

/// The section; absent when no point has verify steps and no on/off pair was measured.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SpeculativeSection {
    /// Points whose requests' verify steps are known, in point order.
    pub points: Vec<SpecPoint>,
    /// Points whose requests do not carry their verify steps but whose server counted them
    /// (vLLM's `spec_decode_num_*` counters), in point order.
    pub server_counted: Vec<ServerCounted>,
    /// Points measured with speculation on and off, matched by their other values.
    pub pairs: Vec<SpeedupRow>,
    /// Where speculation stops paying, one sentence per line of pairs along a dimension.
    pub crossovers: Vec<String>,
}

/// A point's mean accept length as its server's counters give it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ServerCounted {
    pub point: String,
    /// The point's values, `dim=value, ...`.
    pub label: String,
    /// 1 + accepted draft tokens / drafts over the point's window.
    pub accept_length: f64,
}

/// A point's mean accept length: its requests' where they carry their verify steps, else its
/// server's counters (vLLM), else None.
pub(crate) fn point_accept_length(p: &PointRecord) -> Option<f64> {
    mean(p, Metric::AcceptLength).or_else(|| p.server.as_ref()?.spec_accept_length)
}

/// One point's accept length and step time.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SpecPoint {
    pub point: String,
    /// The point's values, `dim=value, ...`.
    pub label: String,
    /// Requests whose verify steps are known.
    pub requests: usize,
    /// Mean output tokens per verify step, and its spread over requests.
    pub accept_mean: f64,
    pub accept_min: f64,
    pub accept_p50: f64,
    pub accept_p90: f64,
    /// Mean decode milliseconds per verify step (None when no request had a decode span).
    pub verify_step_ms: Option<f64>,
    /// Mean decode tok/s of the point.
    pub decode_tok_s: Option<f64>,
    /// The point carries `spec-low-acceptance`.
    pub low_acceptance: bool,
}

/// A point measured with speculation on and off.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SpeedupRow {
    /// The values the two points share, `dim=value, ...` (the speculative dimensions left out).
    pub label: String,
    /// The point ids, on then off.
    pub on: String,
    pub off: String,
    /// Mean decode tok/s of each.
    pub decode_on: f64,
    pub decode_off: f64,
    /// decode_on / decode_off.
    pub speedup: f64,
    /// The on point's mean accept length, when known.
    pub accept_length: Option<f64>,
}

/// The flags that switch speculation on: SGLang's `--speculative-algorithm` (the draft-shape
/// flags alone do nothing: SGLang ignores them without it), vLLM's `--speculative-config`
/// (and its older `--speculative-model`), llama.cpp's `--model-draft`.
const SWITCHES: &[&str] = &[
    "speculative-algorithm",
    "speculative-config",
    "speculative-model",
    "model-draft",
];

/// Whether a point's server ran speculative decoding: its launch set a switch to anything but
/// `false` or null.
fn speculative(meta: &RunMeta, p: &PointRecord) -> bool {
    meta.servers
        .iter()
        .find(|s| s.group == p.group)
        .is_some_and(|s| switched_on(&s.args))
}

/// Whether launch flags switch speculation on (a switch set to anything but `false` or null).
pub(crate) fn switched_on(args: &IndexMap<String, serde_json::Value>) -> bool {
    args.iter().any(|(k, v)| {
        SWITCHES.contains(&k.trim_start_matches('-'))
            && !matches!(v, serde_json::Value::Bool(false) | serde_json::Value::Null)
    })
}

/// A dimension that only switches or shapes speculation: left out when matching on and off.
fn speculative_dim(d: &str) -> bool {
    d.strip_prefix("server.args.")
        .is_some_and(|f| f.trim_start_matches('-').starts_with("speculative"))
}

fn mean(p: &PointRecord, m: Metric) -> Option<f64> {
    p.metrics
        .get(m.name())
        .filter(|s| s.count > 0 && s.mean.is_finite())
        .map(|s| s.mean)
}

/// Builds the section from the run's launches and points.
pub(crate) fn section(meta: &RunMeta, points: &[PointRecord]) -> Option<SpeculativeSection> {
    let spec_points: Vec<SpecPoint> = points
        .iter()
        .filter_map(|p| {
            let a = p
                .metrics
                .get(Metric::AcceptLength.name())
                .filter(|s| s.count > 0)?;
            Some(SpecPoint {
                point: p.id.clone(),
                label: values_text(&p.values),
                requests: a.count,
                accept_mean: a.mean,
                accept_min: a.min,
                accept_p50: a.p50,
                accept_p90: a.p90,
                verify_step_ms: mean(p, Metric::VerifyStep).map(|s| s * 1e3),
                decode_tok_s: mean(p, Metric::Decode),
                low_acceptance: p
                    .flags
                    .iter()
                    .any(|f| f.kind == FlagKind::SpecLowAcceptance),
            })
        })
        .collect();
    let server_counted: Vec<ServerCounted> = points
        .iter()
        .filter(|p| mean(p, Metric::AcceptLength).is_none())
        .filter_map(|p| {
            Some(ServerCounted {
                point: p.id.clone(),
                label: values_text(&p.values),
                accept_length: p.server.as_ref()?.spec_accept_length?,
            })
        })
        .collect();
    let pairs = pairs(meta, points);
    if spec_points.is_empty() && server_counted.is_empty() && pairs.is_empty() {
        return None;
    }
    let crossovers = crossovers(&pairs);
    Some(SpeculativeSection {
        server_counted,
        points: spec_points,
        pairs: pairs.into_iter().map(|(_, row)| row).collect(),
        crossovers,
    })
}

/// On/off pairs with the values they share, in the order of their on points.
fn pairs(
    meta: &RunMeta,
    points: &[PointRecord],
) -> Vec<(IndexMap<String, serde_json::Value>, SpeedupRow)> {
    let measured: Vec<Measured> = points
        .iter()
        .map(|point| Measured {
            run: None,
            meta,
            point,
        })
        .collect();
    pair_up(&measured)
}

/// A point as measured in a run (`run`: its label in a comparison, None in a report).
struct Measured<'a> {
    run: Option<&'a str>,
    meta: &'a RunMeta,
    point: &'a PointRecord,
}

impl Measured<'_> {
    fn id(&self) -> String {
        match self.run {
            Some(run) => format!("{run} {}", self.point.id),
            None => self.point.id.clone(),
        }
    }
}

/// The values a point shares with its on or off twin: its own, the speculative dimensions
/// left out.
fn key(p: &PointRecord) -> IndexMap<String, serde_json::Value> {
    p.values
        .iter()
        .filter(|(d, _)| !speculative_dim(d))
        .map(|(d, v)| (d.clone(), v.clone()))
        .collect()
}

/// Pairs each on point with the one off point of the same values: in its own run when that
/// run has one, else the one in the other runs (none or several: no pair).
fn pair_up(points: &[Measured]) -> Vec<(IndexMap<String, serde_json::Value>, SpeedupRow)> {
    let (on, off): (Vec<&Measured>, Vec<&Measured>) =
        points.iter().partition(|m| speculative(m.meta, m.point));
    let mut out = Vec::new();
    for p in &on {
        let k = key(p.point);
        let same_values: Vec<&&Measured> = off.iter().filter(|q| key(q.point) == k).collect();
        let own: Vec<&&Measured> = same_values
            .iter()
            .copied()
            .filter(|q| q.run == p.run)
            .collect();
        let candidates = if own.is_empty() { same_values } else { own };
        let [q] = candidates.as_slice() else {
            continue;
        };
        let (Some(d_on), Some(d_off)) =
            (mean(p.point, Metric::Decode), mean(q.point, Metric::Decode))
        else {
            continue;
        };
        if d_off <= 0.0 {
            continue;
        }
        out.push((
            k.clone(),
            SpeedupRow {
                label: values_text(&k),
                on: p.id(),
                off: q.id(),
                decode_on: d_on,
                decode_off: d_off,
                speedup: d_on / d_off,
                accept_length: point_accept_length(p.point),
            },
        ));
    }
    out
}

/// Decode speed-ups of speculation on against off across compared runs (or within one
/// run's variants), with the crossover sentences.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SpeculativeCompare {
    /// Pairs of points with the same values, one with speculation on and one off; point ids
    /// are prefixed with their run's label (`B p003`).
    pub pairs: Vec<SpeedupRow>,
    /// Where speculation stops paying, one sentence per line of pairs along a dimension.
    pub crossovers: Vec<String>,
}

/// The comparison's on/off speed-ups: `runs` are (label, meta, points) in compare order.
/// None when no on point has an off twin.
pub(crate) fn compare(runs: &[(&str, &RunMeta, &[PointRecord])]) -> Option<SpeculativeCompare> {
    let measured: Vec<Measured> = runs
        .iter()
        .flat_map(|(run, meta, points)| {
            points.iter().map(move |point| Measured {
                run: Some(run),
                meta,
                point,
            })
        })
        .collect();
    let pairs = pair_up(&measured);
    if pairs.is_empty() {
        return None;
    }
    Some(SpeculativeCompare {
        crossovers: crossovers(&pairs),
        pairs: pairs.into_iter().map(|(_, row)| row).collect(),
    })
}

/// For each numeric dimension, each line of pairs along it (the other values fixed, three
/// or more... or two or more points) in one sentence: where speculation pays, where it stops.
fn crossovers(pairs: &[(IndexMap<String, serde_json::Value>, SpeedupRow)]) -> Vec<String> {
    let mut dims: Vec<&String> = Vec::new();
    for (k, _) in pairs {
        for (d, v) in k {
            if v.is_number() && !dims.contains(&d) {
                dims.push(d);
            }
        }
    }
    let mut out = Vec::new();
    for dim in dims {
        // Lines: the other values fixed.
        let mut lines: Vec<(String, Vec<(f64, &SpeedupRow)>)> = Vec::new();
        for (k, row) in pairs {
            let Some(x) = k.get(dim).and_then(serde_json::Value::as_f64) else {
                continue;
            };
            let mut rest = k.clone();
            rest.shift_remove(dim);
            let name = values_text(&rest);
            match lines.iter_mut().find(|(n, _)| *n == name) {
                Some((_, line)) => line.push((x, row)),
                None => lines.push((name, vec![(x, row)])),
            }
        }
        for (rest, mut line) in lines {
            if line.len() < 2 {
                continue;
            }
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            out.push(sentence(dim, &rest, &line));
        }
    }
    out
}

fn times(x: f64) -> String {
    format!("{x:.2}x")
}

fn at(dim: &str, x: f64) -> String {
    format!("{dim} {}", servebench_model::text::plain(x))
}

/// One line's verdict in words.
fn sentence(dim: &str, rest: &str, line: &[(f64, &SpeedupRow)]) -> String {
    let lead = if rest.is_empty() {
        String::new()
    } else {
        format!("At {rest}, ")
    };
    let first = line[0];
    let last = line[line.len() - 1];
    let stop = line.iter().position(|(_, r)| r.speedup < 1.0);
    let text = match stop {
        None => format!(
            "speculation pays at every {dim} measured: {} at {} to {} at {}",
            times(first.1.speedup),
            at(dim, first.0),
            times(last.1.speedup),
            at(dim, last.0)
        ),
        Some(0) => format!(
            "speculation never pays: {} already at {} ({} at {})",
            times(first.1.speedup),
            at(dim, first.0),
            times(last.1.speedup),
            at(dim, last.0)
        ),
        Some(i) => {
            let (x_pay, pay) = line[i - 1];
            let (x_stop, stopped) = line[i];
            let back = line[i..].iter().any(|(_, r)| r.speedup >= 1.0);
            format!(
                "speculation pays up to {} ({}) and stops paying by {} ({}): the crossover lies between {dim} {} and {}{}",
                at(dim, x_pay),
                times(pay.speedup),
                at(dim, x_stop),
                times(stopped.speedup),
                servebench_model::text::plain(x_pay),
                servebench_model::text::plain(x_stop),
                if back {
                    " (it pays again further on: noisy points, look at their intervals)"
                } else {
                    ""
                }
            )
        }
    };
    let mut s = format!("{lead}{text}.");
    if lead.is_empty()
        && let Some(c) = s.get(0..1)
    {
        s = c.to_uppercase() + &s[1..];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(speedup: f64) -> SpeedupRow {
        SpeedupRow {
            label: String::new(),
            on: "p1".into(),
            off: "p0".into(),
            decode_on: speedup * 100.0,
            decode_off: 100.0,
            speedup,
            accept_length: Some(2.5),
        }
    }

    #[test]
    fn the_crossover_is_named_between_the_last_paying_and_the_first_losing_value() {
        let (a, b, c) = (row(2.0), row(1.3), row(0.6));
        let line = [(1.0, &a), (8.0, &b), (32.0, &c)];
        let s = sentence("concurrency", "ctx=1024", &line);
        assert_eq!(
            s,
            "At ctx=1024, speculation pays up to concurrency 8 (1.30x) and stops paying by concurrency 32 (0.60x): the crossover lies between concurrency 8 and 32."
        );
        let all = sentence("concurrency", "", &line[..2]);
        assert_eq!(
            all,
            "Speculation pays at every concurrency measured: 2.00x at concurrency 1 to 1.30x at concurrency 8."
        );
        let never = sentence("ctx", "", &[(1.0, &c), (2.0, &c)]);
        assert!(
            never.starts_with("Speculation never pays: 0.60x"),
            "{never}"
        );
    }

    #[test]
    fn only_speculative_flags_are_speculative_dimensions() {
        assert!(speculative_dim("server.args.speculative-algorithm"));
        assert!(speculative_dim("server.args.speculative-num-steps"));
        assert!(!speculative_dim("server.args.chunked-prefill-size"));
        assert!(!speculative_dim("concurrency"));
    }
}
