//! What the report needs of `requests.jsonl`, folded one request at a time: run-wide counts,
//! per point the counts, failures and token sums the tables and the server's view read, and
//! each scraped point's requests in flight over time. Its size grows with the points (and the
//! kinds of error), never with the requests, so a report of a million requests holds no more
//! than one of a hundred ([`servebench_model::results::RunDir::visit_requests`] reads them line by line).

use indexmap::IndexMap;

use super::timeline::InFlight;
use servebench_model::results::records::{RequestRecord, RequestRole};

/// The report's view of a run's requests, built by [`RequestDigest::add`] in file order.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct RequestDigest {
    /// Records read (measured and priming): the lines of `requests.jsonl` that parsed.
    pub recorded: usize,
    /// Priming requests (warm policy), not measured.
    pub prime: usize,
    /// Where measured requests' token counts came from (`meta-info`, `usage`, `chunk-count`),
    /// in order of first appearance.
    pub token_sources: Vec<String>,
    /// Per point, in the order of the point's first measured request; a point with priming
    /// requests only has no entry.
    pub points: IndexMap<String, PointDigest>,
    /// The client's requests in flight over time, for the points given a time origin
    /// ([`RequestDigest::with_timelines`]).
    pub in_flight: IndexMap<String, InFlight>,
}

/// One point's measured requests (every role but priming), as the report counts them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PointDigest {
    /// Measured requests recorded.
    pub measured: usize,
    /// Of which failed.
    pub errors: usize,
    /// The failed ones by error kind (`http`, `timeout`, ...), in order of first appearance.
    pub error_kinds: IndexMap<String, FirstError>,
    /// Requests of role `measure` (not two-point pairs) that succeeded: the client's side of
    /// the server's view.
    pub done: usize,
    /// Their prompt tokens as the server counted them, summed; None when one of them carries
    /// no count (a sum over some would not be the client's number).
    pub done_prompt_tokens: Option<u64>,
    /// Their prompt tokens served from the prefix cache, summed; None when one of them does
    /// not say.
    pub done_cached_tokens: Option<u64>,
}

/// No requests: nothing counted, and token sums of zero (a sum over no requests).
impl Default for PointDigest {
    fn default() -> PointDigest {
        PointDigest {
            measured: 0,
            errors: 0,
            error_kinds: IndexMap::new(),
            done: 0,
            done_prompt_tokens: Some(0),
            done_cached_tokens: Some(0),
        }
    }
}

/// Failed requests of one kind within a point, with the first one's words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FirstError {
    /// How many measured requests failed this way.
    pub count: usize,
    /// The first such request's message.
    pub message: String,
    /// The first such request's HTTP status, when a response arrived.
    pub status: Option<u16>,
}

impl RequestDigest {
    /// An empty digest that draws no timelines.
    pub(crate) fn new() -> RequestDigest {
        RequestDigest::default()
    }

    /// An empty digest that also folds the requests in flight of each given point, seconds
    /// counted from its origin (Unix seconds: the point's first scrape).
    pub(crate) fn with_timelines(
        origins: impl IntoIterator<Item = (String, f64)>,
    ) -> RequestDigest {
        RequestDigest {
            in_flight: origins
                .into_iter()
                .map(|(point, origin)| (point, InFlight::new(origin)))
                .collect(),
            ..RequestDigest::default()
        }
    }

    /// The digest of requests held in memory (tests, and callers that have them anyway).
    pub(crate) fn of(requests: &[RequestRecord]) -> RequestDigest {
        let mut d = RequestDigest::new();
        requests.iter().for_each(|r| d.add(r));
        d
    }

    /// Folds one request in. Requests must come in file order: "first" means first added.
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        self.recorded += 1;
        if !r.role.is_measured() {
            self.prime += 1;
            return;
        }
        let source: &'static str = r.token_source.into();
        if !self.token_sources.iter().any(|s| s == source) {
            self.token_sources.push(source.to_string());
        }
        // Looked up before inserting: a point's id is cloned once, not once per request.
        let p = match self.points.get_index_of(r.point.as_str()) {
            Some(i) => &mut self.points[i],
            None => self.points.entry(r.point.clone()).or_default(),
        };
        p.measured += 1;
        match &r.error {
            Some(e) => {
                p.errors += 1;
                let kind = e.kind.to_string();
                match p.error_kinds.get_mut(&kind) {
                    Some(first) => first.count += 1,
                    None => {
                        p.error_kinds.insert(
                            kind,
                            FirstError {
                                count: 1,
                                message: e.message.clone(),
                                status: e.status,
                            },
                        );
                    }
                }
            }
            None if r.role == RequestRole::Measure => {
                p.done += 1;
                p.done_prompt_tokens = sum(p.done_prompt_tokens, r.prompt_tokens);
                p.done_cached_tokens = sum(p.done_cached_tokens, r.cached_tokens);
            }
            None => {}
        }
        if r.role == RequestRole::Measure
            && let Some(flight) = self.in_flight.get_mut(r.point.as_str())
        {
            flight.add(r.sent_at, r.end_s);
        }
    }

    /// The digest of point `id` (None when it has no measured request).
    pub(crate) fn point(&self, id: &str) -> Option<&PointDigest> {
        self.points.get(id)
    }
}

/// A running sum that is None once any term is (saturating: a corrupt count cannot panic).
fn sum(acc: Option<u64>, term: Option<u64>) -> Option<u64> {
    Some(acc?.saturating_add(term?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::{ErrorKind, RequestError, TokenSource};

    fn request(point: &str, role: RequestRole, sent_at: f64, end_s: Option<f64>) -> RequestRecord {
        RequestRecord {
            point: point.to_string(),
            role,
            sent_at,
            end_s,
            prompt_tokens: Some(10),
            completion_tokens: Some(4),
            cached_tokens: Some(3),
            ..RequestRecord::fixture()
        }
    }

    fn failed(point: &str, kind: ErrorKind, message: &str, status: Option<u16>) -> RequestRecord {
        let mut r = request(point, RequestRole::Measure, 100.0, None);
        r.error = Some(RequestError {
            kind,
            message: message.to_string(),
            status,
            body_head: None,
        });
        r
    }

    #[test]
    fn counts_first_errors_and_token_sums_per_point() {
        let mut usage = request("p002", RequestRole::TwoPointA, 100.0, Some(1.0));
        usage.token_source = TokenSource::Usage;
        let mut uncounted = request("p002", RequestRole::Measure, 100.0, Some(1.0));
        uncounted.cached_tokens = None;
        let requests = vec![
            request("p001", RequestRole::Prime, 99.0, Some(1.0)),
            request("p002", RequestRole::Prime, 99.0, Some(1.0)),
            request("p001", RequestRole::Measure, 100.0, Some(1.0)),
            failed("p001", ErrorKind::Http, "503 busy", Some(503)),
            failed("p001", ErrorKind::Timeout, "no answer in 2 s", None),
            failed("p001", ErrorKind::Http, "500 later", Some(500)),
            usage,
            uncounted,
            request("p001", RequestRole::Measure, 101.0, Some(1.0)),
        ];
        let d = RequestDigest::of(&requests);
        assert_eq!((d.recorded, d.prime), (9, 2));
        assert_eq!(d.token_sources, ["meta-info", "usage"]);
        // Points in the order of their first measured request, not of their priming ones.
        assert_eq!(d.points.keys().collect::<Vec<_>>(), ["p001", "p002"]);

        let p1 = d.point("p001").unwrap();
        assert_eq!((p1.measured, p1.errors, p1.done), (5, 3, 2));
        assert_eq!(
            p1.error_kinds.keys().collect::<Vec<_>>(),
            ["http", "timeout"]
        );
        let http = &p1.error_kinds["http"];
        assert_eq!(http.count, 2);
        // The first failure's words, not the last's.
        assert_eq!(
            (http.message.as_str(), http.status),
            ("503 busy", Some(503))
        );
        assert_eq!(p1.error_kinds["timeout"].status, None);
        assert_eq!(p1.done_prompt_tokens, Some(20));
        assert_eq!(p1.done_cached_tokens, Some(6));

        // A two-point request is measured but not part of the server's view; one request
        // without a cached count leaves the point's cached sum unknown, its prompt sum not.
        let p2 = d.point("p002").unwrap();
        assert_eq!((p2.measured, p2.errors, p2.done), (2, 0, 1));
        assert_eq!(p2.done_prompt_tokens, Some(10));
        assert_eq!(p2.done_cached_tokens, None);
        assert!(d.in_flight.is_empty(), "no origins, no timelines");
    }

    #[test]
    fn folds_requests_in_flight_of_the_points_given_an_origin() {
        let mut d = RequestDigest::with_timelines([("p001".to_string(), 100.0)]);
        for r in [
            request("p001", RequestRole::Measure, 100.0, Some(0.004)),
            request("p001", RequestRole::Measure, 100.002, Some(0.004)),
            // Priming, two-point and other points' requests are not the point's in flight.
            request("p001", RequestRole::Prime, 100.0, Some(0.004)),
            request("p001", RequestRole::TwoPointA, 100.0, Some(0.004)),
            request("p002", RequestRole::Measure, 100.0, Some(0.004)),
        ] {
            d.add(&r);
        }
        // Two requests over 1 ms bins: one in flight over [0, 2) ms, two over [2, 4) ms, one
        // over [4, 6) ms, then none.
        let series = d.in_flight["p001"].series();
        let at = |t: f64| {
            series
                .windows(2)
                .find(|w| w[0].0 <= t && t < w[1].0)
                .map(|w| w[0].1)
        };
        for (t, n) in [(0.0005, 1.0), (0.0025, 2.0), (0.0045, 1.0)] {
            let got = at(t).unwrap();
            assert!(
                (got - n).abs() < 1e-9,
                "at {t} s: {got}, not {n}: {series:?}"
            );
        }
        let (end, n) = *series.last().unwrap();
        assert!((end - 0.006).abs() < 1e-9 && n == 0.0, "{series:?}");
    }
}
