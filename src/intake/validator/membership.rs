//! The sets the validator tests membership of, built so that a test costs
//! the same however many members there are: a body at the size limit can
//! hold 25,000 names, and a linear search per name made it quadratic.
//!
//! - [`SmallSet`]: searched while it holds a few members, hashed past that,
//!   so that the common case (a handful of tags) allocates nothing;
//! - [`HashedSet`]: hashed from the start, each key once;
//! - [`PositionSet`]: a bit per position in a list known in advance.
//!
//! Hashing is SipHash under random keys (the standard library's
//! `RandomState`): the members come from the request, and a hash an attacker
//! could predict would let them fill one bucket and bring the quadratic cost
//! back.

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};

use smallvec::SmallVec;

/// A set hashed from the start, each key exactly once: a key's SipHash is
/// computed on the way in and kept beside it, so that growing the table
/// rehashes nothing (the table's own hasher only passes that hash on).
#[derive(Debug, Default)]
pub(super) struct HashedSet<K> {
    keys: RandomState,
    table: HashSet<Hashed<K>, PassHash>,
}

impl<K: Hash + Eq> HashedSet<K> {
    /// Adds `key`; whether it was not there yet.
    pub(super) fn insert(&mut self, key: K) -> bool {
        let hash = self.keys.hash_one(&key);
        self.table.insert(Hashed { hash, key })
    }

    /// How many keys it holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }
}

impl<K: Hash + Eq> FromIterator<K> for HashedSet<K> {
    fn from_iter<I: IntoIterator<Item = K>>(keys: I) -> Self {
        let mut set = HashedSet {
            keys: RandomState::new(),
            table: HashSet::default(),
        };
        for key in keys {
            set.insert(key);
        }
        set
    }
}

/// A key and its hash, compared by both (the hash first: cheap, and almost
/// always decisive).
#[derive(Debug)]
struct Hashed<K> {
    hash: u64,
    key: K,
}

impl<K: PartialEq> PartialEq for Hashed<K> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl<K: Eq> Eq for Hashed<K> {}

impl<K> Hash for Hashed<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The hasher of a table of [`Hashed`] keys: it gives back the hash it is
/// handed.
#[derive(Clone, Copy, Debug, Default)]
struct PassHash;

impl BuildHasher for PassHash {
    type Hasher = PassHasher;

    fn build_hasher(&self) -> PassHasher {
        PassHasher(0)
    }
}

#[derive(Debug)]
struct PassHasher(u64);

impl Hasher for PassHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is ever called (by `Hashed::hash`); should another
        // write come, fold it in rather than lose it.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// How many members a [`SmallSet`] searches before it hashes them.
const SMALL: usize = 16;

/// A set searched while it holds at most [`SMALL`] members (inline, no
/// allocation, no hashing: cheaper for a few short keys) and hashed past
/// that, so that a test never costs more than [`SMALL`] comparisons.
#[derive(Debug, Default)]
pub(super) struct SmallSet<K> {
    few: SmallVec<[K; SMALL]>,
    many: Option<HashedSet<K>>,
}

impl<K: Hash + Eq> SmallSet<K> {
    /// Adds `key`; whether it was not there yet.
    #[inline]
    pub(super) fn insert(&mut self, key: K) -> bool {
        if self.many.is_some() || self.few.len() == SMALL {
            return self.insert_many(key);
        }
        if self.few.contains(&key) {
            return false;
        }
        self.few.push(key);
        true
    }

    /// [`SmallSet::insert`] past [`SMALL`] members: out of line, as few
    /// sets ever get there.
    #[inline(never)]
    fn insert_many(&mut self, key: K) -> bool {
        if self.many.is_none() {
            self.many = Some(self.few.drain(..).collect());
        }
        self.many.as_mut().is_some_and(|many| many.insert(key))
    }

    /// Whether it has started hashing its members.
    #[cfg(test)]
    pub(super) fn is_hashed(&self) -> bool {
        self.many.is_some()
    }
}

/// A set of positions in a list known in advance (the account's custom
/// fields): a bit each, inline for the first 128, so that a test costs the
/// same whatever the position.
#[derive(Debug, Default)]
pub(super) struct PositionSet(SmallVec<[u64; 2]>);

impl PositionSet {
    /// Adds `position`; whether it was not there yet.
    pub(super) fn insert(&mut self, position: usize) -> bool {
        let (word, bit) = (position / 64, 1u64 << (position % 64));
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0
            .get_mut(word)
            .is_some_and(|slot| std::mem::replace(slot, *slot | bit) & bit == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_set_holds_each_key_once() {
        let mut set = HashedSet::default();
        for round in 0..2 {
            for i in 0..10_000 {
                assert_eq!(set.insert(format!("k{i}")), round == 0, "k{i}");
            }
        }
        assert_eq!(set.len(), 10_000);
        let set: HashedSet<u32> = [1, 2, 2, 3].into_iter().collect();
        assert_eq!(set.len(), 3);
    }

    #[test]
    fn a_small_set_hashes_past_its_inline_members() {
        let keys: Vec<String> = (0..100).map(|i| format!("t{i}")).collect();
        let mut set = SmallSet::default();
        for (i, key) in keys.iter().enumerate() {
            assert!(set.insert(key.as_str()), "{key}");
            assert_eq!(set.is_hashed(), i >= SMALL, "{i}");
            assert!(set.few.len() <= SMALL);
        }
        for key in &keys {
            assert!(!set.insert(key.as_str()), "{key}");
        }
        let mut few = SmallSet::default();
        assert!(few.insert("a"));
        assert!(!few.insert("a"));
        assert!(few.insert("b"));
        assert!(!few.is_hashed());
    }

    #[test]
    fn a_position_set_marks_any_position() {
        let mut set = PositionSet::default();
        for position in [0, 1, 63, 64, 127, 128, 5000] {
            assert!(set.insert(position), "{position}");
            assert!(!set.insert(position), "{position}");
        }
        assert!(set.insert(65));
        assert_eq!(set.0.len(), 5000 / 64 + 1);
    }

    #[test]
    fn the_pass_hasher_gives_back_what_it_is_handed() {
        let mut hasher = PassHash.build_hasher();
        hasher.write_u64(0xdead_beef);
        assert_eq!(hasher.finish(), 0xdead_beef);
        let mut hasher = PassHash.build_hasher();
        hasher.write(&[1, 2]);
        assert_eq!(hasher.finish(), 0x0102);
    }
}
