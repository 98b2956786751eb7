//! A small blocking HTTP/1.1 client: one connection per request (`Connection: close`), every
//! header kept as the server sent it, chunked bodies decoded, SSE events split with the time
//! each one arrived. The real-engine tests hold servers to each other with it; the
//! simulator's tests use it as any client would.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A response as a client sees it.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names lower-cased, values as sent, in order.
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// SSE events' data (after `data: `), with seconds from the request's last byte.
    pub events: Vec<(f64, String)>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::String(self.body.clone()))
    }

    /// The events' data parsed as JSON (`[DONE]` left out).
    pub fn chunks(&self) -> Vec<Value> {
        self.events
            .iter()
            .filter(|(_, d)| d != "[DONE]")
            .map(|(_, d)| serde_json::from_str(d).unwrap_or(Value::String(d.clone())))
            .collect()
    }

    pub fn done(&self) -> bool {
        self.events.last().is_some_and(|(_, d)| d == "[DONE]")
    }
}

pub fn get(base: &str, path: &str) -> std::io::Result<Response> {
    request("GET", base, path, None)
}

pub fn post(base: &str, path: &str, body: &Value) -> std::io::Result<Response> {
    request("POST", base, path, Some(body))
}

/// Sends one request on a new connection and reads the whole response.
pub fn request(
    method: &str,
    base: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<Response> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    send(method, base, path, body.as_bytes())
}

/// A POST of `body` as it is (malformed JSON included), typed as JSON.
pub fn request_raw(base: &str, path: &str, body: &[u8]) -> std::io::Result<Response> {
    send("POST", base, path, body)
}

fn send(method: &str, base: &str, path: &str, body: &[u8]) -> std::io::Result<Response> {
    let hostport = base.trim_start_matches("http://").trim_end_matches('/');
    let mut s = TcpStream::connect(hostport)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\nAccept: */*\r\n"
    );
    if method == "POST" {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let sent = Instant::now();
    // Read raw bytes with arrival times; parse after.
    let mut raw = Vec::new();
    let mut arrivals: Vec<(usize, f64)> = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                arrivals.push((raw.len(), sent.elapsed().as_secs_f64()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !raw.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    parse(&raw, &arrivals)
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

fn parse(raw: &[u8], arrivals: &[(usize, f64)]) -> std::io::Result<Response> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    // The body, each byte with the offset it had in `raw` (for its arrival time).
    let mut body: Vec<u8> = Vec::new();
    let mut offsets: Vec<usize> = Vec::new();
    let mut at = end + 4;
    if chunked {
        while at < raw.len() {
            let line_end = raw[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .map(|p| at + p)
                .ok_or_else(|| bad("cut chunk size"))?;
            let size_text = String::from_utf8_lossy(&raw[at..line_end]);
            let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
                .map_err(|_| bad("bad chunk size"))?;
            at = line_end + 2;
            if size == 0 {
                break;
            }
            let stop = (at + size).min(raw.len());
            body.extend_from_slice(&raw[at..stop]);
            offsets.extend(at..stop);
            at = stop + 2;
        }
    } else {
        body.extend_from_slice(&raw[at..]);
        offsets.extend(at..raw.len());
    }
    let time_of = |raw_offset: usize| {
        arrivals
            .iter()
            .find(|(len, _)| *len > raw_offset)
            .map_or(0.0, |(_, t)| *t)
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let mut events = Vec::new();
    let sse = headers
        .iter()
        .any(|(k, v)| k == "content-type" && v.contains("text/event-stream"));
    if sse {
        let mut start = 0;
        while let Some(p) = text[start..].find("\n\n") {
            let ev = &text[start..start + p];
            let t = time_of(offsets.get(start + p + 1).copied().unwrap_or(0));
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if !data.is_empty() {
                events.push((t, data.join("\n")));
            }
            start += p + 2;
        }
    }
    Ok(Response {
        status,
        headers,
        body: text,
        events,
    })
}
