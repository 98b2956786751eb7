//! MLflow's REST API 2.0, the calls servebench makes (`mlflow/server/handlers.py`): an
//! experiment by name (created when missing), runs found by a tag, runs created, logged in
//! batches within MLflow's limits, updated, and artifacts put through the server's proxied
//! artifact route (`--serve-artifacts`, the default since MLflow 2.0).

use std::time::Duration;

use bytes::Bytes;
use hyper::header::{self, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::content::{self, Content};
use super::error::{MlflowError, PASSWORD_ENV, TOKEN_ENV, USER_ENV};
use crate::client::{Client, ClientError};

/// Each call's limit.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// MLflow's `MAX_METRICS_PER_BATCH` and `MAX_PARAMS_TAGS_PER_BATCH` per `log-batch`.
const METRICS_PER_BATCH: usize = 1000;
const PARAMS_TAGS_PER_BATCH: usize = 100;
/// Runs asked for per page of `runs/search` (MLflow's most is 50,000): a page of runs with
/// their params, tags and metrics stays well within the client's 16 MiB answer budget.
const SEARCH_PAGE: usize = 200;

/// A run already in MLflow, as `runs/search` gives it.
#[derive(Debug, Clone)]
pub(super) struct Found {
    pub id: String,
    /// Its `servebench.point` tag: None for a run's parent.
    pub point: Option<String>,
    pub artifact_uri: String,
}

/// One tracking server.
pub(super) struct Api {
    client: Client,
    /// The tracking URI as given (what messages name).
    pub server: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Api {
    /// A client of the server at `uri`, with the environment's credentials (each also handed
    /// to the redactor, so no message or file shows it).
    pub(super) fn new(uri: &str) -> Result<Api, MlflowError> {
        let client = Client::new(uri, None).map_err(|e| MlflowError::Uri {
            uri: uri.to_string(),
            reason: match e {
                ClientError::InvalidUrl { reason, .. } => reason,
                e => e.to_string(),
            },
        })?;
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let auth = match (env(TOKEN_ENV), env(USER_ENV), env(PASSWORD_ENV)) {
            (Some(token), _, _) => Some((format!("Bearer {token}"), vec![token])),
            (None, Some(user), Some(password)) => {
                let pair = format!("{user}:{password}");
                let basic = format!("Basic {}", base64(pair.as_bytes()));
                Some((basic, vec![password, pair]))
            }
            _ => None,
        };
        let mut headers = Vec::new();
        if let Some((value, secrets)) = auth {
            servebench_model::redact::install(servebench_model::redact::Redactor::new(secrets));
            let mut v = HeaderValue::from_str(&value).map_err(|_| MlflowError::Uri {
                uri: uri.to_string(),
                reason: format!(
                    "the credentials in {TOKEN_ENV} or {USER_ENV}/{PASSWORD_ENV} are not a valid HTTP header value"
                ),
            })?;
            v.set_sensitive(true);
            headers.push((header::AUTHORIZATION, v));
        }
        Ok(Api {
            client,
            server: uri.trim_end_matches('/').to_string(),
            headers,
        })
    }

    /// The experiment named `name`'s id, created when missing.
    pub(super) async fn experiment(&self, name: &str) -> Result<String, MlflowError> {
        let by_name = format!(
            "/api/2.0/mlflow/experiments/get-by-name?experiment_name={}",
            encode(name)
        );
        match self.call(hyper::Method::GET, &by_name, None).await {
            Ok(v) => {
                let e = &v["experiment"];
                if e["lifecycle_stage"] == "deleted" {
                    return Err(MlflowError::DeletedExperiment {
                        server: self.server.clone(),
                        name: name.to_string(),
                    });
                }
                field(self, &by_name, &e["experiment_id"])
            }
            Err(MlflowError::Refused { code, .. }) if code == "RESOURCE_DOES_NOT_EXIST" => {
                let path = "/api/2.0/mlflow/experiments/create";
                match self.post(path, json!({ "name": name })).await {
                    Ok(v) => field(self, path, &v["experiment_id"]),
                    // Another log made it meanwhile: it is there now.
                    Err(MlflowError::Refused { code, .. }) if code == "RESOURCE_ALREADY_EXISTS" => {
                        let v = self.call(hyper::Method::GET, &by_name, None).await?;
                        field(self, &by_name, &v["experiment"]["experiment_id"])
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Every active run of the experiment whose `servebench.run_id` tag is `run_id`.
    pub(super) async fn find(
        &self,
        experiment: &str,
        run_id: &str,
    ) -> Result<Vec<Found>, MlflowError> {
        let path = "/api/2.0/mlflow/runs/search";
        let mut found = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut body = json!({
                "experiment_ids": [experiment],
                "filter": format!("tags.`{}` = '{run_id}'", content::RUN_ID_TAG),
                "max_results": SEARCH_PAGE,
            });
            if let Some(t) = &token {
                body["page_token"] = json!(t);
            }
            let v = self.post(path, body).await?;
            for r in v["runs"].as_array().into_iter().flatten() {
                let tags = r["data"]["tags"].as_array();
                let point = tags
                    .into_iter()
                    .flatten()
                    .find(|t| t["key"] == content::POINT_TAG)
                    .and_then(|t| t["value"].as_str())
                    .map(str::to_string);
                found.push(Found {
                    id: field(self, path, &r["info"]["run_id"])?,
                    point,
                    artifact_uri: r["info"]["artifact_uri"].as_str().unwrap_or("").to_string(),
                });
            }
            match v["next_page_token"].as_str() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => return Ok(found),
            }
        }
    }

    /// Creates a run for `c` (under `parent` for a point): its id and artifact URI.
    pub(super) async fn create(
        &self,
        experiment: &str,
        c: &Content,
        parent: Option<&str>,
    ) -> Result<Found, MlflowError> {
        let path = "/api/2.0/mlflow/runs/create";
        let mut tags =
            vec![json!({ "key": content::RUN_ID_TAG, "value": c.tags[content::RUN_ID_TAG] })];
        if let Some(p) = parent {
            tags.push(json!({ "key": content::PARENT_TAG, "value": p }));
        }
        let v = self
            .post(
                path,
                json!({
                    "experiment_id": experiment,
                    "run_name": c.name,
                    "start_time": c.start_ms,
                    "tags": tags,
                }),
            )
            .await?;
        let info = &v["run"]["info"];
        Ok(Found {
            id: field(self, path, &info["run_id"])?,
            point: None,
            artifact_uri: info["artifact_uri"].as_str().unwrap_or("").to_string(),
        })
    }

    /// Logs `c`'s params, tags and metrics to run `id` in batches within MLflow's limits,
    /// then sets its name, status and end time.
    pub(super) async fn log(&self, id: &str, c: &Content, status: &str) -> Result<(), MlflowError> {
        let path = "/api/2.0/mlflow/runs/log-batch";
        let pairs = |m: &indexmap::IndexMap<String, String>| -> Vec<Value> {
            m.iter()
                .map(|(k, v)| json!({ "key": k, "value": v }))
                .collect()
        };
        let at = c.end_ms.unwrap_or(c.start_ms);
        let metrics: Vec<Value> = c
            .metrics
            .iter()
            .map(|(k, v)| json!({ "key": k, "value": v, "timestamp": at, "step": 0 }))
            .collect();
        for chunk in pairs(&c.params).chunks(PARAMS_TAGS_PER_BATCH) {
            self.post(path, json!({ "run_id": id, "params": chunk }))
                .await?;
        }
        for chunk in pairs(&c.tags).chunks(PARAMS_TAGS_PER_BATCH) {
            self.post(path, json!({ "run_id": id, "tags": chunk }))
                .await?;
        }
        for chunk in metrics.chunks(METRICS_PER_BATCH) {
            self.post(path, json!({ "run_id": id, "metrics": chunk }))
                .await?;
        }
        let mut update = json!({ "run_id": id, "status": status, "run_name": c.name });
        if let Some(end) = c.end_ms {
            update["end_time"] = json!(end);
        }
        self.post("/api/2.0/mlflow/runs/update", update).await?;
        Ok(())
    }

    /// Puts `bytes` as the artifact `name` of the run whose artifacts are at `root` (the
    /// path below `mlflow-artifacts:/`).
    pub(super) async fn put_artifact(
        &self,
        root: &str,
        name: &str,
        bytes: Bytes,
    ) -> Result<(), MlflowError> {
        let path = format!(
            "/api/2.0/mlflow-artifacts/artifacts/{}",
            encode_path(&format!("{root}/{name}"))
        );
        let mut headers = self.headers.clone();
        headers.push((
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        ));
        let (status, body) = self
            .client
            .send(hyper::Method::PUT, &path, bytes, &headers, CALL_TIMEOUT)
            .await
            .map_err(|e| self.unreachable(&path, e))?;
        self.judge(&path, status, &body).map(|_| ())
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value, MlflowError> {
        self.call(hyper::Method::POST, path, Some(body)).await
    }

    async fn call(
        &self,
        method: hyper::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, MlflowError> {
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let (status, answer) = self
            .client
            .send(method, path, body, &self.headers, CALL_TIMEOUT)
            .await
            .map_err(|e| self.unreachable(path, e))?;
        self.judge(path, status, &answer)
    }

    fn unreachable(&self, path: &str, e: ClientError) -> MlflowError {
        MlflowError::Unreachable {
            server: self.server.clone(),
            call: endpoint(path),
            message: match e {
                ClientError::Request { message, .. } => message,
                e => e.to_string(),
            },
        }
    }

    /// A 2xx answer's JSON (`{}` when empty), else the server's refusal with MLflow's
    /// `error_code` and `message`.
    fn judge(&self, path: &str, status: u16, body: &[u8]) -> Result<Value, MlflowError> {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        if (200..300).contains(&status) {
            return match parsed {
                Some(v) => Ok(v),
                None if body.iter().all(u8::is_ascii_whitespace) => Ok(json!({})),
                None => Err(MlflowError::NotMlflow {
                    server: self.server.clone(),
                    call: endpoint(path),
                    status,
                    body: snippet(body),
                }),
            };
        }
        let (code, message) = match &parsed {
            Some(v) if v["error_code"].is_string() => (
                v["error_code"].as_str().unwrap_or("").to_string(),
                v["message"].as_str().unwrap_or("").to_string(),
            ),
            _ => (String::new(), snippet(body)),
        };
        Err(MlflowError::Refused {
            server: self.server.clone(),
            call: endpoint(path),
            status,
            code,
            message,
        })
    }
}

/// A JSON string field of an answer, or the answer named as not MLflow's.
fn field(api: &Api, path: &str, v: &Value) -> Result<String, MlflowError> {
    match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        _ => Err(MlflowError::NotMlflow {
            server: api.server.clone(),
            call: endpoint(path),
            status: 200,
            body: format!("no id in the answer (found {v})"),
        }),
    }
}

/// The call a path names in messages: its method's path without the query.
fn endpoint(path: &str) -> String {
    path.split('?').next().unwrap_or(path).to_string()
}

/// At most 300 characters of an answer, on one line.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    servebench_model::text::cut_words(&one_line, 300)
}

/// Percent-encodes a query value: everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    const KEEP: &percent_encoding::AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(text, KEEP).to_string()
}

/// Percent-encodes a path, keeping its `/`.
fn encode_path(path: &str) -> String {
    path.split('/').map(encode).collect::<Vec<_>>().join("/")
}

/// Standard base64 with padding (HTTP Basic credentials, RFC 7617).
fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_padded_base64() {
        // RFC 7617's example.
        assert_eq!(
            base64(b"Aladdin:open sesame"),
            "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }

    #[test]
    fn names_are_percent_encoded() {
        assert_eq!(encode("my exp/1"), "my%20exp%2F1");
        assert_eq!(encode_path("1/ab c/report.md"), "1/ab%20c/report.md");
    }
}
