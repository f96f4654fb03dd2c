//! An OTLP/HTTP collector for tests: an in-process hyper server on 127.0.0.1:0 that takes
//! `POST /v1/traces` (protobuf), decodes each export and keeps its spans.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;

/// One exported span, with the `service.name` of the resource it came under.
#[derive(Debug, Clone)]
pub struct Exported {
    pub service: Option<String>,
    pub span: Span,
}

impl Exported {
    /// The span's attribute `key`, as text (strings as they are, numbers in decimal).
    pub fn attribute(&self, key: &str) -> Option<String> {
        text_of(&self.span.attributes, key)
    }

    /// The span's trace id, hex.
    pub fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }

    /// The span's id, hex.
    pub fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }

    /// The span's parent id, hex (empty for a root span).
    pub fn parent_span_id(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }
}

fn text_of(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(match value {
        Value::StringValue(text) => text.clone(),
        Value::IntValue(n) => n.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(x) => x.to_string(),
        other => format!("{other:?}"),
    })
}

/// A running collector.
pub struct Collector {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Exported>>>,
    /// Requests that were not a decodable protobuf export to `/v1/traces`.
    refused: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    pub async fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let (kept, refusals) = (spans.clone(), refused.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (kept, refusals) = (kept.clone(), refusals.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let (kept, refusals) = (kept.clone(), refusals.clone());
                        async move { Ok::<_, Infallible>(take(request, &kept, &refusals).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Collector {
            addr,
            spans,
            refused,
            task,
        }
    }

    /// The `otlp_endpoint` to configure.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Exported> {
        self.spans.lock().unwrap().clone()
    }

    /// Requests refused so far (each described).
    pub fn refused(&self) -> Vec<String> {
        self.refused.lock().unwrap().clone()
    }

    /// Waits (boundedly) until at least `count` spans have arrived; them.
    pub async fn until_spans(&self, count: usize) -> Vec<Exported> {
        let started = Instant::now();
        loop {
            let spans = self.spans();
            if spans.len() >= count || started.elapsed() > Duration::from_secs(15) {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn take(
    request: Request<Incoming>,
    kept: &Mutex<Vec<Exported>>,
    refused: &Mutex<Vec<String>>,
) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    let protobuf = parts
        .headers
        .get("content-type")
        .is_some_and(|v| v == "application/x-protobuf");
    let decoded = ExportTraceServiceRequest::decode(body.as_ref());
    match decoded {
        Ok(export) if parts.method == Method::POST && parts.uri.path() == "/v1/traces" && protobuf => {
            let mut kept = kept.lock().unwrap();
            for resource_spans in export.resource_spans {
                let service = resource_spans
                    .resource
                    .as_ref()
                    .and_then(|resource| text_of(&resource.attributes, "service.name"));
                for scope_spans in resource_spans.scope_spans {
                    for span in scope_spans.spans {
                        kept.push(Exported {
                            service: service.clone(),
                            span,
                        });
                    }
                }
            }
            // An empty ExportTraceServiceResponse: everything accepted.
            let mut response = Response::new(Full::new(Bytes::new()));
            response
                .headers_mut()
                .insert("content-type", "application/x-protobuf".parse().unwrap());
            response
        }
        outcome => {
            refused.lock().unwrap().push(format!(
                "{} {} {:?} decoded: {}",
                parts.method,
                parts.uri,
                parts.headers.get("content-type"),
                outcome.is_ok()
            ));
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::BAD_REQUEST;
            response
        }
    }
}
