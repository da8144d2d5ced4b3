//! serve's HTTP side: `GET /metrics`, `GET /healthz`, and 404 for anything else, over TLS and
//! behind basic auth where the web configuration asks for them. Every connection is accepted and
//! served on its own task under limits, so that a client that idles, trickles or garbles costs
//! one connection and never the scrapes nor the collection:
//! - admission ([`super::admission`]): at most 256 connections, 64 from one address; over a
//!   bound the connection idle the longest is shed;
//! - each exchange within [`EXCHANGE_TIMEOUT`] of the connection's last progress (its start or
//!   its last answer): the TLS handshake and the request head must arrive, and the answer be
//!   taken whole, in that time, however the bytes trickle in or out;
//! - a request head fits in [`MAX_REQUEST_HEAD`] (else 400 or 431), bodies are refused (413);
//! - a scrape's document is rendered a few series at a time as the client takes it, from the
//!   latest snapshot (shared): a connection holds a chunk of text, never the whole document.

use std::{
    convert::Infallible,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use exitprof_core::export::prom::TextFormat;
use http_body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream},
    sync::watch,
};
use tower::ServiceExt as _;
use tower_http::{limit::RequestBodyLimitLayer, timeout::TimeoutLayer};

use super::{
    admission::{Admission, Connection},
    metrics::{Document, Labels, Snapshot},
    web_config::WebConfig,
};

/// How long a connection may take over each exchange, from its start or its last answer: the
/// TLS handshake and the request head to arrive, the answer to be taken. Also the longest a
/// kept-alive connection stays idle.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take to be answered.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head read (a scrape's is a few hundred bytes; hyper's least is 8 KiB).
const MAX_REQUEST_HEAD: usize = 16 << 10;

#[derive(Clone)]
struct Served {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    labels: Arc<Labels>,
}

/// The routes, with their limits, and basic auth where the web configuration in force asks for
/// it (but on `/healthz`, which tells nothing).
pub fn router(
    snapshots: watch::Receiver<Arc<Snapshot>>,
    labels: Arc<Labels>,
    web: watch::Receiver<Arc<WebConfig>>,
) -> Router {
    Router::new()
        .route("/metrics", get(metrics).fallback(not_found))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(web, authorized))
        .route("/healthz", get(healthz).fallback(not_found))
        .with_state(Served { snapshots, labels })
        .layer(RequestBodyLimitLayer::new(0))
        .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, REQUEST_TIMEOUT))
}

/// Accepts connections until the task is aborted.
pub async fn serve(listener: TcpListener, router: Router, web: watch::Receiver<Arc<WebConfig>>) {
    let admission = Admission::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was accepted: the next
                // one may do.
                log::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Dropped, the stream is closed.
        let Some(admitted) = admission.admit(peer.ip()) else {
            log::debug!("{peer}: refused, every connection is being answered");
            continue;
        };
        let tls = web.borrow().tls.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let connection = admitted.connection.clone();
            tokio::select! {
                () = connection.shed() => log::debug!("{peer}: shed for another connection"),
                () = connection.stalled(EXCHANGE_TIMEOUT) => {
                    log::debug!("{peer}: no exchange within {EXCHANGE_TIMEOUT:?}");
                }
                () = serve_connection(stream, tls, router, connection.clone()) => {}
            }
            drop(admitted);
        });
    }
}

/// Serves one connection's requests, after a TLS handshake where the configuration asks for
/// TLS (a client that speaks plain HTTP to it fails the handshake and is closed).
async fn serve_connection(
    stream: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: Router,
    connection: Arc<Connection>,
) {
    let result = match tls {
        None => serve_http(stream, router, connection).await,
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(stream) => serve_http(stream, router, connection).await,
            Err(e) => {
                log::debug!("TLS handshake: {e}");
                return;
            }
        },
    };
    if let Err(e) = result {
        log::debug!("connection ended: {e}");
    }
}

async fn serve_http(
    stream: impl AsyncRead + AsyncWrite + Send + Unpin + 'static,
    router: Router,
    connection: Arc<Connection>,
) -> hyper::Result<()> {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (router, connection) = (router.clone(), connection.clone());
        async move {
            connection.answering();
            let response = router.oneshot(request).await?;
            Ok::<_, Infallible>(response.map(|body| Answer { body, connection: Some(connection) }))
        }
    });
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(EXCHANGE_TIMEOUT)
        .max_buf_size(MAX_REQUEST_HEAD)
        .serve_connection(TokioIo::new(stream), service)
        .await
}

/// An answer's body, which tells its connection when it has been taken whole (or abandoned).
struct Answer {
    body: Body,
    connection: Option<Arc<Connection>>,
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.taken();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Answer {
    fn taken(&mut self) {
        if let Some(connection) = self.connection.take() {
            connection.answered();
        }
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.taken();
    }
}

/// Lets a request through where the configuration in force has no users or the request names
/// one with its password; else 401.
async fn authorized(
    State(web): State<watch::Receiver<Arc<WebConfig>>>,
    request: Request,
    next: Next,
) -> Response {
    let users = web.borrow().users.clone();
    if let Some(users) = users {
        let authorization = request.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
        if !users.allow(authorization).await {
            let challenge = [(header::WWW_AUTHENTICATE, r#"Basic realm="exitprof""#)];
            return (StatusCode::UNAUTHORIZED, challenge, "Unauthorized\n").into_response();
        }
    }
    next.run(request).await
}

async fn metrics(State(served): State<Served>, headers: HeaderMap) -> Response {
    let format = negotiate(headers.get(header::ACCEPT));
    // The snapshot is shared, not copied: the collection loop is never kept waiting by a
    // render.
    let snapshot = served.snapshots.borrow().clone();
    let document = Document::new(snapshot, served.labels.clone(), format);
    ([(header::CONTENT_TYPE, format.content_type())], Body::new(Chunks(document))).into_response()
}

/// A document as a body, a chunk at a time.
struct Chunks(Document);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.next().map(|chunk| Ok(Frame::data(Bytes::from(chunk)))))
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn not_found() -> StatusCode {
    StatusCode::NOT_FOUND
}

/// OpenMetrics 1.0 when the scraper accepts it (`application/openmetrics-text`, version 1.0.0
/// or none, q above 0), else the text format 0.0.4.
fn negotiate(accept: Option<&HeaderValue>) -> TextFormat {
    let Some(accept) = accept.and_then(|a| a.to_str().ok()) else {
        return TextFormat::Prometheus;
    };
    let openmetrics = accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let (mut version, mut q) = (None, 1.0);
        for param in parts {
            match param.split_once('=') {
                Some(("version", v)) => version = Some(v),
                Some(("q", v)) => q = v.parse().unwrap_or(0.0),
                _ => {}
            }
        }
        media.eq_ignore_ascii_case("application/openmetrics-text")
            && version.is_none_or(|v| v == "1.0.0")
            && q > 0.0
    });
    if openmetrics { TextFormat::OpenMetrics } else { TextFormat::Prometheus }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_when_asked_for_text_otherwise() {
        let format = |accept: &str| negotiate(Some(&HeaderValue::from_str(accept).unwrap()));
        // Prometheus 2.x's scrape header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(format(prometheus), TextFormat::OpenMetrics);
        assert_eq!(format("application/openmetrics-text"), TextFormat::OpenMetrics);
        assert_eq!(format("text/plain;version=0.0.4"), TextFormat::Prometheus);
        assert_eq!(format("application/openmetrics-text; version=0.0.1"), TextFormat::Prometheus);
        assert_eq!(format("application/openmetrics-text;q=0, text/plain"), TextFormat::Prometheus);
        assert_eq!(format("*/*"), TextFormat::Prometheus);
        assert_eq!(negotiate(None), TextFormat::Prometheus);
    }
}
