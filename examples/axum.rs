//! The whole service on axum and SQLite: the JSON routes, the sign-in and
//! consent dialog, the account's page of connected applications, `/healthz`
//! and `/readyz`, the request log, the purge, webhooks with their delivery
//! loop, and the hardened accept loop.
//! `cargo run --example axum -- 127.0.0.1:8082` writes an app, an account
//! and an API key to try it with to `axum-example.json`. A host merges its
//! own routes in; one that signs its users in passes `SignInMethod::host`.

use std::path::Path;
use std::sync::Arc;

use conversion_gateway::axum::pages::{self, PagesState};
use conversion_gateway::axum::{
    ConnectionLimits, operations_router, router, shutdown_signal, with_request_log,
};
use conversion_gateway::{
    Account, Argon2Passwords, Argon2Verifier, ClientRegistration, Gateway, GatewayConfig,
    HashingLimit, HttpWebhookTransport, OsRandom, PURGE_EVERY, PageFlows, ServerKey, SignInMethod,
    StoreUrl, SystemClock, ThrottleLimits, WebhookOptions, WebhookWorker, deliver_webhooks,
    purge_every, random_token, write_private_file,
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
    let webhooks = WebhookOptions {
        transport: Arc::new(HttpWebhookTransport::new(false)?),
        ..WebhookOptions::default()
    };
    let gateway = Arc::new(
        Gateway::new(
            GatewayConfig::new(base_url.as_str()),
            store.stores(),
            key.hasher(),
        )
        .with_webhooks(webhooks),
    );

    // Our sign-in form: Argon2id, one check per core, failures throttled.
    let passwords = Argon2Passwords::recommended();
    seed(&gateway, &passwords).await?;
    let sign_in = SignInMethod::form(
        Argon2Verifier::new(passwords, HashingLimit::per_core()),
        ThrottleLimits::default(),
    );
    let flows = PageFlows::new(gateway.clone(), &key, sign_in, Arc::new(SystemClock));

    let app = router(gateway.clone())
        .merge(pages::routes(PagesState::new(flows)))
        .merge(operations_router(gateway.clone()));
    let purge = tokio::spawn(purge_every(gateway.clone(), PURGE_EVERY));
    let deliveries = tokio::spawn(deliver_webhooks(gateway, WebhookWorker::default()));
    let shutdown = shutdown_signal(); // Ctrl-C or SIGTERM, handled from here on.
    println!("listening on {base_url}; credentials in axum-example.json");
    conversion_gateway::axum::serve(listener, with_request_log(app), limits, shutdown).await;
    purge.abort();
    deliveries.abort();
    store.close().await;
    Ok(())
}

/// An app, an account with a password and an API key, on the first start;
/// their secrets go to a file only this user can read, never to the log.
async fn seed(
    gateway: &Gateway,
    passwords: &Argon2Passwords,
) -> Result<(), Box<dyn std::error::Error>> {
    if gateway
        .find_account_by_email("owner@example.com")
        .await?
        .is_some()
    {
        return Ok(());
    }
    let password = random_token(&OsRandom, 18);
    let mut account = Account::new("Example Account", "owner@example.com", &OsRandom);
    account.password_hash = Some(passwords.hash(&password));
    gateway.create_account(&account).await?;
    let registration = ClientRegistration::new("Example App", ["http://127.0.0.1:9/callback"]);
    let (app, secret) = gateway.register_client(registration).await?;
    let (_, api_key) = gateway.issue_api_key(account.id, "example").await?;
    let credentials = serde_json::json!({
        "client_id": app.id.to_string(), "client_secret": secret.expose(),
        "email": account.email, "password": password, "api_key": api_key.expose(),
    });
    write_private_file(
        "axum-example.json".as_ref(),
        format!("{credentials:#}\n").as_bytes(),
    )?;
    Ok(())
}
