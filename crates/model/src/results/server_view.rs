//! The server's own view of a point: each `/metrics` scrape (`metrics.jsonl`) and what the
//! point's record keeps of them (`PointRecord::server`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One scrape of the server's `/metrics` during a point: a line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsScrape {
    /// The point's id.
    pub point: String,
    /// The round within the point.
    pub round: u32,
    /// Unix seconds when the answer arrived.
    pub t: f64,
    /// `start` (before the round's first measured request), `tick` (every interval while
    /// requests run) or `end` (after the last one finished).
    pub at: String,
    /// Metric name -> value, summed over label sets; histogram buckets left out. NaN and
    /// the infinities (legal in the exposition format) are written as the strings `"NaN"`,
    /// `"+Inf"` and `"-Inf"`; a `null` (what runs before this wrote for them) reads as NaN.
    #[serde(with = "exposition_values")]
    pub values: BTreeMap<String, f64>,
    /// Why this scrape gave no values (the request failed, another status, a body that is
    /// not the text format or larger than a scrape's budget); None when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the scrape's budget left out (names past the most kept, names too long).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// The worker behind a router this scrape is of (`server.workers`); None: the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

impl MetricsScrape {
    /// Whether the server answered this scrape.
    pub fn answered(&self) -> bool {
        self.error.is_none()
    }
}

/// The values of a scrape, each a JSON number, or a string for NaN and the infinities
/// (JSON has no such numbers: `serde_json` writes them as `null`, which no reader of an
/// `f64` accepts).
mod exposition_values {
    use std::collections::BTreeMap;

    use serde::de::{self, Deserializer, MapAccess, Visitor};
    use serde::ser::{SerializeMap, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        values: &BTreeMap<String, f64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(values.len()))?;
        for (k, v) in values {
            match *v {
                v if v.is_nan() => map.serialize_entry(k, "NaN")?,
                f64::INFINITY => map.serialize_entry(k, "+Inf")?,
                f64::NEG_INFINITY => map.serialize_entry(k, "-Inf")?,
                v => map.serialize_entry(k, &v)?,
            }
        }
        map.end()
    }

    /// One value as written: a number, one of the strings, or `null`.
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Written {
        Number(f64),
        Text(String),
        Null(()),
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, f64>, D::Error> {
        struct Values;
        impl<'de> Visitor<'de> for Values {
            type Value = BTreeMap<String, f64>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of metric names to numbers (or \"NaN\", \"+Inf\", \"-Inf\")")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = m.next_entry::<String, Written>()? {
                    let v = match v {
                        Written::Number(x) => x,
                        Written::Null(()) => f64::NAN,
                        Written::Text(t) => match t.as_str() {
                            "NaN" => f64::NAN,
                            "+Inf" | "Inf" => f64::INFINITY,
                            "-Inf" => f64::NEG_INFINITY,
                            other => {
                                return Err(de::Error::custom(format!(
                                    "metric {k}: {other:?} is not a number"
                                )));
                            }
                        },
                    };
                    out.insert(k, v);
                }
                Ok(out)
            }
        }
        d.deserialize_map(Values)
    }
}

/// A gauge over a point's scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GaugeStat {
    /// Mean over the scrapes of the measured window.
    pub mean: f64,
    /// Largest scraped value.
    pub max: f64,
}

/// What the server reported over a point's measured window (its rounds' start-to-end
/// scrapes), in servebench's words whatever the engine's names.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ServerView {
    /// Whose names were read: `sglang`, `vllm` or `llamacpp`.
    pub engine: String,
    /// Scrapes taken within the window.
    pub scrapes: usize,
    /// Requests running (`sglang:num_running_reqs`, `vllm:num_requests_running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<GaugeStat>,
    /// Requests waiting (`sglang:num_queue_reqs`, `vllm:num_requests_waiting`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<GaugeStat>,
    /// KV pool use, 0..1 (`sglang:token_usage`, `vllm:kv_cache_usage_perc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage: Option<GaugeStat>,
    /// Generated tokens per second as the server counts them: the generation counter's
    /// increase over the window's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gen_tok_s: Option<f64>,
    /// Prompt tokens served from the cache / prompt tokens, over the window (counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit_rate: Option<f64>,
    /// Prompt tokens the server counted in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<f64>,
    /// Cached prompt tokens the server counted in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<f64>,
    /// Cached prompt tokens the server counted in the window by the cache tier that served
    /// them, as the engine names its tiers (SGLang's `cache_source`: `device`, `host`,
    /// `storage`; vLLM's `source`: `device`, `host`, `p2p`, `disk`, ...). Only the tiers the
    /// engine labelled: a tier it never named is absent, not 0; empty where the engine
    /// counts no tiers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cached_by_tier: BTreeMap<String, f64>,
    /// Generated tokens the server counted in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_tokens: Option<f64>,
    /// Requests the server finished in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<f64>,
    /// Speculative decoding's mean accept length over the window, from the server's
    /// counters: 1 + accepted draft tokens / drafts (vLLM's `spec_decode_num_*` counters and
    /// its definition, the bonus token included); None where the server has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accept_length: Option<f64>,
    /// A disaggregated worker's stages, SGLang's `sglang:per_stage_req_latency_seconds{stage}`
    /// (`prefill_bootstrap`, `prefill_forward`, `prefill_transfer_kv_cache`, `decode_prepare`,
    /// `decode_bootstrap`, `decode_transferred`, `decode_waiting`, ...): mean seconds a request
    /// spent in each over the window, and how many requests passed it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stages: BTreeMap<String, StageStat>,
    /// A prefill worker's KV transfers over the window (SGLang's `sglang:kv_transfer_*`
    /// histograms); None where it made none or exports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer: Option<KvTransferStat>,
    /// Scrapes the server did not answer (or answered with something unreadable).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_scrapes: usize,
    /// Why the first of them failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape_error: Option<String>,
    /// What the scrapes' budget left out, and where the counters could not be compared (a
    /// restarted server), in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One stage of a disaggregated request, over a point's window.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct StageStat {
    /// Requests observed in the stage.
    pub requests: f64,
    /// Mean seconds each spent there.
    pub mean_s: f64,
}

/// A prefill worker's KV transfers over a point's window, means per transfer.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct KvTransferStat {
    pub transfers: f64,
    /// `sglang:kv_transfer_latency_ms`: from the request's entry into the inflight queue to
    /// the transfer's end.
    pub latency_ms: Option<f64>,
    /// `sglang:kv_transfer_total_mb` (MiB).
    pub mb: Option<f64>,
    /// `sglang:kv_transfer_speed_gb_s` (GiB/s).
    pub gb_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(values: &[(&str, f64)]) -> MetricsScrape {
        MetricsScrape {
            point: "p001".into(),
            round: 0,
            t: 1.5,
            at: "tick".into(),
            values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            error: None,
            cut: None,
            worker: None,
        }
    }

    #[test]
    fn nan_and_infinities_are_written_and_read_back_losslessly() {
        let s = scrape(&[
            ("sglang:fwd_occupancy", f64::NAN),
            ("up", f64::INFINITY),
            ("down", f64::NEG_INFINITY),
            ("n", 2.5),
        ]);
        let line = serde_json::to_string(&s).unwrap();
        assert!(line.contains(r#""sglang:fwd_occupancy":"NaN""#), "{line}");
        assert!(line.contains(r#""up":"+Inf""#) && line.contains(r#""down":"-Inf""#));
        let back: MetricsScrape = serde_json::from_str(&line).unwrap();
        assert!(back.values["sglang:fwd_occupancy"].is_nan());
        assert_eq!(back.values["up"], f64::INFINITY);
        assert_eq!(back.values["down"], f64::NEG_INFINITY);
        assert_eq!(back.values["n"], 2.5);
    }

    #[test]
    fn a_null_written_by_an_older_run_reads_as_nan() {
        let line = r#"{"point":"p001","round":0,"t":1.0,"at":"start","values":{"sglang:fwd_occupancy":null,"x":1}}"#;
        let s: MetricsScrape = serde_json::from_str(line).unwrap();
        assert!(s.values["sglang:fwd_occupancy"].is_nan());
        assert!(s.answered());
        assert!(serde_json::from_str::<MetricsScrape>(&line.replace("null", r#""many""#)).is_err());
    }
}
