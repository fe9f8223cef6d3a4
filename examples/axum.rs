//! The whole service on axum and SQLite: the JSON routes, the sign-in and
//! consent dialog, the account's page of connected applications, `/healthz`
//! and `/readyz`, the request log, the purge, webhooks with their delivery
//! loop, and the hardened accept loop.
//! `cargo run --example axum -- 127.0.0.1:8082` writes the demo app,
//! account and API key to try it with to `axum-example.json`. A host merges
//! its own routes in; one that signs its users in passes `SignInMethod::host`.

use std::path::Path;
use std::sync::Arc;

use conversion_gateway::axum::pages::{self, PagesState};
use conversion_gateway::axum::{
    ConnectionLimits, operations_router, router, shutdown_signal, with_request_log,
};
use conversion_gateway::{
    Argon2Passwords, Argon2Verifier, BackgroundTasks, Gateway, GatewayConfig, HashingLimit,
    OsRandom, PageFlows, ServerKey, SignInMethod, StoreUrl, SystemClock, ThrottleLimits,
    WebhookOptions, seed_demo, write_private_file,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::args().nth(1).unwrap_or("127.0.0.1:8082".into());
    let store = "sqlite:axum-example.db".parse::<StoreUrl>()?.open().await?;
    // Every stored secret is a keyed hash: the key lives as long as the store.
    let (key, _) = ServerKey::load_or_create(Path::new("axum-example.db.key"), &OsRandom)?;
    let limits = conversion_gateway::axum::fit_open_files(ConnectionLimits::default());
    let listener = conversion_gateway::axum::listen(&address, &limits).await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    // Webhooks to public https URLs only, retried on the default schedule.
    let webhooks = WebhookOptions::over_http(false)?;
    let config = GatewayConfig::new(base_url.as_str());
    let gateway = Gateway::new(config, store.stores(), key.hasher()).with_webhooks(webhooks);
    let gateway = Arc::new(gateway);

    // The demo data, derived from the key: the same at every start. Its
    // secrets go to a file only this user can read, never to the log.
    let passwords = Argon2Passwords::recommended();
    let demo = seed_demo(&gateway, &key, &passwords).await?;
    write_private_file("axum-example.json".as_ref(), demo.to_json().as_bytes())?;

    // Our sign-in form: Argon2id, one check per core, failures throttled.
    let verifier = Argon2Verifier::new(passwords, HashingLimit::per_core());
    let sign_in = SignInMethod::form(verifier, ThrottleLimits::default());
    let flows = PageFlows::new(gateway.clone(), &key, sign_in, Arc::new(SystemClock));

    let app = router(gateway.clone())
        .merge(pages::routes(PagesState::new(flows)))
        .merge(operations_router(gateway.clone()));
    let background = BackgroundTasks::spawn(gateway); // The purge and webhook delivery.
    let shutdown = shutdown_signal(); // Ctrl-C or SIGTERM, handled from here on.
    println!("listening on {base_url}; credentials in axum-example.json");
    conversion_gateway::axum::serve(listener, with_request_log(app), limits, shutdown).await;
    background.stop().await;
    store.close().await;
    Ok(())
}
