//! The order of a recorded payload's members: sorted by name, as a
//! [`serde_json::Map`] sorts its keys, so that the text written straight
//! from a validated event is the one its `Value` serialises to.
//!
//! Worked out once: sorting each event's members took 4% of the
//! instructions of a whole conversion request on the memory store
//! (`valgrind --tool=callgrind` on the service). Only the custom
//! fields, which each account names, are still sorted per event.

use std::sync::LazyLock;

use super::vocabulary::{CUSTOM_PREFIX, FIELD_NAMES};

/// The standard members' indices in [`FIELD_NAMES`], sorted by name, and
/// how many sort before the custom fields.
struct MemberOrder {
    fields: [usize; FIELD_NAMES.len()],
    before_custom: usize,
}

static ORDER: LazyLock<MemberOrder> = LazyLock::new(|| {
    let mut fields: [usize; FIELD_NAMES.len()] = std::array::from_fn(|index| index);
    fields.sort_unstable_by_key(|&index| FIELD_NAMES[index]);
    let before_custom = fields
        .iter()
        .take_while(|&&index| FIELD_NAMES[index] < CUSTOM_PREFIX)
        .count();
    MemberOrder {
        fields,
        before_custom,
    }
});

/// The indices in [`FIELD_NAMES`] of the standard members that sort before
/// the custom fields, and of those that sort after them, each in order.
/// Every custom field's name starts with [`CUSTOM_PREFIX`] and no standard
/// name does, so the custom fields sort together, between the two.
pub(super) fn around_custom_fields() -> (&'static [usize], &'static [usize]) {
    let order = &*ORDER;
    order.fields.split_at(order.before_custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_members_sort_by_name_around_the_custom_fields() {
        let (before, after) = around_custom_fields();
        let name = |index: &usize| FIELD_NAMES[*index];
        let names: Vec<&str> = before.iter().chain(after).map(name).collect();
        let mut sorted = FIELD_NAMES.to_vec();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        // Any custom name sorts after the first group and before the second.
        for custom in ["cf_", "cf_a", "cf_zzzz", "cf__", "cf_~"] {
            assert!(before.iter().map(name).all(|n| n < custom), "{custom}");
            assert!(after.iter().map(name).all(|n| n > custom), "{custom}");
        }
        assert!(!before.is_empty() && !after.is_empty());
    }
}
