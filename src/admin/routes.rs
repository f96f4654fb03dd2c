//! What the admin listener answers: `GET /metrics`, `GET /healthz`, `GET /readyz`, `GET /usage`;
//! 404 for any other path, 405 for another method.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;

use super::AdminState;
use crate::metrics::CONTENT_TYPE;

/// The answer to one admin request.
pub(super) async fn answer<B>(admin: &AdminState, request: &Request<B>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz" | "/usage") {
        return text(
            StatusCode::NOT_FOUND,
            "not found: the admin listener serves GET /metrics, /healthz, /readyz and /usage\n".to_owned(),
        );
    }
    if request.method() != Method::GET {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, format!("{path} takes only GET\n"));
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    match path {
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(admin.metrics.encode())));
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n".to_owned()),
        "/usage" => super::usage::usage(admin).await,
        _ => super::ready::ready(admin).await,
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
