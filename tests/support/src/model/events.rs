//! The event side at a smaller scale: conversions sent with and without an
//! `Idempotency-Key`, time from seconds to weeks, purges and restarts. The
//! model is a map of claims; the rule it holds the service to is that a
//! replayed key answers the first `event_uuid` until the claim's retention
//! (24 hours) ends, and never records a second event, and that no
//! acknowledged event is ever lost.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use conversion_gateway::{
    Account, ApiKey, Gateway, GatewayConfig, ManualClock, RequestParts, SecretHasher, SeededRandom,
};
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};
use time::Duration;
use uuid::Uuid;

use crate::restartable::Restartable;
use crate::{BASE_URL, conversion_body};

/// How long a key is remembered (the default `idempotency_retention`).
const CLAIM_RETENTION: i64 = 86_400;
/// What the purge keeps past a claim's end (the default `purge_retention`).
const PURGE_RETENTION: i64 = 7 * 86_400;

/// One step.
#[derive(Clone, Debug)]
pub enum EventOp {
    /// A conversion with body `body` (one of a few), under key `key` if any.
    Send { key: Option<u8>, body: u8 },
    /// Time passes.
    Advance { seconds: i64 },
    /// The periodic purge runs.
    Purge,
    /// The service restarts on the same stores.
    Restart,
}

/// What the service answered, as the model predicts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventObserved {
    /// Nothing to compare.
    Done,
    /// Accepted: the n-th event recorded, and whether it was a replay.
    Accepted { event: usize, replayed: bool },
    /// Refused with this status and `error_type`.
    Refused { status: u16, error_type: String },
    /// The purge deleted this many claims.
    Purged { claims: usize },
}

/// A key's claim, as the model keeps it.
#[derive(Clone, Debug)]
struct Claim {
    body: u8,
    event: usize,
    created_at: i64,
    purged: bool,
}

/// The model: time, the claims by key, how many events were recorded.
#[derive(Clone, Debug)]
pub struct EventModel {
    now: i64,
    claims: HashMap<u8, Claim>,
    events: usize,
    expected: EventObserved,
}

impl EventModel {
    fn apply(&mut self, op: &EventOp) -> EventObserved {
        match *op {
            EventOp::Send { key: None, .. } => self.record(),
            EventOp::Send {
                key: Some(key),
                body,
            } => {
                // A claim is live while its retention has not ended at the
                // new request's time.
                let live = self
                    .claims
                    .get(&key)
                    .filter(|claim| !claim.purged && claim.created_at + CLAIM_RETENTION > self.now);
                match live {
                    Some(claim) if claim.body == body => EventObserved::Accepted {
                        event: claim.event,
                        replayed: true,
                    },
                    Some(_) => EventObserved::Refused {
                        status: 409,
                        error_type: "IDEMPOTENCY_KEY_REUSED".into(),
                    },
                    None => {
                        let answer = self.record();
                        self.claims.insert(
                            key,
                            Claim {
                                body,
                                event: self.events - 1,
                                created_at: self.now,
                                purged: false,
                            },
                        );
                        answer
                    }
                }
            }
            EventOp::Advance { seconds } => {
                self.now += seconds;
                EventObserved::Done
            }
            EventOp::Purge => {
                let cutoff = self.now - PURGE_RETENTION;
                let mut claims = 0;
                for claim in self.claims.values_mut().filter(|claim| !claim.purged) {
                    if claim.created_at + CLAIM_RETENTION < cutoff {
                        claim.purged = true;
                        claims += 1;
                    }
                }
                EventObserved::Purged { claims }
            }
            EventOp::Restart => EventObserved::Done,
        }
    }

    fn record(&mut self) -> EventObserved {
        self.events += 1;
        EventObserved::Accepted {
            event: self.events - 1,
            replayed: false,
        }
    }
}

/// The proptest-state-machine glue of the event model.
pub struct EventModelMachine;

impl ReferenceStateMachine for EventModelMachine {
    type State = EventModel;
    type Transition = EventOp;

    fn init_state() -> BoxedStrategy<EventModel> {
        Just(EventModel {
            now: 0,
            claims: HashMap::new(),
            events: 0,
            expected: EventObserved::Done,
        })
        .boxed()
    }

    fn transitions(_: &EventModel) -> BoxedStrategy<EventOp> {
        prop_oneof![
            6 => (proptest::option::weighted(0.8, 0u8..3), 0u8..2)
                .prop_map(|(key, body)| EventOp::Send { key, body }),
            3 => super::reference::advance().prop_map(|seconds| EventOp::Advance { seconds }),
            2 => Just(EventOp::Purge),
            1 => Just(EventOp::Restart),
        ]
        .boxed()
    }

    fn apply(mut state: EventModel, op: &EventOp) -> EventModel {
        state.expected = state.apply(op);
        state
    }
}

/// The real service on `R`'s stores, and the events it acknowledged.
pub struct EventSystem<R: Restartable> {
    runtime: tokio::runtime::Runtime,
    stores: Option<R>,
    gateway: Gateway,
    clock: Arc<ManualClock>,
    restarts: u64,
    api_key: ApiKey,
    /// Each acknowledged event's uuid, in the order first acknowledged.
    events: Vec<Uuid>,
}

impl<R: Restartable> EventSystem<R> {
    fn gateway(stores: &R, clock: &Arc<ManualClock>, seed: u64) -> Gateway {
        Gateway::new(
            GatewayConfig::new(BASE_URL),
            stores.stores(),
            SecretHasher::new([8; 32]),
        )
        .with_clock(clock.clone())
        .with_random(Arc::new(SeededRandom::new(seed)))
    }

    fn send(&mut self, key: Option<u8>, body: u8) -> EventObserved {
        let event = conversion_body(&format!("lead-{body}@example.com")).to_string();
        let query = format!("api_key={}", self.api_key.expose());
        let key = key.map(|key| format!("model-key-{key}"));
        let outcome = self
            .runtime
            .block_on(self.gateway.record_conversion(&RequestParts {
                query: &query,
                content_type: Some("application/json"),
                authorization: None,
                idempotency_key: key.as_deref(),
                body: event.as_bytes(),
            }));
        match outcome {
            Ok(receipt) => {
                let uuid = receipt.event_uuids[0];
                let event = match self.events.iter().position(|known| *known == uuid) {
                    Some(known) => known,
                    None => {
                        self.events.push(uuid);
                        self.events.len() - 1
                    }
                };
                EventObserved::Accepted {
                    event,
                    replayed: receipt.replayed,
                }
            }
            Err(error) => {
                let answer = self.gateway.answer(error);
                EventObserved::Refused {
                    status: answer.status,
                    error_type: crate::body(&answer)["error_type"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                }
            }
        }
    }
}

/// The model-based test of idempotent intake on `R`'s stores.
pub struct IdempotencyTest<R>(PhantomData<R>);

impl<R: Restartable> StateMachineTest for IdempotencyTest<R> {
    type SystemUnderTest = EventSystem<R>;
    type Reference = EventModelMachine;

    fn init_test(_: &EventModel) -> EventSystem<R> {
        let (runtime, stores, clock) = super::start::<R>();
        let gateway = EventSystem::gateway(&stores, &clock, 1);
        let account = Account::new(
            "Model Account",
            "owner@model.example",
            &SeededRandom::new(9),
        );
        let api_key = runtime.block_on(async {
            gateway
                .create_account(&account)
                .await
                .expect("create the account");
            gateway
                .issue_api_key(account.id, "model")
                .await
                .expect("issue an API key")
                .1
        });
        EventSystem {
            runtime,
            stores: Some(stores),
            gateway,
            clock,
            restarts: 0,
            api_key,
            events: Vec::new(),
        }
    }

    fn apply(mut system: EventSystem<R>, model: &EventModel, op: EventOp) -> EventSystem<R> {
        let observed = match op {
            EventOp::Send { key, body } => system.send(key, body),
            EventOp::Advance { seconds } => {
                system.clock.advance(Duration::seconds(seconds));
                EventObserved::Done
            }
            EventOp::Purge => EventObserved::Purged {
                claims: system
                    .runtime
                    .block_on(system.gateway.purge_expired())
                    .expect("purge_expired")
                    .idempotency_claims,
            },
            EventOp::Restart => {
                let stores = system.stores.as_mut().expect("stores");
                system.runtime.block_on(stores.restart());
                system.restarts += 1;
                system.gateway = EventSystem::gateway(stores, &system.clock, 100 + system.restarts);
                EventObserved::Done
            }
        };
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

    fn check_invariants(system: &EventSystem<R>, model: &EventModel) {
        // Exactly the events the model recorded were acknowledged, and
        // every one of them is still stored (restarts and purges lose none).
        assert_eq!(system.events.len(), model.events, "events acknowledged");
        let stores = system.stores.as_ref().expect("stores").stores();
        for uuid in &system.events {
            let found = system
                .runtime
                .block_on(stores.events.find_event(*uuid))
                .expect("find_event");
            assert!(found.is_some(), "event {uuid} was acknowledged and lost");
        }
    }

    fn teardown(mut system: EventSystem<R>, _: EventModel) {
        if let Some(stores) = system.stores.take() {
            system.runtime.block_on(stores.stop());
        }
    }
}
