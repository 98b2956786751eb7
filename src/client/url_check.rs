//! What `validate` checks of `server.url`, `server.workers` and `telemetry.dcgm_url`: what
//! [`Client::new`] refuses when the run reads them (a scheme other than http, no host,
//! credentials in the URL), at the spec's own key.

use std::path::Path;

use servebench_model::spec::Check;
use servebench_model::spec::types::Experiment;
use servebench_model::spec::validate::{Problem, Target};

use super::{Client, ClientError};

/// [`Check`] of an external server's URL.
#[derive(Debug, Default)]
pub(crate) struct UrlCheck;

impl Check for UrlCheck {
    fn check(&self, experiment: &Experiment, _spec_dir: &Path) -> Vec<Problem> {
        let mut problems: Vec<Problem> = experiment
            .server
            .workers
            .iter()
            .enumerate()
            .filter_map(|(i, w)| match Client::new(w, None) {
                Err(ClientError::InvalidUrl { reason, .. }) => Some(Problem {
                    pointer: format!("/server/workers/{i}"),
                    target: Target::Value,
                    message: format!("`server.workers[{i}]` cannot be used: {reason}"),
                    hint: Some("write each worker as http://host:port".into()),
                }),
                _ => None,
            })
            .collect();
        let dcgm_problem =
            experiment
                .telemetry
                .dcgm_url
                .as_deref()
                .and_then(|url| match Client::new(url, None) {
                    Err(ClientError::InvalidUrl { reason, .. }) => Some(reason),
                    _ => bad_port(url),
                });
        if let Some(reason) = dcgm_problem {
            problems.push(Problem {
                pointer: "/telemetry/dcgm_url".into(),
                target: Target::Value,
                message: format!("`telemetry.dcgm_url` cannot be used: {reason}"),
                hint: Some("write the exporter's URL as http://host:9400/metrics".into()),
            });
        }
        if let Some(m) = &experiment.report.mlflow {
            let problem = match Client::new(&m.tracking_uri, None) {
                Err(ClientError::InvalidUrl { reason, .. }) => Some(reason),
                _ => bad_port(&m.tracking_uri),
            };
            if let Some(reason) = problem {
                problems.push(Problem {
                    pointer: "/report/mlflow/tracking_uri".into(),
                    target: Target::Value,
                    message: format!("`report.mlflow.tracking_uri` cannot be used: {reason}"),
                    hint: Some("write the tracking server as http://host:port; a token or password goes in MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD, in the environment".into()),
                });
            }
        }
        if !experiment.server.workers.is_empty() && experiment.server.url.is_none() {
            problems.push(Problem {
                pointer: "/server/workers".into(),
                target: Target::Key,
                message: "`server.workers` names the workers behind a router, and there is no `server.url`".into(),
                hint: Some("give the router as `server.url: http://host:port`".into()),
            });
        }
        let Some(url) = &experiment.server.url else {
            return problems;
        };
        let Err(ClientError::InvalidUrl { reason, .. }) = Client::new(url, None) else {
            return problems;
        };
        let hint = if reason.contains("user names and passwords") {
            "give the key as `server.args.api-key: ${NAME}` (sent as a bearer token), and the URL as http://host:port"
        } else {
            "write http://host:port, with a path prefix if the server has one"
        };
        problems.push(Problem {
            pointer: "/server/url".into(),
            target: Target::Value,
            // The URL itself is not repeated: it may hold a password.
            message: format!("`server.url` cannot be used: {reason}"),
            hint: Some(hint.into()),
        });
        problems
    }
}

/// Why `url`'s port cannot be connected to (`:0`, `:99999`, not a number); None when it has
/// none or a good one.
fn bad_port(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    // `[::1]:9400`: the port follows the bracket.
    let port = match host_port.rsplit_once(']') {
        Some((_, after)) => after.strip_prefix(':'),
        None => host_port.rsplit_once(':').map(|(_, p)| p),
    }?;
    match port.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => None,
        _ => Some(format!("port `{port}` is not one (1 to 65535)")),
    }
}

#[cfg(test)]
mod port_tests {
    use super::bad_port;

    #[test]
    fn a_url_s_port_is_one_a_connection_can_use() {
        assert_eq!(bad_port("http://gpu-box:9400/metrics"), None);
        assert_eq!(bad_port("http://gpu-box/metrics"), None);
        assert_eq!(bad_port("http://[::1]:9400/metrics"), None);
        assert!(bad_port("http://gpu-box:99999/metrics").is_some());
        assert!(bad_port("http://gpu-box:0/metrics").is_some());
        assert!(bad_port("http://gpu-box:94x/metrics").is_some());
    }
}
