//! What stops a run before its end: Ctrl-C, a signal, a record that cannot be written, the
//! agent's input closing. One `Interrupt` is shared by every task of a run; each checks it at
//! its own safe points.

use std::path::Path;
use std::sync::Arc;

/// Why a run stops before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StopCause {
    /// A signal: `SIGINT` (Ctrl-C), `SIGTERM`, `SIGHUP` (the terminal or SSH session closed).
    Signal(&'static str),
    /// The agent's input closed, or the runner wrote it a stop line: the runner went away
    /// or stopped it.
    InputClosed,
    /// A record could not be written (a full disk): measuring on would measure what cannot
    /// be kept, so the run stops and fails.
    WriteFailed { file: String, error: String },
}

impl StopCause {
    /// True when the run failed, rather than was stopped on request.
    pub(crate) fn is_failure(&self) -> bool {
        matches!(self, StopCause::WriteFailed { .. })
    }
}

impl std::fmt::Display for StopCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopCause::Signal(name) => write!(f, "interrupted by {}", signal_words(name)),
            StopCause::InputClosed => write!(f, "stopped by the runner"),
            StopCause::WriteFailed { file, error } => write!(f, "cannot write {file}: {error}"),
        }
    }
}

/// `SIGINT (Ctrl-C)`, `SIGHUP (the terminal or SSH session closed)`: a signal as people know it.
fn signal_words(name: &str) -> String {
    match name {
        "SIGINT" => "SIGINT (Ctrl-C)".into(),
        "SIGHUP" => "SIGHUP (the terminal or SSH session closed)".into(),
        other => other.into(),
    }
}

/// A stop request (a signal, or a record that cannot be written), observable from every task.
#[derive(Clone)]
pub(crate) struct Interrupt {
    rx: tokio::sync::watch::Receiver<bool>,
    tx: Arc<tokio::sync::watch::Sender<bool>>,
    /// The first cause; later ones add nothing.
    cause: Arc<std::sync::Mutex<Option<StopCause>>>,
}

impl Default for Interrupt {
    fn default() -> Self {
        Self::new()
    }
}

impl Interrupt {
    pub(crate) fn new() -> Interrupt {
        let (tx, rx) = tokio::sync::watch::channel(false);
        Interrupt {
            rx,
            tx: Arc::new(tx),
            cause: Arc::default(),
        }
    }

    /// Sets the flag (the first cause is kept); every waiter wakes.
    pub(crate) fn trigger(&self, cause: StopCause) {
        {
            let mut c = self.cause.lock().unwrap_or_else(|e| e.into_inner());
            if c.is_none() {
                *c = Some(cause);
            }
        }
        let _ = self.tx.send(true);
    }

    /// A record could not be written to `file`: the run stops at once and fails.
    pub(crate) fn write_failed(&self, file: &Path, error: &std::io::Error) {
        self.trigger(StopCause::WriteFailed {
            file: file.display().to_string(),
            error: error.to_string(),
        });
    }

    pub(crate) fn is_set(&self) -> bool {
        *self.rx.borrow()
    }

    /// Why the run stops, once it does.
    pub(crate) fn cause(&self) -> Option<StopCause> {
        self.cause.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A receiver that turns true when the run stops (for waits below the run's layer).
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Resolves once the flag is set.
    pub(crate) async fn wait(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|v| *v).await;
    }

    /// Triggers on Ctrl-C (SIGINT), SIGTERM and SIGHUP (a closed terminal or SSH session),
    /// saying so on the console.
    pub(crate) fn on_signals(&self) {
        self.signals(true);
    }

    /// Like [`on_signals`](Self::on_signals), printing nothing (the agent's output is data).
    pub(crate) fn on_signals_quiet(&self) {
        self.signals(false);
    }

    fn signals(&self, announce: bool) {
        use tokio::signal::unix::{SignalKind, signal};
        for (kind, name) in [
            (SignalKind::interrupt(), "SIGINT"),
            (SignalKind::terminate(), "SIGTERM"),
            (SignalKind::hangup(), "SIGHUP"),
        ] {
            // Installed now, not in the task: a signal that comes before the task first runs
            // must not take the default action (death without a report).
            let Ok(mut stream) = signal(kind) else {
                continue;
            };
            let me = self.clone();
            tokio::spawn(async move {
                stream.recv().await;
                if announce && !me.is_set() {
                    servebench_model::console::errln(&format!(
                        "\n{}: finishing up (recording what was measured, stopping the server)...",
                        StopCause::Signal(name)
                    ));
                }
                me.trigger(StopCause::Signal(name));
            });
        }
    }
}
