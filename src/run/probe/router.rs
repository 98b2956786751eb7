//! The router's own counters: a launched deployment's router read on its Prometheus listener
//! before and after every round, each counter's increase over the point kept in its record
//! (`router`), beside the workers' counts and the client's. The names are smg's (read from
//! its `observability/metrics.rs` and the 1.13.0 binary): each policy's decision branches
//! (`smg_<policy>_policy_branch_total{branch}`), the cache-aware prefix match ratio (a
//! histogram) and the requests it sent each worker. A name the router does not export is
//! recorded as absent, never as zero.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;

use crate::client::{Client, prometheus};
use servebench_model::results::records::{PointRecord, RouterCounter, RouterView};
use servebench_model::spec::deployment::{RouterKind, RouterPolicy};
use servebench_model::spec::types::Experiment;
use servebench_report::measure::server_view::Finished;

use super::{PointEnd, Probe, RoundStart};

/// Most series kept from one scrape (smg exports a few per worker and per branch).
const MAX_SERIES: usize = 512;

/// smg's cache-aware prefix match ratio, a histogram (its `_sum` and `_count` are read).
const MATCH_RATIO: &str = "smg_cache_aware_match_ratio";
/// smg's requests by the worker it sent them to.
const WORKER_REQUESTS: &str = "smg_worker_requests_total";

/// Whether a sample of `name` is one servebench reads.
fn read(name: &str) -> bool {
    (name.starts_with("smg_") && name.ends_with("_policy_branch_total"))
        || name == format!("{MATCH_RATIO}_sum")
        || name == format!("{MATCH_RATIO}_count")
        || name == WORKER_REQUESTS
}

/// The names servebench expects from a router of `kind` running `policy`: each one missing
/// from every scrape is said to be absent.
fn expected(kind: RouterKind, policy: RouterPolicy) -> Vec<String> {
    if kind != RouterKind::Smg {
        return Vec::new();
    }
    let mut out = vec![format!("smg_{policy}_policy_branch_total")];
    if policy == RouterPolicy::CacheAware {
        out.push(MATCH_RATIO.to_string());
    }
    out.push(WORKER_REQUESTS.to_string());
    out
}

/// One scrape's series servebench reads: (name, labels as `k=v,k=v`) to value.
type Sample = BTreeMap<(String, String), f64>;

/// The series of `text` that [`read`] keeps.
fn sample(text: &str) -> Result<Sample, prometheus::ScrapeError> {
    Ok(prometheus::series(text, read, MAX_SERIES)?
        .into_iter()
        .map(|s| {
            // The model label names the model path on every worker's series: nothing to tell.
            let labels: Vec<String> = s
                .labels
                .iter()
                .filter(|(k, _)| k != "model")
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            ((s.name, labels.join(",")), s.value)
        })
        .collect())
}

/// Adds what each series grew by from `start` to `end` into `into`. A series missing at the
/// start counts from 0 (an exporter shows a counter once it first counts); one that fell
/// (the router restarted) counts from 0 again.
fn add_increase(into: &mut Sample, start: &Sample, end: &Sample) {
    for (k, v) in end {
        let from = start.get(k).copied().unwrap_or(0.0);
        let grew = if *v >= from { v - from } else { *v };
        *into.entry(k.clone()).or_default() += grew;
    }
}

/// The view of the point: every series read with its increase, and the expected names none
/// of whose series was seen.
fn view(
    url: &str,
    increase: &Sample,
    seen: &std::collections::BTreeSet<String>,
    expected: &[String],
    (scrapes, failed, error): (usize, usize, Option<String>),
) -> RouterView {
    let absent = expected
        .iter()
        .filter(|name| {
            !seen
                .iter()
                .any(|s| s == *name || s.strip_prefix(name.as_str()).is_some_and(|r| r == "_sum"))
        })
        .cloned()
        .collect();
    RouterView {
        url: url.to_string(),
        scrapes,
        failed_scrapes: failed,
        scrape_error: error,
        counters: increase
            .iter()
            .map(|((name, labels), v)| RouterCounter {
                name: name.clone(),
                labels: labels.clone(),
                increase: *v,
            })
            .collect(),
        absent: if scrapes > 0 { absent } else { Vec::new() },
    }
}

/// The probe: the router's listener scraped at each round's start and end.
pub(crate) struct RouterScrape {
    url: String,
    client: Option<Client>,
    expected: Vec<String>,
    start: Option<Sample>,
    increase: Sample,
    /// Every name seen in an answered scrape.
    seen: std::collections::BTreeSet<String>,
    scrapes: usize,
    failed: usize,
    error: Option<String>,
}

impl RouterScrape {
    pub(crate) fn new(url: &str, exp: &Experiment) -> RouterScrape {
        let expected = exp
            .server
            .deployment
            .as_ref()
            .map(|d| expected(d.router.kind, d.router.policy))
            .unwrap_or_default();
        let client = Client::new(url, None);
        RouterScrape {
            url: format!("{}/metrics", url.trim_end_matches('/')),
            error: client.as_ref().err().map(|e| e.to_string()),
            client: client.ok(),
            expected,
            start: None,
            increase: Sample::new(),
            seen: Default::default(),
            scrapes: 0,
            failed: 0,
        }
    }

    /// One scrape: its sample, or None (counted and its cause kept).
    async fn take(&mut self) -> Option<Sample> {
        let client = self.client.as_ref()?;
        let got = prometheus::fetch(client, "/metrics", prometheus::SCRAPE_TIMEOUT)
            .await
            .and_then(|text| sample(&text));
        match got {
            Ok(s) => {
                self.scrapes += 1;
                self.seen.extend(s.keys().map(|(n, _)| n.clone()));
                Some(s)
            }
            Err(e) => {
                self.failed += 1;
                self.error = Some(e.to_string());
                None
            }
        }
    }
}

impl Probe for RouterScrape {
    fn open<'a>(&'a mut self, _round: RoundStart<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.start = self.take().await;
        })
    }

    fn close<'a>(&'a mut self, _completed: usize, _: &'a mut Finished) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let start = self.start.take();
            let end = self.take().await;
            // A round with either scrape failed adds nothing: its increase is not known.
            if let (Some(start), Some(end)) = (start, end) {
                add_increase(&mut self.increase, &start, &end);
            }
        })
    }

    fn fill(self: Box<Self>, _end: &PointEnd<'_>, record: &mut PointRecord) {
        record.router = Some(view(
            &self.url,
            &self.increase,
            &self.seen,
            &self.expected,
            (self.scrapes, self.failed, self.error),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// smg 1.13.0's own `/metrics`, captured in the real-engine tier (tests/fixtures/smg).
    const CONSISTENT: &str =
        include_str!("../../../tests/fixtures/smg/metrics-1.13.0-consistent_hashing.txt");
    const CACHE_AWARE: &str =
        include_str!("../../../tests/fixtures/smg/metrics-1.13.0-cache_aware.txt");
    const ROUND_ROBIN: &str =
        include_str!("../../../tests/fixtures/smg/metrics-1.13.0-round_robin.txt");

    fn key(name: &str, labels: &str) -> (String, String) {
        (name.to_string(), labels.to_string())
    }

    fn point(text: &str, policy: RouterPolicy) -> RouterView {
        let end = sample(text).unwrap();
        let mut increase = Sample::new();
        add_increase(&mut increase, &Sample::new(), &end);
        let seen = end.keys().map(|(n, _)| n.clone()).collect();
        view(
            "http://127.0.0.1:9/metrics",
            &increase,
            &seen,
            &expected(RouterKind::Smg, policy),
            (2, 0, None),
        )
    }

    #[test]
    fn smg_s_branches_and_requests_per_worker_are_read_from_its_real_metrics() {
        let s = sample(CONSISTENT).unwrap();
        // Six requests over three routing keys: every one hashed by its key, 4 and 2 per
        // worker (the capture's own counts).
        assert_eq!(
            s.get(&key(
                "smg_consistent_hashing_policy_branch_total",
                "branch=routing_key_hit"
            )),
            Some(&6.0)
        );
        assert_eq!(
            s.get(&key(
                "smg_worker_requests_total",
                "worker=http://127.0.0.1:31101"
            )),
            Some(&4.0)
        );
        assert_eq!(
            s.get(&key(
                "smg_worker_requests_total",
                "worker=http://127.0.0.1:31102"
            )),
            Some(&2.0)
        );
        // Nothing else of its 400 lines is read (gauges, HTTP counts, retries by endpoint).
        assert_eq!(s.len(), 3, "{s:?}");
        let v = point(CONSISTENT, RouterPolicy::ConsistentHashing);
        assert!(v.absent.is_empty(), "{v:?}");
    }

    #[test]
    fn the_cache_aware_match_ratio_is_read_as_its_sum_and_count() {
        let s = sample(CACHE_AWARE).unwrap();
        assert_eq!(
            s.get(&key(
                "smg_cache_aware_policy_branch_total",
                "branch=tree_match"
            )),
            Some(&5.0)
        );
        assert_eq!(
            s.get(&key("smg_cache_aware_match_ratio_count", "")),
            Some(&6.0)
        );
        let sum = s[&key("smg_cache_aware_match_ratio_sum", "")];
        assert!((sum - 4.956_521_739_130_435).abs() < 1e-12, "{sum}");
        let v = point(CACHE_AWARE, RouterPolicy::CacheAware);
        assert!(
            v.absent.is_empty(),
            "the histogram counts as exported: {v:?}"
        );
    }

    #[test]
    fn a_policy_without_a_branch_counter_is_said_absent_not_zero() {
        // smg 1.13.0 counts no branches for round robin.
        let v = point(ROUND_ROBIN, RouterPolicy::RoundRobin);
        assert_eq!(v.absent, ["smg_round_robin_policy_branch_total"]);
        assert!(
            v.counters
                .iter()
                .all(|c| !c.name.starts_with("smg_round_robin")),
            "{v:?}"
        );
        assert_eq!(
            v.counters
                .iter()
                .filter(|c| c.name == WORKER_REQUESTS)
                .map(|c| c.increase)
                .sum::<f64>(),
            6.0
        );
        // No answered scrape: nothing is said absent (it was not looked at).
        let unread = view(
            "u",
            &Sample::new(),
            &Default::default(),
            &["x".into()],
            (0, 2, None),
        );
        assert!(unread.absent.is_empty());
    }

    #[test]
    fn an_increase_counts_from_zero_for_a_new_series_and_after_a_restart() {
        let s = |pairs: &[(&str, f64)]| -> Sample {
            pairs.iter().map(|(n, v)| (key(n, ""), *v)).collect()
        };
        let mut inc = Sample::new();
        // a grew 10 -> 15; b appeared at 3; c fell 9 -> 2 (restarted: 2 since).
        add_increase(
            &mut inc,
            &s(&[("a", 10.0), ("c", 9.0)]),
            &s(&[("a", 15.0), ("b", 3.0), ("c", 2.0)]),
        );
        add_increase(&mut inc, &s(&[("a", 15.0)]), &s(&[("a", 16.0)]));
        assert_eq!(inc, s(&[("a", 6.0), ("b", 3.0), ("c", 2.0)]));
    }

    #[test]
    fn a_bad_metrics_text_is_an_error_with_its_line() {
        let e = sample("ok 1\n{bad} 2\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
