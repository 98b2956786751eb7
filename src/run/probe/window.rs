//! A round's measured window, as its sender moves it and its probes watch it: pending until the
//! first measured request is sent (a closed loop's first request; a load point's first request
//! of its measured phase, after the warm-up), open while measured requests run, closed when the
//! last of them ended (before a load point's cool-down) or the round stopped.

use tokio::sync::watch;

/// Where a round's measured window stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WindowState {
    /// No measured request has been sent yet.
    Pending,
    /// Measured requests are being sent and answered.
    Open,
    /// The last measured request ended, or the round stopped.
    Closed,
}

/// The sender's end of a round's window: it opens and closes it; probes watch it.
pub(crate) struct Window {
    state: watch::Sender<WindowState>,
}

impl Window {
    pub(crate) fn new() -> Window {
        Window {
            state: watch::channel(WindowState::Pending).0,
        }
    }

    /// The first measured request is being sent. A second call, or one after the close,
    /// changes nothing.
    pub(crate) fn open(&self) {
        self.state.send_if_modified(|s| {
            let pending = *s == WindowState::Pending;
            if pending {
                *s = WindowState::Open;
            }
            pending
        });
    }

    /// The last measured request ended, or the round stopped (a window never opened closes
    /// too: its watchers then know it never will).
    pub(crate) fn close(&self) {
        self.state.send_replace(WindowState::Closed);
    }

    /// A watcher of the window.
    pub(crate) fn watch(&self) -> watch::Receiver<WindowState> {
        self.state.subscribe()
    }
}
