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

/// The log targets of the embedded store's engine: `fjall`, and the LSM tree and table format
/// below it. Their INFO lines (creating or recovering each tree at every start) say nothing an
/// operator acts on, so they are held to `warn` unless the filter names them
/// (docs/configuration.md, `[log]`).
const ENGINE_TARGETS: &[&str] = &["fjall", "lsm_tree", "sfa"];

/// The log's filter: `RUST_LOG` when set, else `[log] level`, with the engine's targets held
/// to `warn` unless it names them ([`engine_held`]).
fn filter(log: &LogConfig) -> EnvFilter {
    std::env::var(EnvFilter::DEFAULT_ENV)
        .ok()
        .and_then(|directives| EnvFilter::try_new(engine_held(&directives)).ok())
        .or_else(|| EnvFilter::try_new(engine_held(&log.level)).ok())
        .unwrap_or_else(|| EnvFilter::new(engine_held("info")))
}

/// `directives` (a tracing filter) with `TARGET=warn` added for each of [`ENGINE_TARGETS`] it
/// does not name (as a directive's target, or a module under it); an empty filter is left as
/// it is.
fn engine_held(directives: &str) -> String {
    if directives.trim().is_empty() {
        return directives.to_owned();
    }
    let names = |target: &str| {
        directives.split(',').any(|directive| {
            let named = directive.trim().split(['[', '=']).next().unwrap_or_default();
            named == target
                || named
                    .strip_prefix(target)
                    .is_some_and(|rest| rest.starts_with("::"))
        })
    };
    let mut held = directives.to_owned();
    for target in ENGINE_TARGETS.iter().filter(|target| !names(target)) {
        held.push_str(&format!(",{target}=warn"));
    }
    held
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

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::EnvFilter;

    use super::engine_held;
    use crate::telemetry::memory_lines::MemoryLines;

    #[test]
    fn the_engine_is_held_to_warn_unless_the_filter_names_it() {
        assert_eq!(engine_held("info"), "info,fjall=warn,lsm_tree=warn,sfa=warn");
        assert_eq!(
            engine_held("info,fjall=debug"),
            "info,fjall=debug,lsm_tree=warn,sfa=warn"
        );
        assert_eq!(
            engine_held("warn, lsm_tree::tree=info,sfa[span]=trace"),
            "warn, lsm_tree::tree=info,sfa[span]=trace,fjall=warn"
        );
        // A target that only begins like one of the engine's is not it.
        assert_eq!(
            engine_held("fjall_x=info"),
            "fjall_x=info,fjall=warn,lsm_tree=warn,sfa=warn"
        );
        assert_eq!(engine_held(""), "");
    }

    /// The lines an `info`-level event of each target leaves through `directives`, held.
    fn lines(directives: &str) -> String {
        let lines = MemoryLines::default();
        let sink = lines.clone();
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::new(engine_held(directives)))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(move || sink.clone()),
            );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "fjall::db", "Recovering database");
            tracing::info!(target: "lsm_tree::tree", "Recovering LSM-tree");
            tracing::warn!(target: "fjall::db", "a warning");
            tracing::info!(target: "replaygate", "replaygate listening");
        });
        lines.text()
    }

    #[test]
    fn at_the_default_level_the_engine_logs_only_warnings() {
        let text = lines("info");
        assert!(!text.contains("Recovering"), "{text}");
        assert!(
            text.contains("a warning") && text.contains("replaygate listening"),
            "{text}"
        );
        let text = lines("info,fjall=info");
        assert!(
            text.contains("Recovering database") && !text.contains("LSM-tree"),
            "{text}"
        );
    }
}
