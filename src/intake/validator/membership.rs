//! The sets the validator tests membership of, built so that a test costs
//! the same however many members there are: a body at the size limit can
//! hold 25,000 names, and a linear search per name made it quadratic.
//!
//! - [`SmallSet`]: searched while it holds a few members, hashed past that,
//!   so that the common case (a handful of tags) allocates nothing;
//! - [`HashedSet`]: hashed from the start, each key once;
//! - [`PositionSet`]: a bit per position in a list known in advance;
//! - [`CustomFields`]: the account's custom fields, searched by name.
//!
//! Hashing is SipHash under random keys (the standard library's
//! `RandomState`): the members come from the request, and a hash an attacker
//! could predict would let them fill one bucket and bring the quadratic cost
//! back.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
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

/// Account custom-field lists up to this long are always searched linearly:
/// a search costs no more than hashing the name would.
const LINEAR_CUSTOM_FIELDS: usize = 16;

/// The names of the account's custom fields, without the `cf_` prefix,
/// searched linearly until that costs more than hashing them once.
pub(super) struct CustomFields<'l> {
    /// The names, as the host gave them.
    names: &'l [&'l str],
    /// The position of each name in `names`, once built; see
    /// [`CustomFields::position`].
    index: Option<HashMap<&'l str, usize>>,
    /// Names compared by linear searches of `names` so far.
    compared: usize,
}

impl<'l> CustomFields<'l> {
    /// The account's custom fields `names`, not yet searched.
    pub(super) fn new(names: &'l [&'l str]) -> Self {
        CustomFields {
            names,
            index: None,
            compared: 0,
        }
    }

    /// The position of `name` (without its `cf_` prefix) among the account's
    /// custom fields (the first, should the account list it twice).
    pub(super) fn position(&mut self, name: &str) -> Option<usize> {
        if let Some(index) = &self.index {
            return index.get(name).copied();
        }
        let fields = self.names;
        // One linear search per `cf_` member would cost members times fields
        // (25,000 made-up `cf_` names against 1,000 fields: 25 million
        // comparisons). Once the searches have compared four times as many
        // names as the account has, hash them all: a validation then costs at
        // most five passes over the list plus one lookup per member, and a
        // typical event with a few custom fields never builds the index.
        if fields.len() > LINEAR_CUSTOM_FIELDS && self.compared >= 4 * fields.len() {
            let mut index = HashMap::with_capacity(fields.len());
            for (position, field) in fields.iter().enumerate() {
                index.entry(*field).or_insert(position);
            }
            let found = index.get(name).copied();
            self.index = Some(index);
            return found;
        }
        let found = fields.iter().position(|field| *field == name);
        self.compared += found.map_or(fields.len(), |position| position + 1);
        found
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
    fn keys_whose_hashes_collide_are_still_different_keys() {
        // SipHash under random keys makes a collision of all 64 bits
        // unlikely, not impossible: the keys decide.
        let a = Hashed { hash: 7, key: "a" };
        assert_eq!(a, Hashed { hash: 7, key: "a" });
        assert_ne!(a, Hashed { hash: 7, key: "b" });
        assert_ne!(a, Hashed { hash: 8, key: "a" });
        let mut table: HashSet<Hashed<&str>, PassHash> = HashSet::default();
        assert!(table.insert(Hashed { hash: 7, key: "a" }));
        assert!(table.insert(Hashed { hash: 7, key: "b" }));
        assert!(!table.insert(Hashed { hash: 7, key: "a" }));
        assert_eq!(table.len(), 2);
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
            assert!(!set.insert(position), "{position} a third time");
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
        // Bytes past the eighth are folded in, not lost: nine bytes that
        // differ in their last one hash apart.
        let hash = |last: u8| {
            let mut hasher = PassHash.build_hasher();
            hasher.write(&[0xff; 8]);
            hasher.write(&[last]);
            hasher.finish()
        };
        assert_eq!(hash(0x0f), 0xffff_ffff_ffff_fff0);
        assert_eq!(hash(0xf0), 0xffff_ffff_ffff_ff0f);
    }

    /// The table buckets a key by the SipHash kept beside it: were
    /// `Hashed::hash` to write nothing, every key would share one bucket,
    /// the same answers at a quadratic cost.
    #[test]
    fn a_hashed_key_is_bucketed_by_its_own_hash() {
        for hash in [0, 7, 0xdead_beef, u64::MAX] {
            assert_eq!(PassHash.hash_one(&Hashed { hash, key: "a" }), hash);
        }
        let set: HashedSet<&str> = ["a", "b"].into_iter().collect();
        for key in &set.table {
            assert_eq!(set.table.hasher().hash_one(key), set.keys.hash_one(key.key));
        }
    }

    #[test]
    fn custom_field_searches_stop_once_they_cost_a_few_passes() {
        let names: Vec<String> = (0..1000).map(|i| format!("f{i}")).collect();
        let account: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut fields = CustomFields::new(&account);
        // 20,000 lookups of names the account does not have, then real ones:
        // a linear search each would compare 20 million names.
        for i in 0..20_000 {
            assert_eq!(fields.position(&format!("x{i}")), None);
        }
        assert!(fields.index.is_some(), "the names were never indexed");
        assert!(
            fields.compared <= 5 * account.len(),
            "{} names compared",
            fields.compared
        );
        assert_eq!(fields.position("f0"), Some(0));
        assert_eq!(fields.position("f999"), Some(999));
        // A small account is always searched, never indexed.
        let small = ["plan", "segment", "plan"];
        let mut fields = CustomFields::new(&small);
        for _ in 0..1000 {
            assert_eq!(fields.position("plan"), Some(0));
            assert_eq!(fields.position("nope"), None);
        }
        assert!(fields.index.is_none());
        // An indexed account named twice keeps the first position.
        let mut twice = account.clone();
        twice.push("f5");
        let mut fields = CustomFields::new(&twice);
        for _ in 0..10 {
            fields.position("nope");
        }
        assert!(fields.index.is_some());
        assert_eq!(fields.position("f5"), Some(5));
    }

    /// The answers are the same searched or hashed (the test above), so the
    /// cost is what the switch changes: assert it, comparison by comparison.
    #[test]
    fn custom_fields_are_hashed_once_searches_compared_four_times_the_list() {
        let names: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
        let account: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut fields = CustomFields::new(&account);
        // (name, its position, names compared so far, hashed yet): a name
        // found at position p costs p + 1 comparisons, one missing costs 20;
        // the search that finds 80 (4 x 20) compared already hashes instead.
        for (step, (name, position, compared, hashed)) in [
            ("f0", Some(0), 1, false),
            ("f4", Some(4), 6, false),
            ("f19", Some(19), 26, false),
            ("x", None, 46, false),
            ("f13", Some(13), 60, false),
            ("x", None, 80, false),
            ("f3", Some(3), 80, true),
            ("x", None, 80, true),
            ("f19", Some(19), 80, true),
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(fields.position(name), position, "step {step}: {name}");
            assert_eq!(fields.compared, compared, "step {step}: {name}");
            assert_eq!(fields.index.is_some(), hashed, "step {step}: {name}");
        }
    }

    #[test]
    fn custom_field_lists_of_sixteen_names_or_fewer_are_always_searched() {
        let names: Vec<String> = (0..17).map(|i| format!("f{i}")).collect();
        let seventeen: Vec<&str> = names.iter().map(String::as_str).collect();
        let sixteen = &seventeen[..16];
        let mut fields = CustomFields::new(sixteen);
        for round in 1..=100 {
            assert_eq!(fields.position("x"), None);
            assert_eq!(fields.compared, 16 * round);
        }
        assert!(fields.index.is_none());
        // One more name, and four misses (68 names compared) are enough.
        let mut fields = CustomFields::new(&seventeen);
        for _ in 0..4 {
            assert_eq!(fields.position("x"), None);
        }
        assert_eq!((fields.compared, fields.index.is_some()), (68, false));
        assert_eq!(fields.position("f16"), Some(16));
        assert_eq!((fields.compared, fields.index.is_some()), (68, true));
    }
}
