//! A second adapter: the token endpoint and the conversion endpoint on
//! hyper 1 with no web framework, to show the glue a host with another HTTP
//! stack writes. The core takes strings and bytes ([`RequestParts`]) and
//! answers a status, header pairs and a body ([`HttpAnswer`]); the `http`
//! feature converts both to and from the `http` crate's types, so the rest
//! is routing and reading a capped body.
//!
//! ```text
//! cargo run --example hyper_adapter -- 127.0.0.1:8081
//! curl -X POST "http://127.0.0.1:8081/platform/conversions?api_key=$KEY" \
//!   -H 'Content-Type: application/json' \
//!   -d '{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"x","email":"a@example.com"}}'
//! ```
//!
//! It keeps its data in memory and prints a fresh API key at start.

use std::convert::Infallible;
use std::sync::Arc;

use conversion_gateway::{
    Account, Gateway, GatewayConfig, HttpAnswer, OsRandom, RequestParts, SecretHasher, Stores,
};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The 0.2 MB cap of the conversion route, as the real service, for both.
const BODY_LIMIT: usize = 200 * 1024;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8081".into());
    let listener = TcpListener::bind(&listen).await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    let hasher = SecretHasher::generate(&OsRandom);
    let gateway = Arc::new(Gateway::new(
        GatewayConfig::new(base_url.as_str()),
        Stores::in_memory(),
        hasher,
    ));

    // Something to try the conversion route with.
    let account = Account::new("Demo Account", "demo@example.com", &OsRandom);
    gateway.create_account(&account).await?;
    let (_, api_key) = gateway.issue_api_key(account.id, "demo").await?;
    println!(
        "listening on {base_url}; API key (demo data, in memory): {}",
        api_key.expose()
    );

    loop {
        let (stream, _) = listener.accept().await?;
        let gateway = gateway.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(gateway.clone(), request));
            // A client that goes away mid-request is not the server's error.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Routes a request to the core; the `http` feature converts both ways.
async fn handle(
    gateway: Arc<Gateway>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (head, body) = request.into_parts();
    let route = head.uri.path().to_owned();
    let answer = if route != "/auth/token" && route != "/platform/conversions" {
        HttpAnswer::error(404, "NOT_FOUND", "no such resource")
    } else if head.method != Method::POST {
        HttpAnswer::error(405, "METHOD_NOT_ALLOWED", "this method is not allowed here")
            .with_header("allow", "POST")
    } else {
        match Limited::new(body, BODY_LIMIT).collect().await {
            Err(_) => HttpAnswer::error(413, "BODY_TOO_LARGE", "the request body is too large"),
            Ok(body) => {
                let body = body.to_bytes();
                let parts = RequestParts::from_http(&head, &body);
                match route.as_str() {
                    "/auth/token" => gateway.answer(gateway.token(&parts).await),
                    _ => gateway.answer(gateway.record_conversion(&parts).await),
                }
            }
        }
    };
    Ok(Response::from(answer).map(|body: Vec<u8>| Full::new(Bytes::from(body))))
}
