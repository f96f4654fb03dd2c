//! The least a proxy built on hyper does, for the load benchmark (`bench/load/run`, target
//! "hyper"): it reads each request's body whole, sends it to one upstream with hyper-util's
//! pooled client and streams the answer back. No routing, no gate, no logging, no limits,
//! no timeouts: the same server builder, client and single-threaded runtime replaygate uses,
//! with nothing of replaygate's own. Its throughput is the ceiling of any proxy on this stack,
//! which is what replaygate's "gate off" figure is measured against. It is not part of
//! replaygate and never forwards anything but loopback benchmark traffic.
//!
//! ```sh
//! cargo run --release --example bare_hyper_proxy -- 127.0.0.1:8081 127.0.0.1:8082
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

type Body = UnsyncBoxBody<Bytes, hyper::Error>;
type Upstream = Client<HttpConnector, Full<Bytes>>;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream), None) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: bare_hyper_proxy LISTEN_ADDR UPSTREAM_HOST:PORT");
        std::process::exit(2);
    };
    let listen: SocketAddr = listen.parse().unwrap_or_else(|error| {
        eprintln!("bare_hyper_proxy: {listen}: {error}");
        std::process::exit(2);
    });
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(listen, Arc::from(upstream)))
}

/// Accepts connections for ever, each served on the one thread.
async fn serve(listen: SocketAddr, upstream: Arc<str>) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .build(connector);
    let mut server = auto::Builder::new(TokioExecutor::new());
    server.http1().timer(TokioTimer::new());
    let server = Arc::new(server);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (client, upstream, server) = (client.clone(), upstream.clone(), server.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request| forward(client.clone(), upstream.clone(), request));
            let _ = server.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Reads the body, sends the request on to `upstream` with its path, and answers with the
/// upstream's answer (a 502 when there is none).
async fn forward(
    client: Upstream,
    upstream: Arc<str>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (mut head, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|body| body.to_bytes()) else {
        return Ok(bad_gateway());
    };
    let path = head.uri.path_and_query().map_or("/", |path| path.as_str());
    let Ok(uri) = format!("http://{upstream}{path}").parse::<Uri>() else {
        return Ok(bad_gateway());
    };
    head.uri = uri;
    head.headers.remove(http::header::HOST);
    match client.request(Request::from_parts(head, Full::new(body))).await {
        Ok(answer) => Ok(answer.map(BodyExt::boxed_unsync)),
        Err(_) => Ok(bad_gateway()),
    }
}

fn bad_gateway() -> Response<Body> {
    let mut answer = Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *answer.status_mut() = StatusCode::BAD_GATEWAY;
    answer
}
