//! The gateways the OAuth targets drive.
//!
//! One gateway per process ([`Fixture::shared`]) serves every input that
//! spends nothing: it holds two registered applications and an account, and
//! no input can change it, since changing it takes a live code or token and
//! it has none. An input whose setup asks for a live code or live tokens gets
//! a fresh gateway ([`Fixture::fresh`]), built the same way, so that every
//! input meets the same state and a crash replays alone. Both run on one
//! current-thread runtime per process, on a manual clock and a seeded random
//! source.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use conversion_gateway::{
    Account, BearerError, Caller, Client, ClientRegistration, ClientSecret, Gateway, GatewayConfig,
    GrantId, HttpAnswer, ManualClock, RequestParts, SecretHasher, SeededRandom, Stores,
};
use time::Duration;

use crate::request::Setup;

/// The service's base address.
pub const BASE_URL: &str = "https://api.example";
/// The realm of its challenges.
pub const REALM: &str = "https://api.example/";
/// The main application's redirect URIs: plain, with a query, with an open
/// query, and with a fragment (which `redirect_with` must keep last).
pub const REDIRECT_URIS: [&str; 4] = [
    "https://app.example/callback",
    "https://app.example/callback?tenant=7&lang=pt",
    "https://app.example/cb?",
    "https://app.example/cb#section",
];
/// The other application's redirect URI.
pub const OTHER_REDIRECT_URI: &str = "https://other.example/cb";
/// RFC 7636 appendix B's verifier and its S256 challenge.
pub const CODE_VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
/// The S256 challenge of [`CODE_VERIFIER`].
pub const CODE_CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

/// Runs `future` to completion on the process's runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime")
        })
        .block_on(future)
}

/// A gateway with its applications, account and live credentials.
pub struct Fixture {
    /// The gateway.
    pub gateway: Gateway,
    /// Its clock.
    pub clock: Arc<ManualClock>,
    /// The main application (PKCE required when the setup says `pkce`).
    pub client: Client,
    /// Its secret.
    pub secret: ClientSecret,
    /// Another application, which always requires PKCE.
    pub other_client: Client,
    /// Its secret.
    pub other_secret: ClientSecret,
    /// The account that approved the main application.
    pub account: Account,
    /// A code of the main application: live after `fresh`, already exchanged
    /// after `tokens`, never issued on the shared gateway.
    pub code: String,
    /// Live tokens after `tokens`; never issued otherwise.
    pub access_token: String,
    /// See [`Fixture::access_token`].
    pub refresh_token: String,
    /// The grant of the live tokens, after `tokens`.
    pub grant: Option<GrantId>,
}

impl Fixture {
    /// The process's shared gateway, which no input changes.
    pub fn shared() -> &'static Fixture {
        static SHARED: OnceLock<Fixture> = OnceLock::new();
        SHARED.get_or_init(|| block_on(Fixture::build(Setup::default())))
    }

    /// A gateway prepared as `setup` says.
    pub fn fresh(setup: Setup) -> Fixture {
        block_on(Fixture::build(setup))
    }

    async fn build(setup: Setup) -> Fixture {
        let clock = Arc::new(ManualClock::at_epoch_of_tests());
        let gateway = Gateway::new(
            GatewayConfig::new(BASE_URL),
            Stores::in_memory(),
            SecretHasher::new([7; 32]),
        )
        .with_clock(clock.clone())
        .with_random(Arc::new(SeededRandom::new(1)));
        let (client, secret) = gateway
            .register_client(
                ClientRegistration::new("Lead Sync", REDIRECT_URIS).require_pkce(setup.pkce),
            )
            .await
            .expect("register the main application");
        let (other_client, other_secret) = gateway
            .register_client(
                ClientRegistration::new("Other App", [OTHER_REDIRECT_URI]).require_pkce(true),
            )
            .await
            .expect("register the other application");
        let account = Account::new("Acme", "owner@acme.example", &SeededRandom::new(2));
        gateway
            .create_account(&account)
            .await
            .expect("create the account");
        let mut fixture = Fixture {
            gateway,
            clock,
            client,
            secret,
            other_client,
            other_secret,
            account,
            code: format!("cgac_{}", "A".repeat(43)),
            access_token: format!("cgat_{}", "A".repeat(43)),
            refresh_token: format!("cgrt_{}", "A".repeat(43)),
            grant: None,
        };
        if setup.fresh {
            fixture.code = fixture.issue_code(setup.pkce).await;
            if setup.tokens {
                fixture.exchange_code(setup.pkce).await;
            }
            fixture.clock.advance(Duration::seconds(setup.advance));
        }
        fixture
    }

    /// Runs the dialog for the main application and approves it.
    async fn issue_code(&self, pkce: bool) -> String {
        let mut query = format!(
            "client_id={}&redirect_uri={}&state=s1",
            self.client.id, REDIRECT_URIS[0]
        );
        if pkce {
            query.push_str(&format!(
                "&code_challenge={CODE_CHALLENGE}&code_challenge_method=S256"
            ));
        }
        let request = self
            .gateway
            .authorization_request(&query)
            .await
            .expect("a valid dialog request");
        let approval = self
            .gateway
            .approve(&request, self.account.id)
            .await
            .expect("approve");
        approval.code().expose().to_owned()
    }

    /// Exchanges the code as a well-behaved client would.
    pub async fn exchange(&self, pkce: bool) -> HttpAnswer {
        let mut body = serde_json::json!({
            "client_id": self.client.id.as_str(),
            "client_secret": self.secret.expose(),
            "code": self.code,
        });
        if pkce {
            body["code_verifier"] = CODE_VERIFIER.into();
        }
        let body = body.to_string();
        let outcome = self
            .gateway
            .token(&RequestParts {
                content_type: Some("application/json"),
                body: body.as_bytes(),
                ..RequestParts::default()
            })
            .await;
        self.gateway.answer(outcome)
    }

    /// Exchanges the live code, keeping the tokens and their grant.
    async fn exchange_code(&mut self, pkce: bool) {
        let answer = self.exchange(pkce).await;
        assert_eq!(
            answer.status,
            200,
            "setup exchange: {:?}",
            answer.json_body()
        );
        let json = answer.json_body().expect("a JSON body");
        self.access_token = json["access_token"].as_str().expect("access").to_owned();
        self.refresh_token = json["refresh_token"].as_str().expect("refresh").to_owned();
        let caller = self.bearer(&self.access_token.clone()).await.expect("live");
        self.grant = Some(caller.grant_id);
    }

    /// The value of placeholder `name`, for [`crate::request::RequestText::materialize`].
    pub fn value(&self, name: &str) -> Option<String> {
        let value = match name {
            "client_id" => self.client.id.as_str(),
            "client_secret" => self.secret.expose(),
            "other_client_id" => self.other_client.id.as_str(),
            "other_client_secret" => self.other_secret.expose(),
            "code" => &self.code,
            "code_verifier" => CODE_VERIFIER,
            "code_challenge" => CODE_CHALLENGE,
            "access_token" => &self.access_token,
            "refresh_token" => &self.refresh_token,
            "redirect_uri" => REDIRECT_URIS[0],
            "redirect_uri_query" => REDIRECT_URIS[1],
            "redirect_uri_open" => REDIRECT_URIS[2],
            "redirect_uri_fragment" => REDIRECT_URIS[3],
            "other_redirect_uri" => OTHER_REDIRECT_URI,
            _ => return None,
        };
        Some(value.to_owned())
    }

    /// What no answer may echo: the client secrets, the code, and the live
    /// tokens (a token answer carries new ones, never those presented).
    pub fn secrets(&self) -> [&str; 5] {
        [
            self.secret.expose(),
            self.other_secret.expose(),
            &self.code,
            &self.access_token,
            &self.refresh_token,
        ]
    }

    /// Bearer authentication with `token`.
    pub async fn bearer(&self, token: &str) -> Result<Caller, BearerError> {
        self.gateway
            .authenticate_bearer(Some(&format!("Bearer {token}")))
            .await
    }

    /// What bearer authentication with the live access token says now:
    /// `Ok`, or the error's name.
    pub fn access_state(&self) -> Result<(), String> {
        block_on(self.bearer(&self.access_token))
            .map(|_| ())
            .map_err(|error| format!("{error:?}"))
    }
}
