//! The console: what servebench prints for people goes through here. A write never panics and
//! never stops a command: `servebench run spec | head -1` closes stdout after one line, a
//! closed terminal or SSH session takes stderr away, and the run goes on measuring and
//! recording either way (Rust ignores SIGPIPE, so `println!` would panic on the closed pipe).
//! While a progress bar is on screen, lines are printed above it instead of through it.
//!
//! Everything printed goes through the process's current redactor ([`crate::redact`]), so a
//! secret is never printed, whichever message carries it.
//!
//! A leaf module: it uses nothing else in the crate but [`crate::redact`].

use std::io::{self, Write};
use std::sync::Mutex;

use indicatif::ProgressBar;

/// The bar on screen, if any; log lines and console lines are printed above it.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Makes `bar` the bar that console lines are printed above (None: no bar any more).
pub fn set_bar(bar: Option<ProgressBar>) {
    *BAR.lock().unwrap_or_else(|e| e.into_inner()) = bar;
}

/// Runs `write` with the bar (if any) cleared from the screen, then draws it again.
fn above_bar(write: impl FnOnce()) {
    let bar = BAR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match bar {
        Some(b) if !b.is_hidden() && !b.is_finished() => b.suspend(write),
        _ => write(),
    }
}

/// Writes `bytes` to stdout and flushes; a closed or broken stdout is ignored.
pub(crate) fn out_bytes(bytes: &[u8]) {
    let redactor = crate::redact::current();
    let bytes = redactor.bytes(bytes);
    above_bar(|| {
        let mut out = io::stdout().lock();
        let _ = out.write_all(&bytes);
        let _ = out.flush();
    });
}

/// Writes `bytes` to stderr; a closed or broken stderr is ignored.
pub(crate) fn err_bytes(bytes: &[u8]) {
    let redactor = crate::redact::current();
    let bytes = redactor.bytes(bytes);
    above_bar(|| {
        let mut err = io::stderr().lock();
        let _ = err.write_all(&bytes);
        let _ = err.flush();
    });
}

/// `text` on stdout, as is.
pub fn out(text: &str) {
    out_bytes(text.as_bytes());
}

/// `text` and a newline on stdout.
pub fn outln(text: &str) {
    out_bytes(format!("{text}\n").as_bytes());
}

/// `text` and a newline on stderr.
pub fn errln(text: &str) {
    err_bytes(format!("{text}\n").as_bytes());
}

/// stderr as an [`io::Write`] that never fails (for the `tracing` subscriber): each write goes
/// above the bar; a closed stderr swallows it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        err_bytes(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
