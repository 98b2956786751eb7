//! Where `tracing` events go: stderr, one plain line each (`warning: ...`), so what the library
//! warns about (a truncated record skipped, an SSH connection re-established) reaches the user.
//! No timestamps or module paths at the default levels: these lines are for people, next to
//! the command's own output. They go through [`servebench_model::console`], so they never cut through a
//! progress bar and a closed stderr never stops the command.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Installs the stderr subscriber for a user's command: `RUST_LOG` when set, else warnings and
/// errors, with servebench's own info (`-v`), debug (`-vv`) or trace (`-vvv`) events added.
pub(crate) fn install(verbose: u8) {
    let default = || {
        EnvFilter::new(match verbose {
            0 => "warn",
            1 => "warn,servebench=info",
            2 => "warn,servebench=debug",
            _ => "warn,servebench=trace",
        })
    };
    let rust_log = std::env::var("RUST_LOG").unwrap_or_default();
    if rust_log.trim().is_empty() {
        init(default());
        return;
    }
    match EnvFilter::try_new(&rust_log) {
        Ok(filter) => init(filter),
        Err(e) => {
            init(default());
            tracing::warn!("RUST_LOG ignored ({e}): it must be like `warn` or `servebench=debug`");
        }
    }
}

/// For `servebench agent`, whose stdout is its protocol and whose stderr the runner keeps as
/// its last words: warnings and errors only, whatever the environment says.
pub(crate) fn install_quiet() {
    init(EnvFilter::new("warn"));
}

fn init(filter: EnvFilter) {
    // Fails only when a subscriber is already installed (a second call in one process): the
    // first one stays.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Above the progress bar while one is shown; a closed stderr never panics.
        .with_writer(|| servebench_model::console::Stderr)
        .event_format(Plain)
        .try_init();
}

/// `warning: <message> key=value ...`; below info, the module path follows the level, since
/// debugging output is read against the code.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        match *meta.level() {
            Level::ERROR => write!(writer, "error: ")?,
            Level::WARN => write!(writer, "warning: ")?,
            Level::INFO => write!(writer, "info: ")?,
            Level::DEBUG => write!(writer, "debug {}: ", meta.target())?,
            Level::TRACE => write!(writer, "trace {}: ", meta.target())?,
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
