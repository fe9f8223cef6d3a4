//! The dialog's and the account's pages in-process (feature `axum`), for
//! what a binary cannot show: a clock the test moves (session expiry, the
//! end of a throttle window), a password check slot the test holds, client
//! addresses beyond loopback, a host that forgets `ConnectInfo` (`dialog`),
//! a host that signs its users in itself (`host_sign_in`), and a host's own
//! HTML and the flows without a framework (`templates`). The service
//! binary's black-box tests (server/tests/server) cover the rest.

mod dialog;
mod host_sign_in;
mod templates;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use conversion_gateway::axum::pages::{self, PagesState};
use conversion_gateway::{
    Account, Argon2Passwords, Argon2Verifier, ClientRegistration, Gateway, GatewayConfig,
    HashingLimit, ManualClock, PageFlows, SeededRandom, ServerKey, SignInMethod, Stores,
    ThrottleLimits,
};
use tower::ServiceExt as _;

pub use conversion_gateway_testkit::{Reply, form};

/// The address requests come from unless a test says otherwise (TEST-NET-1).
const PEER: &str = "192.0.2.1:50000";

/// The application's registered redirect URI.
const REDIRECT_URI: &str = "http://127.0.0.1:9/callback";

/// The protections of our sign-in form.
#[derive(Clone, Debug)]
struct LoginLimits {
    /// Failed sign-ins allowed per account, address and window.
    throttle: ThrottleLimits,
    /// Concurrent Argon2 checks.
    hashing: HashingLimit,
}

impl LoginLimits {
    /// The service's defaults.
    fn recommended() -> Self {
        Self {
            throttle: ThrottleLimits::default(),
            hashing: HashingLimit::per_core(),
        }
    }
}

/// An account and an application, as a host would have them.
struct Fixture {
    client_id: String,
    client_secret: String,
    email: String,
    password: String,
    account: Account,
}

/// The pages and the JSON routes on in-memory stores, on a manual clock.
struct Server {
    router: Router,
    demo: Fixture,
    clock: Arc<ManualClock>,
    gateway: Arc<Gateway>,
}

impl Server {
    async fn new() -> Self {
        Self::with_limits(LoginLimits::recommended()).await
    }

    async fn with_limits(limits: LoginLimits) -> Self {
        // The cheapest Argon2 parameters keep the tests fast.
        let passwords = Argon2Passwords::new(8, 1).with_random(Arc::new(SeededRandom::new(5)));
        let sign_in = SignInMethod::form(
            Argon2Verifier::new(passwords.clone(), limits.hashing),
            limits.throttle,
        );
        Self::with_sign_in(sign_in, &passwords).await
    }

    /// The pages with `sign_in`; the account's password hashed by
    /// `passwords`.
    async fn with_sign_in(sign_in: SignInMethod, passwords: &Argon2Passwords) -> Self {
        let key = ServerKey::from_hex(&"42".repeat(32)).expect("64 hex digits");
        let clock = Arc::new(ManualClock::at_epoch_of_tests());
        let random = Arc::new(SeededRandom::new(7));
        let gateway = Arc::new(
            Gateway::new(
                GatewayConfig::new("http://gateway.test"),
                Stores::in_memory(),
                key.hasher(),
            )
            .with_clock(clock.clone())
            .with_random(random.clone()),
        );
        let mut account = Account::new("Demo Account", "demo@example.com", &*random);
        let password = "demo-password".to_owned();
        account.password_hash = Some(passwords.hash(&password));
        gateway.create_account(&account).await.expect("an account");
        let (client, secret) = gateway
            .register_client(ClientRegistration::new("Demo App", [REDIRECT_URI]))
            .await
            .expect("an application");
        let flows =
            PageFlows::new(gateway.clone(), &key, sign_in, clock.clone()).with_random(random);
        let router = pages::routes(PagesState::new(flows))
            .merge(conversion_gateway::axum::router(gateway.clone()));
        Self {
            router,
            demo: Fixture {
                client_id: client.id.to_string(),
                client_secret: secret.expose().to_owned(),
                email: account.email.clone(),
                password,
                account,
            },
            clock,
            gateway,
        }
    }

    /// Sends `request` as if from `address` (`None`: without the address,
    /// as a host that forgot `ConnectInfo` would).
    async fn send_from(&self, address: Option<&str>, mut request: Request<Body>) -> Reply {
        if let Some(address) = address {
            let address: SocketAddr = address.parse().expect("a socket address");
            request.extensions_mut().insert(ConnectInfo(address));
        }
        let response = self.router.clone().oneshot(request).await;
        Reply::read(response.expect("the router is infallible")).await
    }

    async fn get(&self, uri: &str, cookies: &str) -> Reply {
        let mut request = Request::get(uri);
        if !cookies.is_empty() {
            request = request.header("cookie", cookies);
        }
        self.send_from(Some(PEER), request.body(Body::empty()).unwrap())
            .await
    }

    fn dialog_query(&self) -> String {
        let redirect: String = form_urlencoded::byte_serialize(REDIRECT_URI.as_bytes()).collect();
        format!(
            "client_id={}&redirect_uri={redirect}&state=s1",
            self.demo.client_id
        )
    }

    /// Opens the sign-in page and posts `email` and `password` from
    /// `address`: the answer to the login form.
    async fn try_sign_in(&self, address: Option<&str>, email: &str, password: &str) -> Reply {
        let query = self.dialog_query();
        let page = self.get(&format!("/auth/dialog?{query}"), "").await;
        let nonce = page.cookie("cg_login").expect("a login nonce cookie");
        let fields = [
            ("action", "login"),
            ("query", query.as_str()),
            ("csrf", &page.hidden("csrf")),
            ("email", email),
            ("password", password),
        ];
        let request = Request::post("/auth/dialog")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", format!("cg_login={nonce}"))
            .body(Body::from(form(&fields)))
            .unwrap();
        self.send_from(address, request).await
    }

    /// Signs in as the demo account: the session cookie, as a `Cookie`
    /// header value.
    async fn sign_in(&self) -> String {
        let reply = self
            .try_sign_in(Some(PEER), &self.demo.email, &self.demo.password)
            .await;
        assert_eq!(reply.status, 303, "{}", reply.text());
        format!("cg_session={}", reply.cookie("cg_session").unwrap())
    }
}
