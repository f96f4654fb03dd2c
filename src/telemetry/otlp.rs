//! The OTLP/HTTP export of request spans (`[telemetry] otlp_endpoint`): a `tracing` layer that
//! turns each request span into an OpenTelemetry span, a batch processor on a Tokio runtime of
//! its own thread, and an exporter that posts protobuf batches with reqwest.
//!
//! Ending a span only queues it (the queue is bounded; when it is full the span is dropped), so
//! the request path never waits for the collector. A collector that is down costs dropped
//! spans and one log line, and one more when it answers again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::{runtime, Resource};
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::{filter_fn, Filtered};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::request_span;
use crate::config::TelemetryConfig;

/// The longest one export (one batch, one POST) may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest the collector may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest shutdown waits for the last spans to be exported.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// The running export; [`Export::shutdown`] exports what is queued.
#[derive(Debug)]
pub(super) struct Export {
    provider: SdkTracerProvider,
}

/// Starts the export to `traces_url` (the collector's `/v1/traces`). Spawns the processor's
/// thread; spans are exported once the returned layer is installed.
pub(super) fn start(config: &TelemetryConfig, traces_url: &str) -> Result<Export, String> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build the OTLP client: {e}"))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let exporter = Reported {
        inner: exporter,
        endpoint: traces_url.to_owned(),
        failing: AtomicBool::new(false),
    };
    let processor = BatchSpanProcessor::builder(exporter, runtime::TokioCurrentThread).build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        )
        .build();
    Ok(Export { provider })
}

impl Export {
    /// The layer that turns request spans into exported spans (and the warnings and errors
    /// logged inside them into span events); it sees no other span.
    pub(super) fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync + 'static,
    {
        let tracer = self.provider.tracer("replaygate");
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            // Nothing else here reads the OpenTelemetry context of the thread.
            .with_context_activation(false);
        let only_requests: fn(&Metadata<'_>) -> bool = |metadata| {
            if metadata.is_span() {
                metadata.target() == request_span::TARGET
            } else {
                *metadata.level() <= Level::WARN
            }
        };
        Filtered::new(layer, filter_fn(only_requests))
    }

    /// Exports the spans still queued, waiting at most a few seconds (a collector that does
    /// not answer does not hold up the exit).
    pub(super) fn shutdown(self) {
        let (done, finished) = mpsc::channel();
        let provider = self.provider;
        let stopping = std::thread::Builder::new()
            .name("replaygate-otlp-stop".into())
            .spawn(move || {
                let _ = done.send(provider.shutdown());
            });
        if stopping.is_ok() && finished.recv_timeout(SHUTDOWN_WAIT).is_err() {
            tracing::warn!(
                wait_ms = SHUTDOWN_WAIT.as_millis() as u64,
                "the last request spans were not exported in time"
            );
        }
    }
}

/// The OTLP exporter, logging when exports start to fail and when they work again (not per
/// batch, let alone per request).
#[derive(Debug)]
struct Reported<E> {
    inner: E,
    endpoint: String,
    failing: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for Reported<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        match &result {
            Err(error) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        %error,
                        spans,
                        "request spans cannot be exported; they are dropped until the collector answers"
                    );
                }
            }
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(endpoint = %self.endpoint, "request spans are exported again");
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
