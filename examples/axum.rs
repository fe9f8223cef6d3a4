//! The whole JSON API of the service on axum, in memory: the token and
//! revocation endpoints and the three event routes, from the `axum` feature.
//!
//! ```text
//! cargo run --example axum -- 127.0.0.1:8082
//! curl -X POST "http://127.0.0.1:8082/platform/conversions?api_key=$(cat axum-example.key)" \
//!   -H 'Content-Type: application/json' \
//!   -d '{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"x","email":"a@example.com"}}'
//! ```
//!
//! A host adds its own routes (its dialog pages, its API guarded by
//! `conversion_gateway::axum::Bearer`) and merges this router into them.

use std::sync::Arc;

use conversion_gateway::{
    Account, Gateway, GatewayConfig, OsRandom, SecretHasher, Stores, write_private_file,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args().nth(1);
    let listener =
        tokio::net::TcpListener::bind(listen.as_deref().unwrap_or("127.0.0.1:8082")).await?;
    let gateway = Arc::new(Gateway::new(
        GatewayConfig::new(format!("http://{}", listener.local_addr()?)),
        Stores::in_memory(),
        SecretHasher::generate(&OsRandom),
    ));

    // An account and an API key to try the conversion route with. The key
    // is a secret: it goes to a file only this user can read, never the log.
    let account = Account::new("Demo Account", "demo@example.com", &OsRandom);
    gateway.create_account(&account).await?;
    let (_, api_key) = gateway.issue_api_key(account.id, "demo").await?;
    write_private_file("axum-example.key".as_ref(), api_key.expose().as_bytes())?;
    println!(
        "listening on {}; API key in axum-example.key",
        gateway.config().base_url
    );

    let app = conversion_gateway::axum::router(gateway);
    axum::serve(listener, app).await?;
    Ok(())
}
