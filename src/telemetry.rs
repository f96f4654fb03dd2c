//! Logging: one subscriber for the process, text or JSON, filtered by `RUST_LOG` or the config.

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Lines that may wait for the writer thread: enough for the thread to write in large batches,
/// few enough that the waiting lines hold well under a megabyte.
const QUEUED_LINES: usize = 2_048;

/// Installs the process's log subscriber, writing to standard output. `RUST_LOG`, when set,
/// overrides `[log] level`.
///
/// Lines are handed to a writer thread, which writes whatever has queued up in one go, so a
/// busy proxy does not make a write call per request. None is dropped: a full queue makes the
/// logging request wait. Keep the returned guard until exit; dropping it writes what is left.
pub fn init(log: &LogConfig) -> WorkerGuard {
    let colors = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("replaygate-log")
        .finish(std::io::BufWriter::new(std::io::stdout()));
    install(log, writer, colors);
    guard
}

/// Installs the process's log subscriber, writing to `writer`. Does nothing if one is already
/// installed.
pub fn install<W>(log: &LogConfig, writer: W, colors: bool)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let _ = match log.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Text => builder.with_ansi(colors).try_init(),
    };
}
