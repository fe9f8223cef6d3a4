//! Shared fixtures for the scenario tests: a gateway on in-memory stores, a
//! manual clock, a seeded random source, one registered app and one account.
#![allow(dead_code)] // each test binary uses a different part of the fixture

use std::sync::Arc;

use base64::Engine as _;
use conversion_gateway::{
    Account, Client, ClientRegistration, ClientSecret, Gateway, GatewayConfig, HttpAnswer,
    ManualClock, RequestParts, SecretHasher, SeededRandom, Stores,
};
use serde_json::{Value, json};

pub const BASE_URL: &str = "https://api.example.test";
pub const REDIRECT_URI: &str = "https://app.example/callback";
pub const REDIRECT_WITH_QUERY: &str = "https://app.example/callback?tenant=7&lang=pt";

pub struct Fixture {
    pub gateway: Arc<Gateway>,
    /// The gateway's stores, to look at what an endpoint recorded.
    pub stores: Stores,
    pub clock: Arc<ManualClock>,
    pub client: Client,
    pub secret: ClientSecret,
    pub other_client: Client,
    pub other_secret: ClientSecret,
    pub account: Account,
}

impl Fixture {
    pub async fn new() -> Self {
        Self::with_config(|_| {}).await
    }

    pub async fn with_config(adjust: impl FnOnce(&mut GatewayConfig)) -> Self {
        Self::with_stores(Stores::in_memory(), adjust).await
    }

    pub async fn with_stores(stores: Stores, adjust: impl FnOnce(&mut GatewayConfig)) -> Self {
        let mut config = GatewayConfig::new(BASE_URL);
        adjust(&mut config);
        let clock = Arc::new(ManualClock::at_epoch_of_tests());
        let gateway = Gateway::new(config, stores.clone(), SecretHasher::new([42; 32]))
            .with_clock(clock.clone())
            .with_random(Arc::new(SeededRandom::new(2026)));
        let (client, secret) = gateway
            .register_client(ClientRegistration::new(
                "Lead Sync",
                [REDIRECT_URI, REDIRECT_WITH_QUERY],
            ))
            .await
            .expect("register client");
        let (other_client, other_secret) = gateway
            .register_client(ClientRegistration::new(
                "Other App",
                ["https://other.example/cb"],
            ))
            .await
            .expect("register other client");
        let mut account = Account::new(
            "Acme Marketing",
            "owner@acme.example",
            &SeededRandom::new(1),
        );
        account.custom_fields = vec!["plan".into(), "source".into()];
        gateway
            .create_account(&account)
            .await
            .expect("create account");
        Self {
            stores,
            gateway: Arc::new(gateway),
            clock,
            client,
            secret,
            other_client,
            other_secret,
            account,
        }
    }

    pub fn realm(&self) -> String {
        format!("{BASE_URL}/")
    }

    /// The dialog's query string for this fixture's app.
    pub fn dialog_query(&self, extra: &str) -> String {
        let redirect = form_urlencoded::byte_serialize(REDIRECT_URI.as_bytes()).collect::<String>();
        format!(
            "client_id={}&redirect_uri={redirect}{extra}",
            self.client.id
        )
    }

    /// Runs the dialog (allowing access) and returns the redirect's query.
    pub async fn authorize(&self, extra: &str) -> Vec<(String, String)> {
        let request = self
            .gateway
            .authorization_request(&self.dialog_query(extra))
            .await
            .expect("valid authorization request");
        let approval = self
            .gateway
            .approve(&request, self.account.id)
            .await
            .expect("approve");
        let answer = self.gateway.answer(&approval);
        assert_eq!(answer.status, 302);
        assert_eq!(answer.header("location"), Some(approval.location()));
        redirect_params(&answer)
    }

    pub async fn code(&self) -> String {
        param(&self.authorize("").await, "code").expect("code in redirect")
    }

    pub async fn token_json(&self, body: Value) -> HttpAnswer {
        self.token_with(
            Some("application/json"),
            None,
            body.to_string().as_bytes(),
            "",
        )
        .await
    }

    pub async fn token_form(&self, form: &str, authorization: Option<&str>) -> HttpAnswer {
        self.token_with(
            Some("application/x-www-form-urlencoded"),
            authorization,
            form.as_bytes(),
            "",
        )
        .await
    }

    pub async fn token_with(
        &self,
        content_type: Option<&str>,
        authorization: Option<&str>,
        body: &[u8],
        query: &str,
    ) -> HttpAnswer {
        let outcome = self
            .gateway
            .token(&RequestParts {
                query,
                content_type,
                authorization,
                idempotency_key: None,
                body,
            })
            .await;
        self.gateway.answer(outcome)
    }

    /// Exchanges a fresh code; returns (access_token, refresh_token).
    pub async fn tokens(&self) -> (String, String) {
        let code = self.code().await;
        let answer = self
            .token_json(json!({
                "client_id": self.client.id, "client_secret": self.secret.expose(), "code": code,
            }))
            .await;
        assert_eq!(answer.status, 200, "{:?}", answer.json_body());
        let body = answer.json_body().expect("json").clone();
        (
            body["access_token"]
                .as_str()
                .expect("access_token")
                .to_owned(),
            body["refresh_token"]
                .as_str()
                .expect("refresh_token")
                .to_owned(),
        )
    }

    pub async fn refresh(&self, refresh_token: &str) -> HttpAnswer {
        self.token_json(json!({
            "client_id": self.client.id, "client_secret": self.secret.expose(),
            "refresh_token": refresh_token,
        }))
        .await
    }

    pub async fn bearer(
        &self,
        access_token: &str,
    ) -> Result<conversion_gateway::Caller, conversion_gateway::BearerError> {
        self.gateway
            .authenticate_bearer(Some(&format!("Bearer {access_token}")))
            .await
    }

    pub async fn revoke(&self, authorization: Option<&str>, form: &str) -> HttpAnswer {
        let outcome = self
            .gateway
            .revoke(&RequestParts {
                query: "",
                content_type: Some("application/x-www-form-urlencoded"),
                authorization,
                idempotency_key: None,
                body: form.as_bytes(),
            })
            .await;
        self.gateway.answer(outcome)
    }

    pub fn basic(&self) -> String {
        basic(self.client.id.as_str(), self.secret.expose())
    }
}

pub fn basic(id: &str, secret: &str) -> String {
    let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", encode(id), encode(secret));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

pub fn redirect_params(answer: &HttpAnswer) -> Vec<(String, String)> {
    let location = answer.header("location").expect("location header");
    let query = location.split_once('?').map(|(_, q)| q).unwrap_or("");
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

pub fn param(params: &[(String, String)], name: &str) -> Option<String> {
    params
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

pub fn body(answer: &HttpAnswer) -> Value {
    answer.json_body().cloned().unwrap_or(Value::Null)
}

/// Asserts a JSON error answer's status and `error_type`.
#[track_caller]
pub fn assert_error(answer: &HttpAnswer, status: u16, error_type: &str) {
    assert_eq!(answer.status, status, "{:?}", answer.json_body());
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(
        body(answer)["error_type"],
        error_type,
        "{:?}",
        answer.json_body()
    );
    assert!(
        body(answer)["error_message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
}

/// A backend that is down: every call fails with `StoreError::Backend`.
pub struct DownStore;

fn down<T>() -> Result<T, conversion_gateway::StoreError> {
    Err(conversion_gateway::StoreError::backend(
        "reach the database",
        std::io::Error::other("connection refused to db.internal:5432"),
    ))
}

#[async_trait::async_trait]
impl conversion_gateway::EventSink for DownStore {
    async fn record(
        &self,
        _: &conversion_gateway::EventSubmission,
    ) -> Result<conversion_gateway::RecordOutcome, conversion_gateway::StoreError> {
        down()
    }
    async fn find_event(
        &self,
        _: uuid::Uuid,
    ) -> Result<Option<conversion_gateway::RecordedEvent>, conversion_gateway::StoreError> {
        down()
    }
    async fn purge_expired_claims(
        &self,
        _: time::OffsetDateTime,
        _: usize,
    ) -> Result<usize, conversion_gateway::StoreError> {
        down()
    }
}

/// A valid conversion event body.
pub fn conversion_body(email: &str) -> Value {
    json!({
        "event_type": "CONVERSION",
        "event_family": "CDP",
        "payload": {
            "conversion_identifier": "newsletter-signup",
            "email": email,
            "name": "Ana Lima",
            "tags": ["lead", "webinar"],
            "cf_plan": "gold",
            "available_for_mailing": true,
        }
    })
}

#[async_trait::async_trait]
impl conversion_gateway::TokenStore for DownStore {
    async fn insert_grant(
        &self,
        _: &conversion_gateway::Grant,
    ) -> Result<(), conversion_gateway::StoreError> {
        down()
    }
    async fn find_grant(
        &self,
        _: conversion_gateway::GrantId,
    ) -> Result<Option<conversion_gateway::Grant>, conversion_gateway::StoreError> {
        down()
    }
    async fn revoke_grant(
        &self,
        _: conversion_gateway::GrantId,
        _: time::OffsetDateTime,
    ) -> Result<bool, conversion_gateway::StoreError> {
        down()
    }
    async fn insert_code(
        &self,
        _: &conversion_gateway::CodeRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        down()
    }
    async fn take_code(
        &self,
        _: &conversion_gateway::SecretHash,
    ) -> Result<conversion_gateway::CodeTake, conversion_gateway::StoreError> {
        down()
    }
    async fn insert_access_token(
        &self,
        _: &conversion_gateway::AccessTokenRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        down()
    }
    async fn find_access_token(
        &self,
        _: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::AccessTokenRecord>, conversion_gateway::StoreError> {
        down()
    }
    async fn insert_refresh_token(
        &self,
        _: &conversion_gateway::RefreshTokenRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        down()
    }
    async fn find_refresh_token(
        &self,
        _: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::RefreshTokenRecord>, conversion_gateway::StoreError>
    {
        down()
    }
    async fn find_code(
        &self,
        _: &conversion_gateway::SecretHash,
    ) -> Result<conversion_gateway::CodeLookup, conversion_gateway::StoreError> {
        down()
    }
    async fn redeem_code(
        &self,
        _: &conversion_gateway::SecretHash,
        _: &conversion_gateway::RefreshTokenRecord,
        _: &conversion_gateway::AccessTokenRecord,
    ) -> Result<conversion_gateway::CodeTake, conversion_gateway::StoreError> {
        down()
    }
    async fn rotate_refresh_token(
        &self,
        _: &conversion_gateway::SecretHash,
        _: &conversion_gateway::RefreshTokenRecord,
        _: &conversion_gateway::AccessTokenRecord,
        _: time::OffsetDateTime,
    ) -> Result<conversion_gateway::Rotation, conversion_gateway::StoreError> {
        down()
    }
    async fn purge_expired(
        &self,
        _: time::OffsetDateTime,
        _: usize,
    ) -> Result<usize, conversion_gateway::StoreError> {
        down()
    }
}

/// A token store that works (in memory) but fails the next call of the
/// operations it is told to, once each: a transient outage at one step.
#[derive(Default)]
pub struct FlakyTokens {
    inner: conversion_gateway::MemoryTokenStore,
    armed: std::sync::Mutex<Vec<&'static str>>,
}

impl FlakyTokens {
    /// Makes the next call of `operation` (a `TokenStore` method's name)
    /// fail with `StoreError::Backend`.
    pub fn fail_next(&self, operation: &'static str) {
        self.armed.lock().unwrap().push(operation);
    }

    fn trip(&self, operation: &'static str) -> Result<(), conversion_gateway::StoreError> {
        let mut armed = self.armed.lock().unwrap();
        match armed.iter().position(|armed| *armed == operation) {
            Some(at) => {
                armed.remove(at);
                down()
            }
            None => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl conversion_gateway::TokenStore for FlakyTokens {
    async fn insert_grant(
        &self,
        grant: &conversion_gateway::Grant,
    ) -> Result<(), conversion_gateway::StoreError> {
        self.trip("insert_grant")?;
        self.inner.insert_grant(grant).await
    }
    async fn find_grant(
        &self,
        id: conversion_gateway::GrantId,
    ) -> Result<Option<conversion_gateway::Grant>, conversion_gateway::StoreError> {
        self.trip("find_grant")?;
        self.inner.find_grant(id).await
    }
    async fn revoke_grant(
        &self,
        id: conversion_gateway::GrantId,
        at: time::OffsetDateTime,
    ) -> Result<bool, conversion_gateway::StoreError> {
        self.trip("revoke_grant")?;
        self.inner.revoke_grant(id, at).await
    }
    async fn insert_code(
        &self,
        code: &conversion_gateway::CodeRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        self.trip("insert_code")?;
        self.inner.insert_code(code).await
    }
    async fn find_code(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<conversion_gateway::CodeLookup, conversion_gateway::StoreError> {
        self.trip("find_code")?;
        self.inner.find_code(hash).await
    }
    async fn take_code(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<conversion_gateway::CodeTake, conversion_gateway::StoreError> {
        self.trip("take_code")?;
        self.inner.take_code(hash).await
    }
    async fn redeem_code(
        &self,
        hash: &conversion_gateway::SecretHash,
        refresh: &conversion_gateway::RefreshTokenRecord,
        access: &conversion_gateway::AccessTokenRecord,
    ) -> Result<conversion_gateway::CodeTake, conversion_gateway::StoreError> {
        self.trip("redeem_code")?;
        self.inner.redeem_code(hash, refresh, access).await
    }
    async fn insert_access_token(
        &self,
        token: &conversion_gateway::AccessTokenRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        self.trip("insert_access_token")?;
        self.inner.insert_access_token(token).await
    }
    async fn find_access_token(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::AccessTokenRecord>, conversion_gateway::StoreError> {
        self.trip("find_access_token")?;
        self.inner.find_access_token(hash).await
    }
    async fn insert_refresh_token(
        &self,
        token: &conversion_gateway::RefreshTokenRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        self.trip("insert_refresh_token")?;
        self.inner.insert_refresh_token(token).await
    }
    async fn find_refresh_token(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::RefreshTokenRecord>, conversion_gateway::StoreError>
    {
        self.trip("find_refresh_token")?;
        self.inner.find_refresh_token(hash).await
    }
    async fn rotate_refresh_token(
        &self,
        old: &conversion_gateway::SecretHash,
        successor: &conversion_gateway::RefreshTokenRecord,
        access: &conversion_gateway::AccessTokenRecord,
        at: time::OffsetDateTime,
    ) -> Result<conversion_gateway::Rotation, conversion_gateway::StoreError> {
        self.trip("rotate_refresh_token")?;
        self.inner
            .rotate_refresh_token(old, successor, access, at)
            .await
    }
    async fn purge_expired(
        &self,
        cutoff: time::OffsetDateTime,
        limit: usize,
    ) -> Result<usize, conversion_gateway::StoreError> {
        self.trip("purge_expired")?;
        self.inner.purge_expired(cutoff, limit).await
    }
}

/// Scenarios of the refresh policies, run on every store (memory and
/// SQLite in `tests/oauth_refresh.rs`, PostgreSQL in
/// `tests/postgres_store.rs`).
pub mod refresh_scenarios {
    use super::*;
    use time::Duration;

    fn token(answer: &HttpAnswer, name: &str) -> String {
        body(answer)[name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name} in {:?}", answer.json_body()))
            .to_owned()
    }

    /// A client that behaves as the official Ruby client does: it keeps the
    /// first refresh token forever (never stores the one a refresh
    /// returns), refreshes when its access token expires and on every 401.
    /// Under the default policy it stays connected for 30 days.
    pub async fn a_client_that_never_stores_new_refresh_tokens_stays_connected(f: &Fixture) {
        let (mut access, first) = f.tokens().await;
        for hour in 0..30 * 24 {
            // Calls every hour; on a 401 it refreshes with its first token.
            if f.bearer(&access).await.is_err() {
                let answer = f.refresh(&first).await;
                assert_eq!(
                    answer.status,
                    200,
                    "disconnected after {hour} hours: {:?}",
                    answer.json_body()
                );
                access = token(&answer, "access_token");
                assert!(
                    f.bearer(&access).await.is_ok(),
                    "a fresh access token works after {hour} hours"
                );
            }
            f.clock.advance(Duration::hours(1));
        }
    }

    /// A client that stores and uses the successor it is given, and then
    /// presents its old token again (or a thief does): the grant is revoked.
    pub async fn a_retired_first_token_presented_after_its_successor_was_used_revokes_the_grant(
        f: &Fixture,
    ) {
        let (_, first) = f.tokens().await;
        f.clock.advance(Duration::days(1));
        let second = token(&f.refresh(&first).await, "refresh_token");
        f.clock.advance(Duration::minutes(10));
        let renewed = f.refresh(&second).await;
        assert_eq!(renewed.status, 200, "{:?}", renewed.json_body());
        let (access, third) = (
            token(&renewed, "access_token"),
            token(&renewed, "refresh_token"),
        );
        f.clock.advance(Duration::minutes(5));
        assert_error(&f.refresh(&first).await, 401, "INVALID_REFRESH_TOKEN");
        assert!(
            f.bearer(&access).await.is_err(),
            "the grant is revoked: its access tokens die"
        );
        assert_error(&f.refresh(&third).await, 401, "INVALID_REFRESH_TOKEN");
    }

    /// A client that rotates is held to strict rotation after its first
    /// refresh: its second token presented again is reuse.
    pub async fn a_rotating_client_is_held_to_strict_rotation(f: &Fixture) {
        let (_, first) = f.tokens().await;
        let second = token(&f.refresh(&first).await, "refresh_token");
        f.clock.advance(Duration::days(1));
        let third = token(&f.refresh(&second).await, "refresh_token");
        assert_ne!(third, second);
        f.clock.advance(Duration::minutes(5));
        assert_error(&f.refresh(&second).await, 401, "INVALID_REFRESH_TOKEN");
        assert_error(&f.refresh(&third).await, 401, "INVALID_REFRESH_TOKEN");
    }

    /// A thief holding the first token of a client that never rotates, and
    /// using the successor it is given, is found out at the client's next
    /// refresh: the grant is revoked and the thief's tokens die with it.
    pub async fn a_thief_that_rotates_the_first_token_is_found_out(f: &Fixture) {
        let (_, first) = f.tokens().await;
        let stolen = f.refresh(&first).await;
        let thief_successor = token(&stolen, "refresh_token");
        f.clock.advance(Duration::hours(1));
        let thief = f.refresh(&thief_successor).await;
        let thief_access = token(&thief, "access_token");
        f.clock.advance(Duration::days(1));
        assert_error(&f.refresh(&first).await, 401, "INVALID_REFRESH_TOKEN");
        assert!(f.bearer(&thief_access).await.is_err(), "the thief is out");
    }

    /// Concurrent refreshes of one token all succeed with one successor.
    pub async fn concurrent_refreshes_get_one_successor(f: Arc<Fixture>) {
        let (_, first) = f.tokens().await;
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let f = f.clone();
                let first = first.clone();
                tokio::spawn(async move { f.refresh(&first).await })
            })
            .collect();
        let mut successors = std::collections::HashSet::new();
        for task in tasks {
            successors.insert(token(&task.await.expect("task"), "refresh_token"));
        }
        assert_eq!(successors.len(), 1, "never two live successors");
        let successor = successors.into_iter().next().expect("one successor");
        assert_eq!(f.refresh(&successor).await.status, 200);
    }

    /// How many scenarios [`scenario`] runs.
    pub const SCENARIOS: usize = 5;

    /// Runs scenario `n` (below [`SCENARIOS`]) on `f`.
    pub async fn scenario(n: usize, f: Fixture) {
        match n {
            0 => a_client_that_never_stores_new_refresh_tokens_stays_connected(&f).await,
            1 => {
                a_retired_first_token_presented_after_its_successor_was_used_revokes_the_grant(&f)
                    .await
            }
            2 => a_rotating_client_is_held_to_strict_rotation(&f).await,
            3 => a_thief_that_rotates_the_first_token_is_found_out(&f).await,
            4 => concurrent_refreshes_get_one_successor(Arc::new(f)).await,
            _ => panic!("there are {SCENARIOS} scenarios, not {}", n + 1),
        }
    }

    /// Every scenario, each on a fixture of its own made by `fixture`.
    pub async fn all<F, Fut>(fixture: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Fixture>,
    {
        for n in 0..SCENARIOS {
            scenario(n, fixture().await).await;
        }
    }
}
