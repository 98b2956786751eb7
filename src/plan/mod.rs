//! Ordering points into server groups: points that share a server configuration run on one
//! launch, so the server restarts only when its configuration changes; and the failure policy
//! each group follows when its server dies ([`failure`]).

pub mod estimate;
pub(crate) mod failure;
pub(crate) mod pool;
pub(crate) mod render;
pub(crate) mod search;

use std::path::Path;

use servebench_model::spec::Point;
use servebench_model::spec::types::{Experiment, Measure, Server};

/// Points that share one server configuration (one launch).
#[derive(Debug, Clone)]
pub struct ServerGroup {
    /// `g1`, `g2`, ... in order of first appearance.
    pub id: String,
    pub server: Server,
    pub points: Vec<Point>,
}

/// The execution order of a spec's points.
#[derive(Debug, Clone)]
pub struct Plan {
    pub groups: Vec<ServerGroup>,
}

impl Plan {
    /// Groups points by their resolved `server` section, keeping the order of first appearance
    /// (and the spec's order within a group).
    pub fn new(points: &[Point]) -> Plan {
        let mut groups: Vec<ServerGroup> = Vec::new();
        for p in points {
            let server = &p.experiment.server;
            match groups.iter_mut().find(|g| &g.server == server) {
                Some(g) => g.points.push(p.clone()),
                None => groups.push(ServerGroup {
                    id: format!("g{}", groups.len() + 1),
                    server: server.clone(),
                    points: vec![p.clone()],
                }),
            }
        }
        Plan { groups }
    }

    pub fn point_count(&self) -> usize {
        self.groups.iter().map(|g| g.points.len()).sum()
    }

    /// Requests in the whole plan (see [`point_requests`]); `spec_dir` resolves trace files.
    pub fn request_count(&self, spec_dir: &Path) -> RequestCount {
        self.groups
            .iter()
            .flat_map(|g| &g.points)
            .map(|p| point_requests(p, spec_dir))
            .fold(RequestCount::default(), |a, b| RequestCount {
                measured: a.measured + b.measured,
                sent: a.sent + b.sent,
            })
    }

    /// Server launches the plan needs (external servers are not launched).
    pub(crate) fn launches(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| g.server.url.is_none())
            .count()
    }
}

/// How many requests a point sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCount {
    /// Those measured (an open loop's measured phase; the prime of a warm cache aside).
    pub measured: u64,
    /// Every one sent: an open loop's warm-up and cool-down too.
    pub sent: u64,
}

impl RequestCount {
    fn times(self, n: u64) -> RequestCount {
        RequestCount {
            measured: self.measured * n,
            sent: self.sent * n,
        }
    }
}

/// The requests a point sends, from its load model: an open loop's schedule (its warm-up,
/// measured and cool-down requests: rate x stop, a trace's lines), users x turns of sessions,
/// rounds x requests of a closed loop (a pair each under the two-point method). A capacity
/// search is bounded by its probes: at most [`search::probe_bound`] of them, each as many as
/// its probe at that value sends (an open loop's bisections counted at the search's `max`).
/// An open loop whose schedule cannot be made counts nothing (the run says why).
pub fn point_requests(p: &Point, spec_dir: &Path) -> RequestCount {
    let Some(s) = &p.experiment.search else {
        return one_point_requests(&p.experiment, spec_dir);
    };
    let bound = search::probe_bound(&s.into());
    if p.experiment.open_loop().is_none() {
        return one_point_requests(&p.experiment, spec_dir).times(bound as u64);
    }
    // The doublings from `start` up to `max`, then bisections below the highest.
    let mut values = Vec::new();
    let mut v = s.start.max(f64::MIN_POSITIVE);
    while values.len() < bound {
        values.push(v.min(s.max));
        if v >= s.max {
            break;
        }
        v *= 2.0;
    }
    values.resize(bound, s.max);
    values
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            one_point_requests(&search::probe_point(p, s.over, v, k).experiment, spec_dir)
        })
        .fold(RequestCount::default(), |a, b| RequestCount {
            measured: a.measured + b.measured,
            sent: a.sent + b.sent,
        })
}

fn one_point_requests(e: &Experiment, spec_dir: &Path) -> RequestCount {
    if let Some(a) = e.agentic() {
        // Every turn of the sessions run (the trace again for more sessions than it holds);
        // a trace that cannot be read counts nothing (`validate` says why).
        let n = crate::load::agentic::summarize(&spec_dir.join(&a.file), a).map_or(0, |s| {
            let sessions = a.sessions.map_or(s.sessions, |n| n as usize);
            (s.turns as f64 * sessions as f64 / s.sessions.max(1) as f64).round() as u64
        });
        return RequestCount {
            measured: n,
            sent: n,
        };
    }
    if let Some(s) = e.sessions() {
        // A file's conversations, each sent once a round; one that cannot be read counts
        // nothing (`validate` says why).
        let per_round = match &s.file {
            Some(f) => crate::prompt::load_sessions_file(s, &spec_dir.join(f))
                .map_or(0, |c| c.iter().map(|c| c.turns.len() as u64).sum()),
            None => s.users as u64 * u64::from(s.turns.unwrap_or(1)),
        };
        let n = e.repeat as u64 * per_round;
        return RequestCount {
            measured: n,
            sent: n,
        };
    }
    if e.open_loop().is_some() {
        return match crate::load::Schedule::of(e, spec_dir) {
            Ok(s) => RequestCount {
                measured: s.measured() as u64,
                sent: s.len() as u64,
            },
            Err(_) => RequestCount::default(),
        };
    }
    let per_sample = match e.method.resolve() {
        Measure::Streaming => 1,
        Measure::TwoPoint { .. } => 2,
    };
    let n = e.repeat as u64 * e.requests as u64 * per_sample;
    RequestCount {
        measured: n,
        sent: n,
    }
}
