//! STUB until the client branch lands.
use crate::results::records::*;
use crate::spec::types::Api;
use std::time::Duration;
pub struct GenerationRequest {
    pub api: Api,
    pub prompt: String,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    pub temperature: f64,
    pub model: Option<String>,
}
pub struct Measured {
    pub sent_at: f64,
    pub chunks: Vec<Chunk>,
    pub end_s: Option<f64>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub token_source: TokenSource,
    pub finish_reason: Option<String>,
    pub error: Option<RequestError>,
    pub text: String,
}
impl Measured {
    #[allow(clippy::too_many_arguments)]
    pub fn into_record(
        self,
        _point: &str,
        _round: u32,
        _index: u32,
        _role: RequestRole,
        _api: Api,
        _max_tokens: u32,
        _requested_prompt_tokens: Option<u64>,
    ) -> RequestRecord {
        todo!()
    }
}
#[derive(Debug, thiserror::Error)]
#[error("client")]
pub struct ClientError;
pub enum FlushOutcome {
    Flushed,
    Busy(String),
}
#[derive(Clone)]
pub struct Client;
impl Client {
    pub fn new(_base_url: &str, _api_key: Option<String>) -> Result<Client, ClientError> {
        todo!()
    }
    pub async fn stream(&self, _req: &GenerationRequest, _timeout: Duration) -> Measured {
        todo!()
    }
    pub async fn count_prompt_tokens(
        &self,
        _api: Api,
        _prompt: &str,
        _model: Option<&str>,
    ) -> Result<(u64, Option<u64>), ClientError> {
        todo!()
    }
    pub async fn flush_cache(&self) -> Result<FlushOutcome, ClientError> {
        todo!()
    }
    pub async fn health(&self) -> Result<u16, ClientError> {
        todo!()
    }
    pub async fn get_json(&self, _path: &str) -> Result<serde_json::Value, ClientError> {
        todo!()
    }
}
