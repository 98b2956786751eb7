//! What `validate` checks of `server.url`: what [`Client::new`] refuses when the run attaches
//! (a scheme other than http, no host, credentials in the URL), at the spec's `server.url`.

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
        let Some(url) = &experiment.server.url else {
            return Vec::new();
        };
        let Err(ClientError::InvalidUrl { reason, .. }) = Client::new(url, None) else {
            return Vec::new();
        };
        let hint = if reason.contains("user names and passwords") {
            "give the key as `server.args.api-key: ${NAME}` (sent as a bearer token), and the URL as http://host:port"
        } else {
            "write http://host:port, with a path prefix if the server has one"
        };
        vec![Problem {
            pointer: "/server/url".into(),
            target: Target::Value,
            // The URL itself is not repeated: it may hold a password.
            message: format!("`server.url` cannot be used: {reason}"),
            hint: Some(hint.into()),
        }]
    }
}
