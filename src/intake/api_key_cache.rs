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
//!   dropped from this gateway's cache at once; switched off by another
//!   server instance (or directly in the store), it is refused here at the
//!   latest when its entry expires;
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
use crate::intake::api_key::ApiKeyId;
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

/// Authenticated API keys by their keyed hash, each for at most the time to
/// live. Time is given by the caller (the gateway's injected clock).
pub(crate) struct ApiKeyCache {
    ttl: Duration,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

impl ApiKeyCache {
    /// An empty cache whose entries live `ttl`; a zero (or negative) `ttl`
    /// keeps nothing.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The owner of the key with this hash, if it authenticated less than
    /// the time to live before `now`.
    pub(crate) fn get(&self, hash: &SecretHash, now: OffsetDateTime) -> Option<KeyOwner> {
        let mut entries = self.lock();
        match entries.get(hash.as_bytes()) {
            Some(entry) if now < entry.expires_at => Some(entry.owner.clone()),
            Some(_) => {
                entries.remove(hash.as_bytes());
                None
            }
            None => None,
        }
    }

    /// Remembers that the key with this hash authenticated as `owner` at
    /// `now`.
    pub(crate) fn insert(&self, hash: &SecretHash, owner: KeyOwner, now: OffsetDateTime) {
        if self.ttl <= Duration::ZERO {
            return;
        }
        let mut entries = self.lock();
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
    /// gateway), so that the next request looks it up in the store.
    pub(crate) fn forget(&self, key_id: ApiKeyId) {
        self.lock().retain(|_, entry| entry.owner.key_id != key_id);
    }

    /// How many keys are held, expired ones included.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        // The map is valid after any panic (each change is one call on
        // it), so a poisoned lock is taken over.
        self.entries
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

    #[test]
    fn an_entry_lives_exactly_its_time_to_live() {
        let cache = ApiKeyCache::new(Duration::seconds(10));
        let random = SeededRandom::new(1);
        let owner = owner(&random);
        cache.insert(&hash(1), owner.clone(), NOW);
        let found = cache.get(&hash(1), NOW + Duration::seconds(9)).unwrap();
        assert_eq!(found.key_id, owner.key_id);
        assert!(cache.get(&hash(2), NOW).is_none(), "another key");
        assert!(cache.get(&hash(1), NOW + Duration::seconds(10)).is_none());
        assert_eq!(cache.len(), 0, "an expired entry is dropped when met");
    }

    #[test]
    fn a_zero_time_to_live_keeps_nothing() {
        let cache = ApiKeyCache::new(Duration::ZERO);
        cache.insert(&hash(1), owner(&SeededRandom::new(1)), NOW);
        assert_eq!(cache.len(), 0);
        assert!(cache.get(&hash(1), NOW).is_none());
    }

    #[test]
    fn forgetting_a_key_drops_only_its_entry() {
        let cache = ApiKeyCache::new(Duration::seconds(10));
        let random = SeededRandom::new(1);
        let (first, second) = (owner(&random), owner(&random));
        cache.insert(&hash(1), first.clone(), NOW);
        cache.insert(&hash(2), second.clone(), NOW);
        cache.forget(first.key_id);
        assert!(cache.get(&hash(1), NOW).is_none());
        assert_eq!(cache.get(&hash(2), NOW).unwrap().key_id, second.key_id);
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
            cache.insert(&hash_of(index), owner.clone(), NOW - Duration::minutes(1));
        }
        for index in CAPACITY / 2..CAPACITY {
            cache.insert(&hash_of(index), owner.clone(), NOW);
        }
        assert_eq!(cache.len(), CAPACITY);
        cache.insert(&hash_of(CAPACITY), owner.clone(), NOW);
        assert_eq!(cache.len(), CAPACITY / 2 + 1, "the expired half went");
        assert!(cache.get(&hash_of(CAPACITY - 1), NOW).is_some());

        // Full of live entries: everything goes, the new one stays.
        for index in CAPACITY + 1..CAPACITY + CAPACITY / 2 {
            cache.insert(&hash_of(index), owner.clone(), NOW);
        }
        assert_eq!(cache.len(), CAPACITY);
        cache.insert(&hash_of(usize::MAX), owner.clone(), NOW);
        assert_eq!(cache.len(), 1);
        assert!(cache.get(&hash_of(usize::MAX), NOW).is_some());
    }
}
