//! serve's HTTP side: `GET /metrics`, `GET /healthz`, and 404 for anything else. Connections
//! are served one task each, under limits, so that a scraper that hangs or sends garbage costs
//! one connection and never the collection: a request head must arrive within
//! [`HEADER_READ_TIMEOUT`] and fit in [`MAX_REQUEST_HEAD`] (else hyper answers 400 or closes),
//! a request is answered within [`REQUEST_TIMEOUT`], bodies are refused, and at most
//! [`MAX_CONNECTIONS`] are open at once.

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{
    net::TcpListener,
    sync::{Semaphore, watch},
};
use tower_http::{limit::RequestBodyLimitLayer, timeout::TimeoutLayer};

use super::metrics::{Labels, Snapshot, render};
use crate::export::prom::TextFormat;

/// How long a client may take to send a request's head (also the longest a kept-alive
/// connection may stay idle).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take to be answered.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head read (a scrape's is a few hundred bytes; hyper's least is 8 KiB).
const MAX_REQUEST_HEAD: usize = 16 << 10;
/// Connections open at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 256;

#[derive(Clone)]
struct Served {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    labels: Arc<Labels>,
}

/// The routes, with their limits.
pub fn router(snapshots: watch::Receiver<Arc<Snapshot>>, labels: Arc<Labels>) -> Router {
    Router::new()
        .route("/metrics", get(metrics).fallback(not_found))
        .route("/healthz", get(healthz).fallback(not_found))
        .fallback(not_found)
        .with_state(Served { snapshots, labels })
        .layer(RequestBodyLimitLayer::new(0))
        .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, REQUEST_TIMEOUT))
}

/// Accepts connections until the task is aborted.
pub async fn serve(listener: TcpListener, router: Router) {
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = open.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was accepted: the next
                // one may do.
                log::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_REQUEST_HEAD)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                log::debug!("connection ended: {e}");
            }
            drop(permit);
        });
    }
}

async fn metrics(State(served): State<Served>, headers: HeaderMap) -> Response {
    let format = negotiate(headers.get(header::ACCEPT));
    // The snapshot is shared, not copied: the collection loop is never kept waiting by a
    // render.
    let snapshot = served.snapshots.borrow().clone();
    let body = render(&snapshot, &served.labels, format);
    ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
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
