//! Logging and tracing: one subscriber for the process, text or JSON, filtered by `RUST_LOG` or
//! the config; a span per request (`RequestSpan`) that every event logged while handling the
//! request carries; the access line of each request (`access_log`); and, with `[telemetry]
//! otlp_endpoint`, the OTLP export of those spans.

pub(crate) mod access_log;
mod batch;
mod log_every;
#[cfg(test)]
mod memory_lines;
mod otlp;
mod plain_fields;
mod propagation;
mod request_span;
pub(crate) mod usage_tally;

pub(crate) use batch::{batched, BatchedWriter, FlushGuard};
pub(crate) use log_every::LogEvery;
pub(crate) use propagation::to_provider as traceparent_to_provider;
pub(crate) use request_span::RequestSpan;

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
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
/// `batched`), so a busy proxy makes neither a write call nor a thread wake-up per request.
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

/// The log's lines as a layer, filtered by [`filter`], for a subscriber that has other layers
/// (the span export) beside it: see [`lines_layer`].
pub(crate) fn log_layer<S, W>(log: &LogConfig, writer: W, colors: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    lines_layer(log, writer, colors).with_filter(filter(log)).boxed()
}

/// The log's lines as a layer, unfiltered: text (without colours, its fields written by
/// [`plain_fields`], the same text for less work), or JSON lines in which a line logged inside
/// a request carries the request's span as `span` (`{"name": "request", "request_id": ...,
/// ...}`); the access line is written outside it.
fn lines_layer<S, W>(log: &LogConfig, writer: W, colors: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt::layer().with_writer(writer);
    match log.format {
        LogFormat::Json => lines
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
        LogFormat::Text if colors => lines.with_ansi(true).boxed(),
        LogFormat::Text => lines
            .with_ansi(false)
            .fmt_fields(plain_fields::PlainFields)
            .boxed(),
    }
}

/// Installs the process's log subscriber, writing to `writer`, without span export. Does
/// nothing if one is already installed.
///
/// With the log the only layer, its filter (`RUST_LOG`, else `[log] level`) filters the whole
/// subscriber rather than the one layer: the same lines, without a per-layer filter's
/// bookkeeping each time a request's span is entered or left (several times a request).
pub fn install<W>(log: &LogConfig, writer: W, colors: bool)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let _ = log_subscriber(log, writer, colors).try_init();
}

/// The subscriber [`install`] installs.
pub(crate) fn log_subscriber<W>(
    log: &LogConfig,
    writer: W,
    colors: bool,
) -> impl Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::registry()
        .with(filter(log))
        .with(lines_layer(log, writer, colors))
}

/// Installs the log subscriber as [`install`] does, and the layer that exports request spans
/// beside it.
fn install_exporting<W>(log: &LogConfig, writer: W, colors: bool, export: &otlp::Export)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let installed = tracing_subscriber::registry()
        .with(log_layer(log, writer, colors))
        .with(export.layer())
        .try_init();
    if installed.is_ok() {
        request_span::exporting_from_now_on();
    }
}
