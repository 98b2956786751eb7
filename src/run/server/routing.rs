//! Which worker a routed deployment's router sent each request to, from the router's own log.
//!
//! servebench sends every generation request with a unique `x-request-id`; sglang-router
//! (0.3) takes it as the request's id, and at `--log-level debug` logs, in the span that
//! carries it, `Sending request url=http://WORKER` each time it forwards the request (again
//! when it retries on another worker). The book follows the router's log as it grows and
//! names the worker of each record before it is written (the last one sent to: the one that
//! answered), so `requests.jsonl` and the point's verdicts carry the router's word, checked
//! against each worker's own counters in the report.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use servebench_model::results::records::RequestRecord;

/// Most bytes read from the log per look (a look catches up in several).
const READ_CHUNK: usize = 4 << 20;
/// Most requests remembered and not yet asked for; past it the oldest knowledge is dropped
/// (a request whose record never came: a failed send the router never logged as answered).
const MAX_REMEMBERED: usize = 200_000;
/// How long a record whose request is not in the log yet waits for the router's line (it
/// writes it when it forwards, before the response; its writer may lag a little). The wait is
/// on the record writer's thread, outside every measured time.
const LINE_WAIT: Duration = Duration::from_millis(60);
/// The log's lines longer than this are not the router's request lines: skipped.
const MAX_LINE: usize = 64 * 1024;

/// A router's log to follow: the run directory's copy and the byte its launch's lines begin
/// at, or (an agent's) the send lines the runner relays from its copy; and how late a line
/// may arrive (a remote host's log is pulled now and then).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RouterLog {
    /// None: relayed, given to [`RoutingBook::feed`].
    pub path: Option<PathBuf>,
    pub from: u64,
    pub lag: Duration,
}

impl RouterLog {
    /// Send lines another process relays (the runner, to the agent measuring on the host).
    pub(crate) fn relayed(lag: Duration) -> RouterLog {
        RouterLog {
            path: None,
            from: 0,
            lag,
        }
    }
}

/// The router log being followed, and what it said so far.
struct Follow {
    /// The log read here; None: sends are fed.
    tail: Option<LogTail>,
    /// Feeds since the last look.
    fed: usize,
    /// How long a record waits for its line: [`LINE_WAIT`] and the copy's lag.
    wait: Duration,
    /// Request id to where it was sent, in order (again on a retry).
    sends: HashMap<String, Vec<Sent>>,
    /// Workers as the router names them (its URLs, on its host) to the names in records.
    names: HashMap<String, String>,
}

/// One forwarding of a request: the worker (a disaggregated deployment's decode worker), and
/// the prefill worker it was paired with.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Sent {
    pub worker: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<String>,
}

/// Follows a launched deployment's router log; shared by the point runner and its record
/// writer thread.
#[derive(Default)]
pub(crate) struct RoutingBook {
    follow: Mutex<Option<Follow>>,
}

impl RoutingBook {
    /// Follows the router's `log`; `names` maps each worker's URL as the router has it to
    /// the name records give it (`worker0`, `decode1`). None stops.
    pub(crate) fn follow(&self, log: Option<(RouterLog, HashMap<String, String>)>) {
        let mut f = self.follow.lock().unwrap_or_else(|p| p.into_inner());
        *f = log.map(|(log, names)| Follow {
            tail: log.path.map(|path| LogTail::new(path, log.from)),
            fed: 0,
            wait: LINE_WAIT + log.lag,
            sends: HashMap::new(),
            names,
        });
    }

    /// Sends the router logged, relayed from where its log is read (a followed relay only).
    pub(crate) fn feed(&self, sends: Vec<(String, Sent)>) {
        let mut guard = self.follow.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = guard.as_mut().filter(|f| f.tail.is_none()) {
            f.fed += 1;
            f.remember(sends);
        }
    }

    /// Names `rec`'s worker when the router's log says where it sent it.
    pub(crate) fn attribute(&self, rec: &mut RequestRecord) {
        let Some(id) = rec.request_id.as_deref() else {
            return;
        };
        // A request that never reached the router (no connection) was never logged.
        if rec.connection.is_none() {
            return;
        }
        let started = std::time::Instant::now();
        // A copy pulled now and then: two pulls that came without the line mean the router
        // never wrote it (its line precedes the response the record ends with).
        let mut pulls_without = 0;
        loop {
            // Not held while waiting: a relay feeds the book meanwhile.
            let mut guard = self.follow.lock().unwrap_or_else(|p| p.into_inner());
            let Some(f) = guard.as_mut() else {
                return;
            };
            let grew = f.look();
            if let Some(sent) = f.sends.remove(id) {
                let Some(last) = sent.last() else {
                    return;
                };
                let name = |url: &String| f.names.get(url).cloned().unwrap_or(url.clone());
                rec.worker = Some(name(&last.worker));
                rec.prefill_worker = last.prefill.as_ref().map(name);
                rec.rerouted_from = rerouted_from(&sent, &name);
                return;
            }
            pulls_without += usize::from(grew);
            if started.elapsed() >= f.wait || (f.wait > LINE_WAIT && pulls_without >= 2) {
                return;
            }
            drop(guard);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Follow {
    /// Takes in what the log gained (or was fed) since the last look; true when it gained.
    fn look(&mut self) -> bool {
        match &mut self.tail {
            Some(tail) => {
                let mut sends = Vec::new();
                let grew = tail.read_new(&mut sends);
                self.remember(sends);
                grew
            }
            None => std::mem::take(&mut self.fed) > 0,
        }
    }

    fn remember(&mut self, sends: Vec<(String, Sent)>) {
        for (id, sent) in sends {
            if self.sends.len() >= MAX_REMEMBERED {
                self.sends.clear();
            }
            self.sends.entry(id).or_default().push(sent);
        }
    }
}

/// A router's log read as it grows, for the requests it says it forwarded.
pub(crate) struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl LogTail {
    /// Reads `path` from byte `from` on.
    pub(crate) fn new(path: PathBuf, from: u64) -> LogTail {
        LogTail {
            path,
            offset: from,
            partial: Vec::new(),
        }
    }

    /// Adds the sends in what the log gained since the last look to `sends`; true when it
    /// had gained anything.
    pub(crate) fn read_new(&mut self, sends: &mut Vec<(String, Sent)>) -> bool {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return false;
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return false;
        };
        let before = self.offset;
        if len < self.offset {
            // Truncated or replaced: start over.
            self.offset = 0;
            self.partial.clear();
        }
        while self.offset < len {
            if file.seek(SeekFrom::Start(self.offset)).is_err() {
                break;
            }
            let want = ((len - self.offset) as usize).min(READ_CHUNK);
            let mut buf = vec![0; want];
            let Ok(n) = file.read(&mut buf) else {
                break;
            };
            if n == 0 {
                break;
            }
            self.offset += n as u64;
            buf.truncate(n);
            self.take(&buf, sends);
        }
        self.offset != before
    }

    fn take(&mut self, bytes: &[u8], sends: &mut Vec<(String, Sent)>) {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(nl);
            rest = &after[1..];
            let whole;
            let line = if self.partial.is_empty() {
                line
            } else {
                whole = [std::mem::take(&mut self.partial).as_slice(), line].concat();
                &whole[..]
            };
            if line.len() <= MAX_LINE
                && let Some(sent) = send_line(&String::from_utf8_lossy(line))
            {
                sends.push(sent);
            }
        }
        if self.partial.len() + rest.len() <= MAX_LINE {
            self.partial.extend_from_slice(rest);
        } else {
            self.partial.clear();
        }
    }
}

/// The request id and where it went, from a router line that says it forwarded a request
/// (`... request_id="sb-1f-7"}: ... Sending request url=http://127.0.0.1:30001`; in PD mode
/// `Sending concurrent requests prefill_url=URL decode_url=URL`), its ANSI colours ignored.
fn send_line(line: &str) -> Option<(String, Sent)> {
    if !line.contains("Sending ") {
        return None;
    }
    let plain = strip_ansi(line);
    let field = |key: &str| -> Option<String> {
        Some(
            plain
                .split(key)
                .nth(1)?
                .split_whitespace()
                .next()?
                .to_string(),
        )
    };
    let sent = if plain.contains("Sending concurrent requests") {
        Sent {
            worker: field("decode_url=")?,
            prefill: Some(field("prefill_url=")?),
        }
    } else if plain.contains("Sending request url=") {
        Sent {
            worker: field("Sending request url=")?,
            prefill: None,
        }
    } else {
        return None;
    };
    let id = plain
        .split("request_id=\"")
        .nth(1)?
        .split('"')
        .next()?
        .to_string();
    Some((id, sent))
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The workers a request was sent to before its last send, each once (a request retried
/// three times on one worker is one request rerouted from it, not three): of a disaggregated
/// send, the role that changed by the last (the prefill worker when the router moved the
/// prefill, the decode worker when it moved the decode), both when neither did.
fn rerouted_from(sent: &[Sent], name: &dyn Fn(&String) -> String) -> Vec<String> {
    let Some((last, earlier)) = sent.split_last() else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for s in earlier {
        let prefill_moved = s.prefill.is_some() && s.prefill != last.prefill;
        let decode_moved = s.worker != last.worker;
        let mut named = Vec::new();
        if decode_moved || !prefill_moved {
            named.push(name(&s.worker));
        }
        if let Some(p) = s
            .prefill
            .as_ref()
            .filter(|_| prefill_moved || !decode_moved)
        {
            named.push(name(p));
        }
        for n in named {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {

    /// A request retried three times on one worker counts once against it; in a
    /// disaggregated deployment the retry names the role the router moved.
    #[test]
    fn retries_count_requests_and_name_the_worker_that_was_moved_from() {
        let send = |w: &str, p: Option<&str>| Sent {
            worker: w.into(),
            prefill: p.map(str::to_string),
        };
        let name = |u: &String| u.clone();
        let sent = [
            send("w1", None),
            send("w1", None),
            send("w1", None),
            send("w0", None),
        ];
        assert_eq!(rerouted_from(&sent, &name), ["w1"]);
        // The prefill moved, the decode did not: the prefill worker failed it.
        let sent = [send("d0", Some("p1")), send("d0", Some("p0"))];
        assert_eq!(rerouted_from(&sent, &name), ["p1"]);
        let sent = [send("d1", Some("p0")), send("d0", Some("p0"))];
        assert_eq!(rerouted_from(&sent, &name), ["d1"]);
        assert!(rerouted_from(&[send("w0", None)], &name).is_empty());
    }
    use super::*;
    use std::io::Write;

    /// A line as sglang-router 0.3.2 wrote it to its log (colours included).
    const SENT: &str = "\u{1b}[2m2026-12-03 05:33:16\u{1b}[0m \u{1b}[34mDEBUG\u{1b}[0m \u{1b}[1mhttp_request\u{1b}[0m\u{1b}[1m{\u{1b}[0m\u{1b}[3mmethod\u{1b}[0m\u{1b}[2m=\u{1b}[0mPOST \u{1b}[3muri\u{1b}[0m\u{1b}[2m=\u{1b}[0m/generate \u{1b}[3mversion\u{1b}[0m\u{1b}[2m=\u{1b}[0mHTTP/1.1 \u{1b}[3mmodule\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"smg\" \u{1b}[3mrequest_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"sb-abc-124\"\u{1b}[1m}\u{1b}[0m\u{1b}[2m:\u{1b}[0m \u{1b}[2msmg::observability::events\u{1b}[0m\u{1b}[2m:\u{1b}[0m \u{1b}[2m/home/runner/work/sglang/sglang/src/observability/events.rs\u{1b}[0m\u{1b}[2m:\u{1b}[0m\u{1b}[2m58:\u{1b}[0m Sending request url=http://127.0.0.1:31002";

    #[test]
    fn a_send_line_gives_the_request_and_the_worker() {
        assert_eq!(
            send_line(SENT),
            Some((
                "sb-abc-124".into(),
                Sent {
                    worker: "http://127.0.0.1:31002".into(),
                    prefill: None
                }
            ))
        );
        // PD mode, as the router wrote it (colours left out).
        let pd = "2026-12-03 06:23:53 DEBUG http_request{method=POST uri=/generate version=HTTP/1.1 module=\"smg\" request_id=\"sb-8f-22\"}: smg::observability::events: /home/runner/work/sglang/sglang/src/observability/events.rs:37: Sending concurrent requests prefill_url=http://127.0.0.1:36853 decode_url=http://127.0.0.1:35819";
        assert_eq!(
            send_line(pd),
            Some((
                "sb-8f-22".into(),
                Sent {
                    worker: "http://127.0.0.1:35819".into(),
                    prefill: Some("http://127.0.0.1:36853".into())
                }
            ))
        );
        assert_eq!(send_line("INFO started processing request"), None);
    }

    #[test]
    fn the_book_names_the_last_worker_a_request_was_sent_to_as_the_log_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("router.log");
        let mut log = std::fs::File::create(&path).unwrap();
        writeln!(log, "startup line").unwrap();
        let book = RoutingBook::default();
        let names = HashMap::from([
            ("http://127.0.0.1:31001".to_string(), "worker0".to_string()),
            ("http://127.0.0.1:31002".to_string(), "worker1".to_string()),
        ]);
        book.follow(Some((
            RouterLog {
                path: Some(path.clone()),
                from: 0,
                lag: Duration::ZERO,
            },
            names,
        )));
        let mut rec = RequestRecord {
            request_id: Some("sb-abc-124".into()),
            connection: Some(servebench_model::results::records::ConnectionUse::Opened),
            ..RequestRecord::fixture()
        };
        // Half a line first: the rest arrives later.
        let (head, tail) = SENT.split_at(40);
        write!(log, "{head}").unwrap();
        book.attribute(&mut rec);
        assert_eq!(rec.worker, None);
        writeln!(log, "{tail}").unwrap();
        // Retried on the other worker: the last send is the one that answered.
        writeln!(log, "{}", SENT.replace("31002", "31001")).unwrap();
        book.attribute(&mut rec);
        assert_eq!(rec.worker.as_deref(), Some("worker0"));
        assert_eq!(rec.rerouted_from, ["worker1"]);
        // Asked once: forgotten after.
        rec.worker = None;
        book.attribute(&mut rec);
        assert_eq!(rec.worker, None);
    }

    /// The agent's book is fed the sends the runner relays: a record waits for the feed
    /// that brings its request, and gives up after two feeds without it.
    #[test]
    fn a_relayed_book_names_the_worker_a_feed_brings() {
        let book = std::sync::Arc::new(RoutingBook::default());
        let names = HashMap::from([("http://10.0.0.2:31002".to_string(), "worker1".to_string())]);
        book.follow(Some((RouterLog::relayed(Duration::from_secs(120)), names)));
        let sent = |url: &str| Sent {
            worker: url.into(),
            prefill: None,
        };
        let feeder = book.clone();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            feeder.feed(vec![("sb-1".into(), sent("http://10.0.0.2:31002"))]);
        });
        let record = |id: &str| RequestRecord {
            request_id: Some(id.into()),
            connection: Some(servebench_model::results::records::ConnectionUse::Opened),
            ..RequestRecord::fixture()
        };
        let mut rec = record("sb-1");
        book.attribute(&mut rec);
        late.join().unwrap();
        assert_eq!(rec.worker.as_deref(), Some("worker1"));
        let started = std::time::Instant::now();
        let feeder = book.clone();
        let feeds = std::thread::spawn(move || {
            for _ in 0..2 {
                std::thread::sleep(Duration::from_millis(150));
                feeder.feed(Vec::new());
            }
        });
        let mut rec = record("sb-never-logged");
        book.attribute(&mut rec);
        feeds.join().unwrap();
        assert_eq!(rec.worker, None);
        assert!(started.elapsed() < Duration::from_secs(60));
        // A book that reads its log itself takes no feed.
        book.follow(Some((
            RouterLog {
                path: Some("/nonexistent/router.log".into()),
                from: 0,
                lag: Duration::ZERO,
            },
            HashMap::new(),
        )));
        book.feed(vec![("sb-2".into(), sent("http://10.0.0.2:31002"))]);
        let mut rec = record("sb-2");
        book.attribute(&mut rec);
        assert_eq!(rec.worker.as_deref(), None);
    }

    /// A remote router's log reaches the run directory a pull at a time: a record waits for
    /// the pull that brings its line, and gives up after two pulls without it, not at the
    /// whole lag.
    #[test]
    fn a_lagging_copy_is_waited_for_a_pull_or_two() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("router.log");
        std::fs::write(&path, "startup line\n").unwrap();
        let book = RoutingBook::default();
        let names = HashMap::from([("http://127.0.0.1:31002".to_string(), "worker1".to_string())]);
        book.follow(Some((
            RouterLog {
                path: Some(path.clone()),
                from: 0,
                lag: Duration::from_secs(120),
            },
            names,
        )));
        let record = || RequestRecord {
            request_id: Some("sb-abc-124".into()),
            connection: Some(servebench_model::results::records::ConnectionUse::Opened),
            ..RequestRecord::fixture()
        };
        let pull = |text: String, after: Duration| {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(after);
                let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
                writeln!(f, "{text}").unwrap();
            })
        };
        // The line comes with a later pull.
        let late = pull(SENT.to_string(), Duration::from_millis(300));
        let mut rec = record();
        book.attribute(&mut rec);
        late.join().unwrap();
        assert_eq!(rec.worker.as_deref(), Some("worker1"));
        // A request the router never logged: two pulls without its line end the wait.
        let started = std::time::Instant::now();
        let pulls = [
            pull("other line".into(), Duration::from_millis(200)),
            pull("another line".into(), Duration::from_millis(400)),
        ];
        let mut rec = RequestRecord {
            request_id: Some("sb-never-logged".into()),
            ..record()
        };
        book.attribute(&mut rec);
        for p in pulls {
            p.join().unwrap();
        }
        assert_eq!(rec.worker, None);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "gave up after the pulls, not the 120 s lag: {:?}",
            started.elapsed()
        );
    }
}
