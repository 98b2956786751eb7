//! Ordering points into server groups: points that share a server configuration run on one
//! launch, so the server restarts only when its configuration changes; and the failure policy
//! each group follows when its server dies ([`failure`]).

pub mod estimate;
pub mod failure;
pub mod pool;
pub mod render;
pub mod search;

use crate::spec::Point;
use crate::spec::types::{Measure, Server};

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

    /// Measured requests in the whole plan: per point, rounds x requests, and two of them per
    /// sample for the two-point method (see [`measured_requests`]).
    pub fn request_count(&self) -> u64 {
        self.groups
            .iter()
            .flat_map(|g| &g.points)
            .map(measured_requests)
            .sum()
    }

    /// Server launches the plan needs (external servers are not launched).
    pub fn launches(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| g.server.url.is_none())
            .count()
    }
}

/// The requests a point sends to be measured (the prime request of a warm cache aside): its
/// `requests` in each of its `repeat` rounds, each a pair (`a` then `b`) under the two-point
/// method.
pub fn measured_requests(p: &Point) -> u64 {
    let e = &p.experiment;
    let per_sample = match e.method.resolve() {
        Measure::Streaming => 1,
        Measure::TwoPoint { .. } => 2,
    };
    e.repeat as u64 * e.requests as u64 * per_sample
}
