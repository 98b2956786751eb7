//! Where log lines go, and SGLang's line format (`[2026-11-30 10:00:00] message`).
//! vLLM's and llama.cpp's formats are built in `voice` and written with [`SimLog::raw`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Where log lines go: stderr, an in-memory capture (for tests), or both.
#[derive(Debug, Clone, Default)]
pub struct SimLog {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stderr: bool,
    /// Lines go to stdout instead (vLLM's Python logging writes to stdout).
    stdout: bool,
    captured: Option<Mutex<Vec<String>>>,
    quiet_batches: AtomicBool,
}

impl SimLog {
    /// Lines go to stderr (the `servebench sim` command).
    pub(crate) fn stderr() -> Self {
        Self::build(true, false)
    }

    /// Lines are kept in memory; read them with [`lines`](Self::lines).
    pub fn capture() -> Self {
        Self::build(false, true)
    }

    /// Lines go to stdout (vLLM's logger does).
    pub(crate) fn stdout() -> Self {
        SimLog {
            inner: Arc::new(Inner {
                stdout: true,
                ..Inner::default()
            }),
        }
    }

    fn build(stderr: bool, capture: bool) -> Self {
        SimLog {
            inner: Arc::new(Inner {
                stdout: false,
                stderr,
                captured: capture.then(|| Mutex::new(Vec::new())),
                quiet_batches: AtomicBool::new(false),
            }),
        }
    }

    /// Hides (or shows) batch lines: `--log-level warning` or higher hides them.
    pub(crate) fn set_quiet_batches(&self, quiet: bool) {
        self.inner.quiet_batches.store(quiet, Ordering::Relaxed);
    }

    /// Logs one line with SGLang's timestamp prefix.
    pub(crate) fn info(&self, msg: &str) {
        let line = format!(
            "[{}] {msg}",
            chrono::Local::now().format("%Y-%m-%d %H:%M:%S")
        );
        if self.inner.stderr {
            eprintln!("{line}");
        }
        if self.inner.stdout {
            println!("{line}");
        }
        if let Some(c) = &self.inner.captured
            && let Ok(mut v) = c.lock()
        {
            v.push(line);
        }
    }

    /// Logs a Prefill/Decode batch line unless batch lines are hidden.
    pub(crate) fn batch(&self, msg: &str) {
        if !self.inner.quiet_batches.load(Ordering::Relaxed) {
            self.info(msg);
        }
    }

    /// Raw lines without a timestamp (tracebacks).
    pub(crate) fn raw(&self, text: &str) {
        if self.inner.stderr {
            eprintln!("{text}");
        }
        if self.inner.stdout {
            println!("{text}");
        }
        if let Some(c) = &self.inner.captured
            && let Ok(mut v) = c.lock()
        {
            v.extend(text.lines().map(str::to_string));
        }
    }

    /// Captured lines so far (empty when not capturing).
    pub fn lines(&self) -> Vec<String> {
        self.inner
            .captured
            .as_ref()
            .and_then(|c| c.lock().ok().map(|v| v.clone()))
            .unwrap_or_default()
    }
}
