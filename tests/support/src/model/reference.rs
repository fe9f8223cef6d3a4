//! The reference model of the token lifecycle: a few vectors and the rules
//! of the spec, `COMPAT.md` and the three refresh policies, written to be
//! obviously right rather than fast. Each operation changes the model and
//! says what the service must answer ([`Observed`]).
//!
//! Tokens, codes and grants are known by their position in the order they
//! were issued; the system under test keeps the real strings in the same
//! order.

use conversion_gateway::RefreshPolicy;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest_state_machine::ReferenceStateMachine;

/// Two applications, so that one's tokens can be presented by the other.
pub const CLIENTS: usize = 2;
/// An authorization code's lifetime (the default `code_lifetime`).
const CODE_LIFETIME: i64 = 10 * 60;
/// An access token's lifetime (the spec: 86400 s).
const ACCESS_LIFETIME: i64 = 86_400;
/// How long a replaced client secret keeps working (the default
/// `client_secret_overlap`).
const SECRET_OVERLAP: i64 = 24 * 3600;
/// What the purge keeps past the end of a record's use (the default
/// `purge_retention`).
const RETENTION: i64 = 7 * 86_400;

/// Which of a client's secrets a request presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secret {
    /// The client's secret now.
    Current,
    /// The one it had before its last rotation (or, if it was never
    /// rotated, a wrong one).
    Previous,
}

/// A token of either kind, by its position among those issued.
#[derive(Clone, Copy, Debug)]
pub enum TokenRef {
    /// The n-th access token issued.
    Access(Index),
    /// The n-th distinct refresh token issued.
    Refresh(Index),
}

/// How a revocation request authenticates.
#[derive(Clone, Copy, Debug)]
pub enum RevokeAs {
    /// With the credentials of this client.
    Client(usize, Secret),
    /// With `Authorization: Bearer` and this access token.
    Bearer(Index),
}

/// One step of a client's, an operator's or time's life.
#[derive(Clone, Debug)]
pub enum Op {
    /// The account owner approves `client` in the dialog.
    Authorize { client: usize },
    /// The code's client exchanges it (again, if it was used).
    Exchange { code: Index, secret: Secret },
    /// The token's client refreshes with it.
    Refresh { token: Index, secret: Secret },
    /// `POST /auth/revoke` with the token.
    Revoke {
        token: TokenRef,
        by: RevokeAs,
        hint_refresh: bool,
    },
    /// A bearer call with the access token.
    Bearer { token: Index },
    /// `POST /auth/introspect` by `client` about the token.
    Introspect { token: TokenRef, client: usize },
    /// The operator switches the client off or on.
    SetClientActive { client: usize, active: bool },
    /// The operator gives the client a new secret.
    RotateSecret { client: usize },
    /// Time passes.
    Advance { seconds: i64 },
    /// The periodic purge runs.
    Purge,
    /// The service restarts (stores reopened from disk), possibly with
    /// another default refresh policy.
    Restart { default_policy: RefreshPolicy },
}

/// What the service answered, in the terms the model predicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Nothing to compare (time passed, an operator's change).
    Done,
    /// The dialog issued the code with this position.
    Code(usize),
    /// The dialog refused the client.
    DialogRefused,
    /// New tokens: the access token's position (always a new one) and the
    /// refresh token's (a new one, or one issued before).
    Tokens { access: usize, refresh: usize },
    /// An error answer: status and `error_type`.
    Refused { status: u16, error_type: String },
    /// A bearer call: accepted, or refused with this challenge `error`.
    Bearer(Result<(), &'static str>),
    /// A revocation answered `200 {}`.
    Revoked,
    /// An introspection answer: whether the token is active.
    Introspected { active: bool },
    /// The purge deleted this many token records.
    Purged { tokens: usize },
}

/// A client as the model knows it.
#[derive(Clone, Debug)]
pub struct ClientModel {
    /// Its own refresh policy, or the service's default.
    pub policy: Option<RefreshPolicy>,
    /// Switched on.
    pub active: bool,
    /// How many times its secret was rotated.
    pub rotations: usize,
    /// Until when its previous secret works, if it has one.
    pub previous_until: Option<i64>,
}

/// A grant: one approval of one client.
#[derive(Clone, Debug)]
pub struct GrantModel {
    /// When it was revoked (the first time).
    pub revoked_at: Option<i64>,
}

/// An authorization code.
#[derive(Clone, Debug)]
pub struct CodeModel {
    pub client: usize,
    pub grant: usize,
    pub issued_at: i64,
    pub used: bool,
    pub purged: bool,
}

/// A refresh token's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshState {
    /// Usable (under its policy).
    Active,
    /// Rotated at `at` into the refresh token at position `successor`.
    Rotated { at: i64, successor: usize },
}

/// A refresh token.
#[derive(Clone, Debug)]
pub struct RefreshModel {
    pub client: usize,
    pub grant: usize,
    /// Issued by a code exchange (not by a refresh).
    pub first: bool,
    pub state: RefreshState,
    pub purged: bool,
}

/// An access token.
#[derive(Clone, Debug)]
pub struct AccessModel {
    pub client: usize,
    pub grant: usize,
    pub issued_at: i64,
    pub purged: bool,
}

/// The whole model.
#[derive(Clone, Debug)]
pub struct Model {
    /// Seconds since the test began.
    pub now: i64,
    /// The service's default refresh policy.
    pub default_policy: RefreshPolicy,
    pub clients: Vec<ClientModel>,
    pub grants: Vec<GrantModel>,
    pub codes: Vec<CodeModel>,
    pub refresh: Vec<RefreshModel>,
    pub access: Vec<AccessModel>,
    /// What the last operation must have answered.
    pub expected: Observed,
}

/// What a refresh with a token does, by the policies' rules.
enum RefreshOutcome {
    /// Rotate it into a new successor.
    Rotate,
    /// Hand it back (reuse).
    Keep,
    /// Hand out its successor again.
    Successor(usize),
    /// Refuse it and revoke its grant: reuse of a retired token.
    Reuse,
    /// Refuse it: unknown, or its grant revoked.
    Invalid,
}

impl Model {
    fn policy_of(&self, client: usize) -> RefreshPolicy {
        self.clients[client].policy.unwrap_or(self.default_policy)
    }

    fn grant_revoked(&self, grant: usize) -> bool {
        self.grants[grant].revoked_at.is_some()
    }

    fn revoke(&mut self, grant: usize) {
        let now = self.now;
        self.grants[grant].revoked_at.get_or_insert(now);
    }

    /// Whether the client authenticates with `secret` now (switched off:
    /// no).
    fn authenticates(&self, client: usize, secret: Secret) -> bool {
        let model = &self.clients[client];
        let matches = match secret {
            Secret::Current => true,
            Secret::Previous => model.previous_until.is_some_and(|until| self.now < until),
        };
        matches && model.active
    }

    fn refused(status: u16, error_type: &str) -> Observed {
        Observed::Refused {
            status,
            error_type: error_type.to_owned(),
        }
    }

    /// A refresh token is live: known, active and of an unrevoked grant.
    fn refresh_live(&self, token: usize) -> bool {
        let model = &self.refresh[token];
        !model.purged && model.state == RefreshState::Active && !self.grant_revoked(model.grant)
    }

    /// What a refresh with `token` does now, by the rules of its client's
    /// policy (the client's credentials aside).
    fn refresh_outcome(&self, token: usize) -> RefreshOutcome {
        let model = &self.refresh[token];
        if model.purged || self.grant_revoked(model.grant) {
            return RefreshOutcome::Invalid;
        }
        let policy = self.policy_of(model.client);
        let (rotated_at, successor) = match model.state {
            RefreshState::Active => {
                return match policy {
                    RefreshPolicy::Reuse => RefreshOutcome::Keep,
                    _ => RefreshOutcome::Rotate,
                };
            }
            RefreshState::Rotated { at, successor } => (at, successor),
        };
        // When the successor was used, if it was (and is still known).
        let successor_used_at = match &self.refresh[successor] {
            RefreshModel {
                purged: false,
                state: RefreshState::Rotated { at, .. },
                ..
            } => Some(*at),
            _ => None,
        };
        // The adaptive policy (and reuse, which serves the same clients)
        // keeps a grant's first token until its successor is used; every
        // other retired token is reuse once the grace window has passed.
        let lenient = !matches!(policy, RefreshPolicy::Rotate { .. });
        let retired_at = match (lenient && model.first, successor_used_at) {
            (true, None) => return self.successor_if_live(successor),
            (true, Some(used_at)) => used_at,
            (false, _) => rotated_at,
        };
        let grace = match policy {
            RefreshPolicy::Adaptive { grace } | RefreshPolicy::Rotate { grace } => {
                grace.whole_seconds()
            }
            _ => 0,
        };
        if self.now - retired_at <= grace {
            self.successor_if_live(successor)
        } else {
            RefreshOutcome::Reuse
        }
    }

    fn successor_if_live(&self, successor: usize) -> RefreshOutcome {
        if self.refresh_live(successor) {
            RefreshOutcome::Successor(successor)
        } else {
            RefreshOutcome::Reuse
        }
    }

    /// Whether the token works now: an access token is accepted by a
    /// bearer call, a refresh token would be honoured by a refresh.
    pub fn works(&self, token: TokenKind) -> bool {
        match token {
            TokenKind::Access(n) => self.bearer(n).is_ok(),
            TokenKind::Refresh(n) => {
                self.clients[self.refresh[n].client].active
                    && matches!(
                        self.refresh_outcome(n),
                        RefreshOutcome::Rotate
                            | RefreshOutcome::Keep
                            | RefreshOutcome::Successor(_)
                    )
            }
        }
    }

    fn bearer(&self, token: usize) -> Result<(), &'static str> {
        let model = &self.access[token];
        if model.purged || self.grant_revoked(model.grant) {
            return Err("invalid_token");
        }
        if self.now >= model.issued_at + ACCESS_LIFETIME {
            return Err("expired_token");
        }
        if !self.clients[model.client].active {
            return Err("invalid_token");
        }
        Ok(())
    }

    fn new_access(&mut self, client: usize, grant: usize) -> usize {
        self.access.push(AccessModel {
            client,
            grant,
            issued_at: self.now,
            purged: false,
        });
        self.access.len() - 1
    }

    fn new_refresh(&mut self, client: usize, grant: usize, first: bool) -> usize {
        self.refresh.push(RefreshModel {
            client,
            grant,
            first,
            state: RefreshState::Active,
            purged: false,
        });
        self.refresh.len() - 1
    }

    /// The token a reference points at, among those issued so far.
    pub(super) fn resolve(&self, token: TokenRef) -> TokenKind {
        match token {
            TokenRef::Access(n) => TokenKind::Access(n.index(self.access.len())),
            TokenRef::Refresh(n) => TokenKind::Refresh(n.index(self.refresh.len())),
        }
    }

    fn apply(&mut self, op: &Op) -> Observed {
        match *op {
            Op::Authorize { client } => {
                if !self.clients[client].active {
                    return Observed::DialogRefused;
                }
                self.grants.push(GrantModel { revoked_at: None });
                self.codes.push(CodeModel {
                    client,
                    grant: self.grants.len() - 1,
                    issued_at: self.now,
                    used: false,
                    purged: false,
                });
                Observed::Code(self.codes.len() - 1)
            }
            Op::Exchange { code, secret } => {
                let n = code.index(self.codes.len());
                let code = self.codes[n].clone();
                if !self.authenticates(code.client, secret) {
                    return Self::refused(401, "ACCESS_DENIED");
                }
                if code.purged {
                    return Self::refused(401, "ACCESS_DENIED");
                }
                // RFC 6749 section 4.1.2: a code used twice revokes what
                // was issued with it.
                if code.used {
                    self.revoke(code.grant);
                    return Self::refused(401, "EXPIRED_CODE_GRANT");
                }
                // A refused exchange burns the code.
                self.codes[n].used = true;
                if self.now >= code.issued_at + CODE_LIFETIME {
                    return Self::refused(401, "EXPIRED_CODE_GRANT");
                }
                let refresh = self.new_refresh(code.client, code.grant, true);
                let access = self.new_access(code.client, code.grant);
                Observed::Tokens { access, refresh }
            }
            Op::Refresh { token, secret } => {
                let n = token.index(self.refresh.len());
                let (client, grant) = (self.refresh[n].client, self.refresh[n].grant);
                if !self.authenticates(client, secret) {
                    return Self::refused(401, "ACCESS_DENIED");
                }
                match self.refresh_outcome(n) {
                    RefreshOutcome::Invalid => Self::refused(401, "INVALID_REFRESH_TOKEN"),
                    RefreshOutcome::Reuse => {
                        self.revoke(grant);
                        Self::refused(401, "INVALID_REFRESH_TOKEN")
                    }
                    RefreshOutcome::Keep => Observed::Tokens {
                        access: self.new_access(client, grant),
                        refresh: n,
                    },
                    RefreshOutcome::Successor(successor) => Observed::Tokens {
                        access: self.new_access(client, grant),
                        refresh: successor,
                    },
                    RefreshOutcome::Rotate => {
                        let successor = self.new_refresh(client, grant, false);
                        self.refresh[n].state = RefreshState::Rotated {
                            at: self.now,
                            successor,
                        };
                        Observed::Tokens {
                            access: self.new_access(client, grant),
                            refresh: successor,
                        }
                    }
                }
            }
            Op::Revoke {
                token,
                by,
                hint_refresh: _,
            } => {
                let caller = match by {
                    RevokeAs::Client(client, secret) => {
                        if !self.authenticates(client, secret) {
                            return Self::refused(401, "ACCESS_DENIED");
                        }
                        client
                    }
                    RevokeAs::Bearer(access) => {
                        let n = access.index(self.access.len());
                        if self.bearer(n).is_err() {
                            return Self::refused(401, "UNAUTHORIZED");
                        }
                        self.access[n].client
                    }
                };
                // RFC 7009 section 2.2: an unknown token, or another
                // client's, is answered as revoked and revokes nothing.
                let (owner, grant, purged) = match self.resolve(token) {
                    TokenKind::Access(n) => {
                        let t = &self.access[n];
                        (t.client, t.grant, t.purged)
                    }
                    TokenKind::Refresh(n) => {
                        let t = &self.refresh[n];
                        (t.client, t.grant, t.purged)
                    }
                };
                if !purged && owner == caller {
                    self.revoke(grant);
                }
                Observed::Revoked
            }
            Op::Bearer { token } => Observed::Bearer(self.bearer(token.index(self.access.len()))),
            Op::Introspect { token, client } => {
                if !self.authenticates(client, Secret::Current) {
                    return Self::refused(401, "ACCESS_DENIED");
                }
                let token = self.resolve(token);
                let owner = match token {
                    TokenKind::Access(n) => self.access[n].client,
                    TokenKind::Refresh(n) => self.refresh[n].client,
                };
                Observed::Introspected {
                    active: owner == client && self.works(token),
                }
            }
            Op::SetClientActive { client, active } => {
                self.clients[client].active = active;
                Observed::Done
            }
            Op::RotateSecret { client } => {
                let model = &mut self.clients[client];
                model.rotations += 1;
                model.previous_until = Some(self.now + SECRET_OVERLAP);
                Observed::Done
            }
            Op::Advance { seconds } => {
                self.now += seconds;
                Observed::Done
            }
            Op::Purge => Observed::Purged {
                tokens: self.purge(),
            },
            Op::Restart { default_policy } => {
                self.default_policy = default_policy;
                Observed::Done
            }
        }
    }

    /// Deletes what stopped being usable more than the retention ago, and
    /// counts it: never a token any policy would still honour.
    fn purge(&mut self) -> usize {
        let cutoff = self.now - RETENTION;
        let mut deleted = 0;
        for code in self.codes.iter_mut().filter(|code| !code.purged) {
            if code.issued_at + CODE_LIFETIME < cutoff {
                code.purged = true;
                deleted += 1;
            }
        }
        for token in self.access.iter_mut().filter(|token| !token.purged) {
            if token.issued_at + ACCESS_LIFETIME < cutoff {
                token.purged = true;
                deleted += 1;
            }
        }
        let doomed: Vec<usize> = (0..self.refresh.len())
            .filter(|&n| {
                let token = &self.refresh[n];
                let revoked_before = self.grants[token.grant]
                    .revoked_at
                    .is_some_and(|at| at < cutoff);
                let retired_before = match token.state {
                    RefreshState::Active => false,
                    RefreshState::Rotated { at, successor } => {
                        // A grant's first token whose successor was never
                        // used is still honoured: kept.
                        let successor = &self.refresh[successor];
                        let honoured = token.first
                            && !successor.purged
                            && successor.state == RefreshState::Active;
                        at < cutoff && !honoured
                    }
                };
                !token.purged && (revoked_before || retired_before)
            })
            .collect();
        for n in &doomed {
            self.refresh[*n].purged = true;
        }
        deleted + doomed.len()
    }
}

/// A resolved token: its kind and position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// The n-th access token.
    Access(usize),
    /// The n-th refresh token.
    Refresh(usize),
}

/// The policies drawn for clients and for the service's default.
fn policy() -> impl Strategy<Value = RefreshPolicy> {
    prop_oneof![
        Just(RefreshPolicy::default()),
        (0i64..=60).prop_map(|grace| RefreshPolicy::Adaptive {
            grace: time::Duration::seconds(grace)
        }),
        (0i64..=60).prop_map(|grace| RefreshPolicy::Rotate {
            grace: time::Duration::seconds(grace)
        }),
        Just(RefreshPolicy::Reuse),
    ]
}

/// Time steps of every scale, from seconds (within grace windows) to weeks
/// (past the purge's retention).
pub(super) fn advance() -> impl Strategy<Value = i64> {
    prop_oneof![
        1i64..=90,
        (1i64..=120).prop_map(|minutes| minutes * 60),
        (1i64..=48).prop_map(|hours| hours * 3600),
        (1i64..=10).prop_map(|days| days * 86_400),
        (1i64..=4).prop_map(|weeks| weeks * 7 * 86_400),
    ]
}

fn secret() -> impl Strategy<Value = Secret> {
    prop_oneof![4 => Just(Secret::Current), 1 => Just(Secret::Previous)]
}

fn token_ref() -> impl Strategy<Value = TokenRef> {
    prop_oneof![
        any::<Index>().prop_map(TokenRef::Access),
        any::<Index>().prop_map(TokenRef::Refresh),
    ]
}

/// The proptest-state-machine glue: how the model starts and moves.
pub struct LifecycleModel;

impl ReferenceStateMachine for LifecycleModel {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        (
            policy(),
            proptest::collection::vec(proptest::option::of(policy()), CLIENTS),
        )
            .prop_map(|(default_policy, policies)| Model {
                now: 0,
                default_policy,
                clients: policies
                    .into_iter()
                    .map(|policy| ClientModel {
                        policy,
                        active: true,
                        rotations: 0,
                        previous_until: None,
                    })
                    .collect(),
                grants: Vec::new(),
                codes: Vec::new(),
                refresh: Vec::new(),
                access: Vec::new(),
                expected: Observed::Done,
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Op> {
        let client = 0..CLIENTS;
        let mut ops: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (
                3,
                client
                    .clone()
                    .prop_map(|client| Op::Authorize { client })
                    .boxed(),
            ),
            (
                5,
                advance()
                    .prop_map(|seconds| Op::Advance { seconds })
                    .boxed(),
            ),
            (2, Just(Op::Purge).boxed()),
            (
                1,
                policy()
                    .prop_map(|default_policy| Op::Restart { default_policy })
                    .boxed(),
            ),
            (
                1,
                (client.clone(), any::<bool>())
                    .prop_map(|(client, active)| Op::SetClientActive { client, active })
                    .boxed(),
            ),
            (
                1,
                client
                    .clone()
                    .prop_map(|client| Op::RotateSecret { client })
                    .boxed(),
            ),
        ];
        if !state.codes.is_empty() {
            ops.push((
                4,
                (any::<Index>(), secret())
                    .prop_map(|(code, secret)| Op::Exchange { code, secret })
                    .boxed(),
            ));
        }
        if !state.refresh.is_empty() {
            ops.push((
                8,
                (any::<Index>(), secret())
                    .prop_map(|(token, secret)| Op::Refresh { token, secret })
                    .boxed(),
            ));
        }
        if !state.access.is_empty() {
            ops.push((
                2,
                any::<Index>()
                    .prop_map(|token| Op::Bearer { token })
                    .boxed(),
            ));
            let by = prop_oneof![
                (client.clone(), secret()).prop_map(|(c, s)| RevokeAs::Client(c, s)),
                any::<Index>().prop_map(RevokeAs::Bearer),
            ];
            ops.push((
                1,
                (token_ref(), by, any::<bool>())
                    .prop_map(|(token, by, hint_refresh)| Op::Revoke {
                        token,
                        by,
                        hint_refresh,
                    })
                    .boxed(),
            ));
            ops.push((
                2,
                (token_ref(), client)
                    .prop_map(|(token, client)| Op::Introspect { token, client })
                    .boxed(),
            ));
        }
        proptest::strategy::Union::new_weighted(ops).boxed()
    }

    fn preconditions(state: &Model, op: &Op) -> bool {
        // Shrinking drops operations: what an operation points at must
        // still exist.
        let has_tokens = |token: &TokenRef| match token {
            TokenRef::Access(_) => !state.access.is_empty(),
            TokenRef::Refresh(_) => !state.refresh.is_empty(),
        };
        match op {
            Op::Exchange { .. } => !state.codes.is_empty(),
            Op::Refresh { .. } => !state.refresh.is_empty(),
            Op::Bearer { .. } => !state.access.is_empty(),
            Op::Revoke { token, by, .. } => {
                has_tokens(token)
                    && (!matches!(by, RevokeAs::Bearer(_)) || !state.access.is_empty())
            }
            Op::Introspect { token, .. } => has_tokens(token),
            _ => true,
        }
    }

    fn apply(mut state: Model, op: &Op) -> Model {
        state.expected = state.apply(op);
        state
    }
}
