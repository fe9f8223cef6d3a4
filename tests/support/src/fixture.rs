//! A gateway on in-memory stores, a manual clock and a seeded random
//! source, with one registered app, a second app and one account; and the
//! calls a client makes, answered as HTTP.

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
    /// The configuration the gateway was built with, kept for a restart.
    pub config: GatewayConfig,
}

/// A `token_type_hint` (RFC 7009 section 2.1, RFC 7662 section 2.1).
#[derive(Clone, Copy, Debug)]
pub enum TokenHint {
    AccessToken,
    RefreshToken,
}

impl TokenHint {
    pub const BOTH: [TokenHint; 2] = [TokenHint::AccessToken, TokenHint::RefreshToken];

    /// The hint as a request sends it.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenHint::AccessToken => "access_token",
            TokenHint::RefreshToken => "refresh_token",
        }
    }
}

/// What [`Fixture::with_the_unhinted_lookup_failing`] sets up.
pub struct HintedLookup {
    pub fixture: Fixture,
    pub tokens: Arc<crate::FlakyTokens>,
    pub access: String,
    pub refresh: String,
    /// `token` (of the hinted kind) and `token_type_hint`, form-encoded.
    pub form: String,
    /// The `TokenStore` lookup armed to fail: the kind not hinted.
    pub unreached: &'static str,
}

impl HintedLookup {
    /// Whether the lookup of the kind not hinted was never made.
    pub fn unhinted_lookup_never_made(&self) -> bool {
        self.tokens.is_armed(self.unreached)
    }
}

impl Fixture {
    pub async fn new() -> Self {
        Self::with_config(|_| {}).await
    }

    pub async fn with_config(adjust: impl FnOnce(&mut GatewayConfig)) -> Self {
        Self::with_stores(Stores::in_memory(), adjust).await
    }

    /// The fixture on a token store that fails the operations it is told
    /// to ([`crate::FlakyTokens::fail_next`]), the other stores in memory.
    pub async fn with_flaky_tokens() -> (Self, Arc<crate::FlakyTokens>) {
        let tokens = Arc::new(crate::FlakyTokens::default());
        let stores = Stores {
            tokens: tokens.clone(),
            ..Stores::in_memory()
        };
        (Self::with_stores(stores, |_| {}).await, tokens)
    }

    /// For the lookup order `token_type_hint` sets (RFC 7662 and RFC 7009,
    /// section 2.1): a fixture on [`crate::FlakyTokens`], a grant's tokens,
    /// and the lookup of the kind `hint` does not name armed to fail.
    pub async fn with_the_unhinted_lookup_failing(hint: TokenHint) -> HintedLookup {
        let (fixture, tokens) = Self::with_flaky_tokens().await;
        let (access, refresh) = fixture.tokens().await;
        let (token, unreached) = match hint {
            TokenHint::AccessToken => (&access, "find_refresh_token"),
            TokenHint::RefreshToken => (&refresh, "find_access_token"),
        };
        let form = format!("token={token}&token_type_hint={}", hint.as_str());
        tokens.fail_next(unreached);
        HintedLookup {
            fixture,
            tokens,
            access,
            refresh,
            form,
            unreached,
        }
    }

    pub async fn with_stores(stores: Stores, adjust: impl FnOnce(&mut GatewayConfig)) -> Self {
        let mut config = GatewayConfig::new(BASE_URL);
        adjust(&mut config);
        let clock = Arc::new(ManualClock::at_epoch_of_tests());
        let gateway = Gateway::new(config.clone(), stores.clone(), SecretHasher::new([42; 32]))
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
            config,
        }
    }

    /// The same service restarted on `stores` (the same data, reopened):
    /// a new gateway with the same configuration, server key and clock, and
    /// a random source seeded with `seed` (a restarted process does not
    /// draw the same random bytes again).
    pub fn restart(&mut self, stores: Stores, seed: u64) {
        let gateway = Gateway::new(
            self.config.clone(),
            stores.clone(),
            SecretHasher::new([42; 32]),
        )
        .with_clock(self.clock.clone())
        .with_random(Arc::new(SeededRandom::new(seed)));
        self.gateway = Arc::new(gateway);
        self.stores = stores;
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

    /// Exchanges a fresh code of the second app (`other_client`) for the
    /// same account; returns (access_token, refresh_token).
    pub async fn tokens_of_other_client(&self) -> (String, String) {
        let query = format!(
            "client_id={}&redirect_uri={}&response_type=code&state=s",
            self.other_client.id,
            form_urlencoded::byte_serialize(self.other_client.redirect_uris[0].as_bytes())
                .collect::<String>()
        );
        let request = self
            .gateway
            .authorization_request(&query)
            .await
            .expect("valid authorization request");
        let approval = self
            .gateway
            .approve(&request, self.account.id)
            .await
            .expect("approve");
        let code = param(&redirect_params(&self.gateway.answer(&approval)), "code")
            .expect("code in redirect");
        let answer = self
            .token_json(json!({
                "client_id": self.other_client.id,
                "client_secret": self.other_secret.expose(),
                "code": code,
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

    /// `POST /auth/introspect` with a form body.
    pub async fn introspect(&self, authorization: Option<&str>, form: &str) -> HttpAnswer {
        let outcome = self
            .gateway
            .introspect(&RequestParts {
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
