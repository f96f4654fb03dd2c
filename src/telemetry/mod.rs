//! Logging: one subscriber for the process, text or JSON, filtered by `RUST_LOG` or the config.

mod batch;

pub use batch::{batched, BatchedWriter, FlushGuard};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the process's log subscriber, writing to standard output. `RUST_LOG`, when set,
/// overrides `[log] level`.
///
/// Lines are gathered in memory and written by a thread of their own in batches (see
/// [`batched`]), so a busy proxy makes neither a write call nor a thread wake-up per request.
/// Keep the returned guard until exit; dropping it writes what is left.
pub fn init(log: &LogConfig) -> std::io::Result<FlushGuard> {
    let colors = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (writer, guard) = batched(std::io::stdout())?;
    install(log, writer, colors);
    Ok(guard)
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
