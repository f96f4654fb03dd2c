//! Logging and tracing: one subscriber for the process, text or JSON, filtered by `RUST_LOG` or
//! the config; a span per request ([`RequestSpan`]) that every event logged while handling the
//! request carries; and, with `[telemetry] otlp_endpoint`, the OTLP export of those spans.

mod batch;
mod otlp;
mod propagation;
mod request_span;

pub use batch::{batched, BatchedWriter, FlushGuard};
pub(crate) use propagation::to_provider as traceparent_to_provider;
pub use request_span::RequestSpan;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogConfig, LogFormat, TelemetryConfig};

/// Keeps logging (and the span export) running; dropping it exports the spans still queued
/// (waiting a few seconds at most), then writes the log lines still gathered.
#[must_use = "dropping it stops logging"]
pub struct Telemetry {
    export: Option<otlp::Export>,
    _log: FlushGuard,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(export) = self.export.take() {
            export.shutdown();
        }
    }
}

/// Installs the process's log subscriber, writing to standard output, and with
/// `[telemetry] otlp_endpoint` the export of request spans. `RUST_LOG`, when set, overrides
/// `[log] level` (for the log only: every request span is exported whatever the level).
///
/// Lines are gathered in memory and written by a thread of their own in batches (see
/// [`batched`]), so a busy proxy makes neither a write call nor a thread wake-up per request.
/// Keep the returned guard until exit.
pub fn init(log: &LogConfig, telemetry: &TelemetryConfig) -> Result<Telemetry, String> {
    let colors = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (writer, guard) =
        batched(std::io::stdout()).map_err(|e| format!("cannot start the log writer: {e}"))?;
    let export = match &telemetry.otlp_endpoint {
        Some(url) => Some(otlp::start(telemetry, url)?),
        None => None,
    };
    match &export {
        Some(export) => install_exporting(log, writer, colors, export),
        None => install(log, writer, colors),
    }
    Ok(Telemetry { export, _log: guard })
}

/// The log's filter: `RUST_LOG` when set, else `[log] level`.
fn filter(log: &LogConfig) -> EnvFilter {
    EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Installs the process's log subscriber, writing to `writer`, without span export. Does
/// nothing if one is already installed.
///
/// A JSON line logged inside a request carries the request's span as `span`
/// (`{"name": "request", "request_id": ..., ...}`); the access line is written outside it.
pub fn install<W>(log: &LogConfig, writer: W, colors: bool)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(log))
        .with_writer(writer);
    let _ = match log.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.with_ansi(colors).try_init(),
    };
}

/// Installs the log subscriber as [`install`] does, with the log's filter on the log alone, and
/// the layer that exports request spans beside it.
fn install_exporting<W>(log: &LogConfig, writer: W, colors: bool, export: &otlp::Export)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt::layer().with_writer(writer);
    let installed = match log.format {
        LogFormat::Json => tracing_subscriber::registry()
            .with(
                lines
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_filter(filter(log)),
            )
            .with(export.layer())
            .try_init(),
        LogFormat::Text => tracing_subscriber::registry()
            .with(lines.with_ansi(colors).with_filter(filter(log)))
            .with(export.layer())
            .try_init(),
    };
    if installed.is_ok() {
        request_span::exporting_from_now_on();
    }
}
