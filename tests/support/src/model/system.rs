//! The system under test: a real [`Gateway`] on restartable stores, driven
//! through its public calls, each answer turned into an [`Observed`] and
//! compared with the model's.

use std::marker::PhantomData;
use std::sync::Arc;

use conversion_gateway::{
    Account, BearerError, ClientRegistration, ClientSecret, Gateway, GatewayConfig, HttpAnswer,
    Introspection, ManualClock, RequestParts, SecretHasher, SeededRandom,
};
use proptest_state_machine::StateMachineTest;
use serde_json::json;
use time::Duration;

use super::reference::{LifecycleModel, Model, Observed, Op, RevokeAs, Secret, TokenKind};
use crate::restartable::Restartable;
use crate::{BASE_URL, REDIRECT_URI, basic, body, param, redirect_params};

/// The resource server that checks, after every step, which tokens work.
const CHECKER_ID: &str = "model-checker";
const CHECKER_SECRET: &str = "model-checker-secret-0123456789";
/// The server key: the same across restarts, as a key file keeps it.
const SERVER_KEY: [u8; 32] = [7; 32];

/// The real service and what it handed out, in the order it did.
pub struct System<R: Restartable> {
    runtime: tokio::runtime::Runtime,
    stores: Option<R>,
    gateway: Gateway,
    clock: Arc<ManualClock>,
    config: GatewayConfig,
    restarts: u64,
    clients: Vec<conversion_gateway::Client>,
    /// Each client's secrets, oldest first: the last is its current one.
    secrets: Vec<Vec<ClientSecret>>,
    account: Account,
    codes: Vec<String>,
    access: Vec<String>,
    refresh: Vec<String>,
}

impl<R: Restartable> System<R> {
    fn gateway(stores: &R, config: &GatewayConfig, clock: &Arc<ManualClock>, seed: u64) -> Gateway {
        Gateway::new(
            config.clone(),
            stores.stores(),
            SecretHasher::new(SERVER_KEY),
        )
        .with_clock(clock.clone())
        .with_random(Arc::new(SeededRandom::new(seed)))
        .with_resource_server(CHECKER_ID, &ClientSecret::new(CHECKER_SECRET))
    }

    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    fn secret(&self, client: usize, which: Secret) -> String {
        let secrets = &self.secrets[client];
        match which {
            Secret::Current => secrets[secrets.len() - 1].expose().to_owned(),
            Secret::Previous if secrets.len() > 1 => secrets[secrets.len() - 2].expose().to_owned(),
            Secret::Previous => "not-the-secret-of-this-client".to_owned(),
        }
    }

    fn token_string(&self, token: TokenKind) -> &str {
        match token {
            TokenKind::Access(n) => &self.access[n],
            TokenKind::Refresh(n) => &self.refresh[n],
        }
    }

    fn form(&self, client: usize, secret: Secret, fields: &[(&str, &str)]) -> String {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("client_id", self.clients[client].id.as_str());
        form.append_pair("client_secret", &self.secret(client, secret));
        for (name, value) in fields {
            form.append_pair(name, value);
        }
        form.finish()
    }

    fn post_token(&mut self, form: &str) -> Observed {
        let outcome = self.block_on(self.gateway.token(&RequestParts {
            query: "",
            content_type: Some("application/x-www-form-urlencoded"),
            authorization: None,
            idempotency_key: None,
            body: form.as_bytes(),
        }));
        let answer = self.gateway.answer(outcome);
        if answer.status != 200 {
            return refused(&answer);
        }
        let json = body(&answer);
        let access = json["access_token"].as_str().expect("access_token");
        let refresh = json["refresh_token"].as_str().expect("refresh_token");
        self.access.push(access.to_owned());
        let refresh = match self.refresh.iter().position(|known| known == refresh) {
            Some(known) => known,
            None => {
                self.refresh.push(refresh.to_owned());
                self.refresh.len() - 1
            }
        };
        Observed::Tokens {
            access: self.access.len() - 1,
            refresh,
        }
    }

    fn bearer(&self, token: &str) -> Result<(), &'static str> {
        let header = format!("Bearer {token}");
        match self.block_on(self.gateway.authenticate_bearer(Some(&header))) {
            Ok(_) => Ok(()),
            Err(BearerError::Expired) => Err("expired_token"),
            Err(BearerError::Invalid) => Err("invalid_token"),
            Err(other) => panic!("a bearer call failed: {other}"),
        }
    }

    fn introspect(&self, authorization: &str, token: &str) -> Result<bool, Observed> {
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .finish();
        let outcome = self.block_on(self.gateway.introspect(&RequestParts {
            query: "",
            content_type: Some("application/x-www-form-urlencoded"),
            authorization: Some(authorization),
            idempotency_key: None,
            body: form.as_bytes(),
        }));
        match outcome {
            Ok(Introspection::Active(_)) => Ok(true),
            Ok(Introspection::Inactive) => Ok(false),
            Err(error) => Err(refused(&self.gateway.answer(error))),
            Ok(other) => panic!("an introspection answer the model does not know: {other:?}"),
        }
    }

    fn apply(&mut self, model: &Model, op: &Op) -> Observed {
        match *op {
            Op::Authorize { client } => {
                let query = format!(
                    "client_id={}&redirect_uri={}",
                    self.clients[client].id,
                    form_urlencoded::byte_serialize(REDIRECT_URI.as_bytes()).collect::<String>()
                );
                let Ok(request) = self.block_on(self.gateway.authorization_request(&query)) else {
                    return Observed::DialogRefused;
                };
                let approval = self
                    .block_on(self.gateway.approve(&request, self.account.id))
                    .expect("approve");
                let code = param(&redirect_params(&self.gateway.answer(&approval)), "code")
                    .expect("a code in the redirect");
                self.codes.push(code);
                Observed::Code(self.codes.len() - 1)
            }
            Op::Exchange { code, secret } => {
                let n = code.index(self.codes.len());
                let client = model.codes[n].client;
                let form = self.form(
                    client,
                    secret,
                    &[
                        ("grant_type", "authorization_code"),
                        ("code", &self.codes[n]),
                    ],
                );
                self.post_token(&form)
            }
            Op::Refresh { token, secret } => {
                let n = token.index(self.refresh.len());
                let client = model.refresh[n].client;
                let form = self.form(
                    client,
                    secret,
                    &[
                        ("grant_type", "refresh_token"),
                        ("refresh_token", &self.refresh[n]),
                    ],
                );
                self.post_token(&form)
            }
            Op::Revoke {
                token,
                by,
                hint_refresh,
            } => {
                let token = model.resolve(token);
                let mut fields = vec![("token", self.token_string(token).to_owned())];
                if hint_refresh {
                    fields.push(("token_type_hint", "refresh_token".to_owned()));
                }
                let (form, authorization) = match by {
                    RevokeAs::Client(client, secret) => {
                        let borrowed: Vec<(&str, &str)> =
                            fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
                        (self.form(client, secret, &borrowed), None)
                    }
                    RevokeAs::Bearer(access) => {
                        let mut form = form_urlencoded::Serializer::new(String::new());
                        for (name, value) in &fields {
                            form.append_pair(name, value);
                        }
                        let bearer = &self.access[access.index(self.access.len())];
                        (form.finish(), Some(format!("Bearer {bearer}")))
                    }
                };
                let outcome = self.block_on(self.gateway.revoke(&RequestParts {
                    query: "",
                    content_type: Some("application/x-www-form-urlencoded"),
                    authorization: authorization.as_deref(),
                    idempotency_key: None,
                    body: form.as_bytes(),
                }));
                let answer = self.gateway.answer(outcome);
                if answer.status == 200 {
                    assert_eq!(body(&answer), json!({}), "a revocation answers {{}}");
                    Observed::Revoked
                } else {
                    refused(&answer)
                }
            }
            Op::Bearer { token } => {
                Observed::Bearer(self.bearer(&self.access[token.index(self.access.len())]))
            }
            Op::Introspect { token, client } => {
                let token = model.resolve(token);
                let authorization = basic(
                    self.clients[client].id.as_str(),
                    &self.secret(client, Secret::Current),
                );
                match self.introspect(&authorization, self.token_string(token)) {
                    Ok(active) => Observed::Introspected { active },
                    Err(refused) => refused,
                }
            }
            Op::SetClientActive { client, active } => {
                let id = self.clients[client].id.clone();
                self.block_on(self.gateway.set_client_active(&id, active))
                    .expect("set_client_active");
                Observed::Done
            }
            Op::RotateSecret { client } => {
                let id = self.clients[client].id.clone();
                let secret = self
                    .block_on(self.gateway.rotate_client_secret(&id))
                    .expect("rotate_client_secret");
                self.secrets[client].push(secret);
                Observed::Done
            }
            Op::Advance { seconds } => {
                self.clock.advance(Duration::seconds(seconds));
                Observed::Done
            }
            Op::Purge => {
                let report = self
                    .block_on(self.gateway.purge_expired())
                    .expect("purge_expired");
                Observed::Purged {
                    tokens: report.tokens,
                }
            }
            Op::Restart { default_policy } => {
                let stores = self.stores.as_mut().expect("stores");
                self.runtime.block_on(stores.restart());
                self.restarts += 1;
                self.config.refresh_policy = default_policy;
                self.gateway =
                    Self::gateway(stores, &self.config, &self.clock, 100 + self.restarts);
                Observed::Done
            }
        }
    }

    /// Asks, as a resource server, whether every token issued so far is
    /// active, and compares each answer with what the model says works.
    fn check_every_token(&self, model: &Model) {
        let authorization = basic(CHECKER_ID, CHECKER_SECRET);
        let tokens = (0..self.access.len())
            .map(TokenKind::Access)
            .chain((0..self.refresh.len()).map(TokenKind::Refresh));
        for token in tokens {
            let active = self
                .introspect(&authorization, self.token_string(token))
                .unwrap_or_else(|refused| panic!("introspection refused: {refused:?}"));
            assert_eq!(
                active,
                model.works(token),
                "{token:?} at {}s on {}: the service says active = {active}, the model \
                 disagrees\n{model:#?}",
                model.now,
                R::NAME
            );
        }
    }
}

fn refused(answer: &HttpAnswer) -> Observed {
    let json = body(answer);
    let error_type = json["error_type"]
        .as_str()
        .or_else(|| json["errors"][0]["error_type"].as_str())
        .unwrap_or("")
        .to_owned();
    Observed::Refused {
        status: answer.status,
        error_type,
    }
}

/// The model-based test of the token lifecycle on `R`'s stores.
pub struct LifecycleTest<R>(PhantomData<R>);

impl<R: Restartable> StateMachineTest for LifecycleTest<R> {
    type SystemUnderTest = System<R>;
    type Reference = LifecycleModel;

    fn init_test(model: &Model) -> System<R> {
        let (runtime, stores, clock) = super::start::<R>();
        let mut config = GatewayConfig::new(BASE_URL);
        config.refresh_policy = model.default_policy;
        let gateway = System::gateway(&stores, &config, &clock, 1);
        let (clients, secrets) = runtime.block_on(async {
            let mut clients = Vec::new();
            let mut secrets = Vec::new();
            for (n, client) in model.clients.iter().enumerate() {
                let mut registration =
                    ClientRegistration::new(format!("Model App {n}"), [REDIRECT_URI]);
                if let Some(policy) = client.policy {
                    registration = registration.refresh_policy(policy);
                }
                let (client, secret) = gateway
                    .register_client(registration)
                    .await
                    .expect("register a client");
                clients.push(client);
                secrets.push(vec![secret]);
            }
            (clients, secrets)
        });
        let account = Account::new(
            "Model Account",
            "owner@model.example",
            &SeededRandom::new(9),
        );
        runtime
            .block_on(gateway.create_account(&account))
            .expect("create the account");
        System {
            runtime,
            stores: Some(stores),
            gateway,
            clock,
            config,
            restarts: 0,
            clients,
            secrets,
            account,
            codes: Vec::new(),
            access: Vec::new(),
            refresh: Vec::new(),
        }
    }

    fn apply(mut system: System<R>, model: &Model, op: Op) -> System<R> {
        // The model was moved by `op` already; the answer is the system's.
        let observed = system.apply(model, &op);
        assert_eq!(
            observed,
            model.expected,
            "{op:?} at {}s on {}: the service answered {observed:?}, the model expected {:?}",
            model.now,
            R::NAME,
            model.expected
        );
        system
    }

    fn check_invariants(system: &System<R>, model: &Model) {
        system.check_every_token(model);
    }

    fn teardown(mut system: System<R>, _: Model) {
        if let Some(stores) = system.stores.take() {
            system.block_on(stores.stop());
        }
    }
}
