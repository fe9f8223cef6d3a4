//! A short-lived cache of API-key lookups, in front of the [`ApiKeyStore`]
//! and the [`AccountStore`] on the conversion route.
//!
//! Every website conversion names its account's API key, so without a cache
//! each event costs two store reads before it is even validated (the key,
//! then its account): on SQLite two hops to the database's thread, on
//! PostgreSQL two round trips. Profiled under a conversion flood, those
//! reads were most of the time a durable store spent per event.
//!
//! What the cache may hold stale, and for how long, is bounded by its
//! time to live ([`crate::GatewayConfig::api_key_cache_ttl`]):
//!
//! - a key switched off through [`crate::Gateway::set_api_key_active`] is
//!   dropped from this gateway's cache at once, and a lookup that was in
//!   flight then (it read the key as on before the switch) cannot put it
//!   back: [`ApiKeyCache::forget`] starts a new generation, and
//!   [`ApiKeyCache::insert`] drops an answer to a question asked in an
//!   earlier one;
//! - switched off by another server instance (or directly in the store), a
//!   key is refused here at the latest one time to live after the change:
//!   an entry's life starts when the store was asked, and any lookup that
//!   found the key on asked before the change;
//! - only keys that authenticated are kept: an unknown or switched-off key
//!   is looked up in the store every time, so a key switched on is usable at
//!   once, and a flood of made-up keys cannot fill the cache.
//!
//! Entries are found by the key's keyed hash (HMAC-SHA256 under the server
//! key), never by the key itself, as the stores do: the plaintext key is not
//! kept in memory. A lookup by hash need not run in constant time, for the
//! same reason a database index on the hash need not: learning hash bytes
//! by timing does not help to forge a key without the server key.
//!
//! [`ApiKeyStore`]: crate::ApiKeyStore
//! [`AccountStore`]: crate::AccountStore

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use time::{Duration, OffsetDateTime};

use crate::account::Account;
use crate::records::api_key::ApiKeyId;
use crate::secret::SecretHash;

/// The most keys the cache holds. Far more than the active keys of the
/// accounts one instance serves at once (each account has at most a few);
/// when it is full, expired entries go first, then every entry.
const CAPACITY: usize = 16_384;

/// An authenticated key: its account, as loaded, and the key's id.
#[derive(Clone, Debug)]
pub(crate) struct KeyOwner {
    /// The account the key belongs to.
    pub(crate) account: Arc<Account>,
    /// The key's id, which scopes its `Idempotency-Key`s.
    pub(crate) key_id: ApiKeyId,
}

struct Entry {
    owner: KeyOwner,
    expires_at: OffsetDateTime,
}

/// What [`ApiKeyCache::get`] found.
pub(crate) enum Lookup {
    /// The key authenticated less than the time to live ago.
    Hit(KeyOwner),
    /// Not cached: ask the stores, and hand the answer with this miss to
    /// [`ApiKeyCache::insert`].
    Miss(Miss),
}

/// A question the cache could not answer: when it was asked, and in which
/// generation of the cache.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Miss {
    generation: u64,
    asked_at: OffsetDateTime,
}

struct State {
    entries: HashMap<[u8; 32], Entry>,
    /// Counts the calls of [`ApiKeyCache::forget`]. One for the whole
    /// cache, not one per key: a lookup knows only the key's hash until the
    /// store answers, and `forget` only the key's id, so no per-key counter
    /// could be shared by the two. A switch drops the answers in flight for
    /// every key; they are asked again at their next request.
    generation: u64,
}

/// Authenticated API keys by their keyed hash, each for at most the time to
/// live. Time is given by the caller (the gateway's injected clock).
pub(crate) struct ApiKeyCache {
    ttl: Duration,
    state: Mutex<State>,
}

impl ApiKeyCache {
    /// An empty cache whose entries live `ttl`; a zero (or negative) `ttl`
    /// keeps nothing.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            state: Mutex::new(State {
                entries: HashMap::new(),
                generation: 0,
            }),
        }
    }

    /// The owner of the key with this hash, if it authenticated less than
    /// the time to live before `now`; otherwise the [`Miss`] to hand to
    /// [`ApiKeyCache::insert`] with the stores' answer. Ask before the
    /// stores, so that the miss dates the question.
    pub(crate) fn get(&self, hash: &SecretHash, now: OffsetDateTime) -> Lookup {
        let mut state = self.lock();
        let miss = Miss {
            generation: state.generation,
            asked_at: now,
        };
        match state.entries.get(hash.as_bytes()) {
            Some(entry) if now < entry.expires_at => Lookup::Hit(entry.owner.clone()),
            Some(_) => {
                state.entries.remove(hash.as_bytes());
                Lookup::Miss(miss)
            }
            None => Lookup::Miss(miss),
        }
    }

    /// Remembers that the key with this hash authenticated as `owner`, as
    /// the stores answered the question of `miss`: until one time to live
    /// after it was asked, and not at all if [`ApiKeyCache::forget`] was
    /// called since (the answer may predate a switch).
    pub(crate) fn insert(&self, hash: &SecretHash, owner: KeyOwner, miss: Miss) {
        if self.ttl <= Duration::ZERO {
            return;
        }
        let mut state = self.lock();
        if state.generation != miss.generation {
            return;
        }
        // Dated from the question, not the answer: the store said "on" at
        // some point after `asked_at`, so a key switched off in the store at
        // `t` is refused here from `t` plus the time to live, however long
        // the lookup took.
        let now = miss.asked_at;
        let entries = &mut state.entries;
        if entries.len() >= CAPACITY && !entries.contains_key(hash.as_bytes()) {
            entries.retain(|_, entry| now < entry.expires_at);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        let expires_at = now + self.ttl;
        entries.insert(*hash.as_bytes(), Entry { owner, expires_at });
    }

    /// Forgets the key with this id (switched off or on through this
    /// gateway), so that the next request looks it up in the store; and
    /// makes [`ApiKeyCache::insert`] drop the answers of lookups already in
    /// flight, which may have read the key before the switch. Call it after
    /// the store has the switch.
    pub(crate) fn forget(&self, key_id: ApiKeyId) {
        let mut state = self.lock();
        state.generation += 1;
        state
            .entries
            .retain(|_, entry| entry.owner.key_id != key_id);
    }

    /// How many keys are held, expired ones included.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is valid after any panic (each change is one call on
        // the map, or one increment), so a poisoned lock is taken over.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::random::SeededRandom;

    const NOW: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);

    fn owner(random: &SeededRandom) -> KeyOwner {
        let account = Account::new("Acme", "owner@acme.example", random);
        KeyOwner {
            account: Arc::new(account),
            key_id: ApiKeyId(crate::random::random_uuid(random)),
        }
    }

    fn hash(byte: u8) -> SecretHash {
        SecretHash::from_bytes([byte; 32])
    }

    /// The owner cached for `hash` at `now`, if any.
    fn found(cache: &ApiKeyCache, hash: &SecretHash, now: OffsetDateTime) -> Option<KeyOwner> {
        match cache.get(hash, now) {
            Lookup::Hit(owner) => Some(owner),
            Lookup::Miss(_) => None,
        }
    }

    /// A miss for `hash` at `now` (panics on a hit).
    fn miss(cache: &ApiKeyCache, hash: &SecretHash, now: OffsetDateTime) -> Miss {
        match cache.get(hash, now) {
            Lookup::Miss(miss) => miss,
            Lookup::Hit(owner) => panic!("cached already: {owner:?}"),
        }
    }

    /// A lookup at `now` that missed, then found the key in the stores.
    fn remember(cache: &ApiKeyCache, hash: &SecretHash, owner: KeyOwner, now: OffsetDateTime) {
        let miss = miss(cache, hash, now);
        cache.insert(hash, owner, miss);
    }

    #[test]
    fn an_entry_lives_exactly_its_time_to_live() {
        let cache = ApiKeyCache::new(Duration::seconds(10));
        let random = SeededRandom::new(1);
        let owner = owner(&random);
        remember(&cache, &hash(1), owner.clone(), NOW);
        let found_later = found(&cache, &hash(1), NOW + Duration::seconds(9)).unwrap();
        assert_eq!(found_later.key_id, owner.key_id);
        assert!(found(&cache, &hash(2), NOW).is_none(), "another key");
        assert!(found(&cache, &hash(1), NOW + Duration::seconds(10)).is_none());
        assert_eq!(cache.len(), 0, "an expired entry is dropped when met");
    }

    #[test]
    fn a_zero_time_to_live_keeps_nothing() {
        let cache = ApiKeyCache::new(Duration::ZERO);
        remember(&cache, &hash(1), owner(&SeededRandom::new(1)), NOW);
        assert_eq!(cache.len(), 0);
        assert!(found(&cache, &hash(1), NOW).is_none());
    }

    #[test]
    fn forgetting_a_key_drops_only_its_entry() {
        let cache = ApiKeyCache::new(Duration::seconds(10));
        let random = SeededRandom::new(1);
        let (first, second) = (owner(&random), owner(&random));
        remember(&cache, &hash(1), first.clone(), NOW);
        remember(&cache, &hash(2), second.clone(), NOW);
        cache.forget(first.key_id);
        assert!(found(&cache, &hash(1), NOW).is_none());
        assert_eq!(found(&cache, &hash(2), NOW).unwrap().key_id, second.key_id);
    }

    #[test]
    fn a_lookup_in_flight_when_its_key_is_forgotten_is_not_cached() {
        let cache = ApiKeyCache::new(Duration::seconds(10));
        let owner = owner(&SeededRandom::new(1));
        // The request missed and read the key as on; then the key was
        // switched off and forgotten; then the request's answer arrives.
        let in_flight = miss(&cache, &hash(1), NOW);
        cache.forget(owner.key_id);
        cache.insert(&hash(1), owner.clone(), in_flight);
        assert_eq!(cache.len(), 0, "the stale answer was dropped");
        assert!(found(&cache, &hash(1), NOW).is_none());

        // A lookup that asked after the switch is cached as before.
        remember(&cache, &hash(1), owner.clone(), NOW);
        assert_eq!(found(&cache, &hash(1), NOW).unwrap().key_id, owner.key_id);
    }

    #[test]
    fn forgetting_any_key_drops_every_answer_in_flight() {
        let cache = ApiKeyCache::new(Duration::seconds(10));
        let random = SeededRandom::new(1);
        let (first, second) = (owner(&random), owner(&random));
        // Until the store answers, a lookup knows only the key's hash, not
        // which id `forget` will name: every answer in flight is dropped.
        let in_flight = miss(&cache, &hash(2), NOW);
        cache.forget(first.key_id);
        cache.insert(&hash(2), second.clone(), in_flight);
        assert!(found(&cache, &hash(2), NOW).is_none());
    }

    #[test]
    fn a_full_cache_makes_room_first_from_expired_entries_then_from_all() {
        let cache = ApiKeyCache::new(Duration::seconds(10));
        let random = SeededRandom::new(1);
        let owner = owner(&random);
        let hash_of = |index: usize| {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&(index as u64).to_le_bytes());
            SecretHash::from_bytes(bytes)
        };
        // Half inserted long ago (expired by the time the cache is full).
        for index in 0..CAPACITY / 2 {
            remember(
                &cache,
                &hash_of(index),
                owner.clone(),
                NOW - Duration::minutes(1),
            );
        }
        for index in CAPACITY / 2..CAPACITY {
            remember(&cache, &hash_of(index), owner.clone(), NOW);
        }
        assert_eq!(cache.len(), CAPACITY);
        remember(&cache, &hash_of(CAPACITY), owner.clone(), NOW);
        assert_eq!(cache.len(), CAPACITY / 2 + 1, "the expired half went");
        assert!(found(&cache, &hash_of(CAPACITY - 1), NOW).is_some());

        // Full of live entries: everything goes, the new one stays.
        for index in CAPACITY + 1..CAPACITY + CAPACITY / 2 {
            remember(&cache, &hash_of(index), owner.clone(), NOW);
        }
        assert_eq!(cache.len(), CAPACITY);
        remember(&cache, &hash_of(usize::MAX), owner.clone(), NOW);
        assert_eq!(cache.len(), 1);
        assert!(found(&cache, &hash_of(usize::MAX), NOW).is_some());
    }
}
