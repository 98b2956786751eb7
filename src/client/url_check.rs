//! What `validate` checks of `server.url`, `server.workers` and `telemetry.dcgm_url`: what
//! [`Client::new`] refuses when the run reads them (a scheme other than http, no host,
//! credentials in the URL), at the spec's own key.

use std::path::Path;

use crate::spec::Check;
use crate::spec::types::Experiment;
use crate::spec::validate::{Problem, Target};

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
        if let Some(url) = &experiment.telemetry.dcgm_url
            && let Err(ClientError::InvalidUrl { reason, .. }) = Client::new(url, None)
        {
            problems.push(Problem {
                pointer: "/telemetry/dcgm_url".into(),
                target: Target::Value,
                message: format!("`telemetry.dcgm_url` cannot be used: {reason}"),
                hint: Some("write the exporter's URL as http://host:9400/metrics".into()),
            });
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
