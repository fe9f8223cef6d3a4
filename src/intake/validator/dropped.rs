//! The attributes accepted and dropped from an event: listed once per
//! place, up to a bound, and counted.

use std::borrow::Cow;

use smallvec::SmallVec;

use super::text_span::{EventText, TextSpan};
use super::vocabulary::Scope;

/// One attribute accepted and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Dropped {
    /// The object it sat in.
    pub(super) scope: Scope,
    /// Its member name, unescaped, in the event's text.
    pub(super) name: TextSpan,
}

/// Most dropped attributes an event lists; the others are only counted.
pub(super) const MAX_LISTED_UNKNOWN: usize = 100;

/// The attributes accepted and dropped from one event, once per place: the
/// first [`MAX_LISTED_UNKNOWN`] listed in document order, all of them counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct DroppedAttributes {
    /// The first [`MAX_LISTED_UNKNOWN`], in document order.
    pub(super) listed: SmallVec<[Dropped; 4]>,
    /// How many there were, listed or not.
    pub(super) count: usize,
}

impl DroppedAttributes {
    /// Adds an attribute not dropped before, its name kept in `text`.
    pub(super) fn push<'a>(&mut self, text: &mut EventText<'a>, scope: Scope, name: Cow<'a, str>) {
        self.count += 1;
        if self.listed.len() < MAX_LISTED_UNKNOWN {
            let name = text.keep(name);
            self.listed.push(Dropped { scope, name });
        }
    }

    /// Whether the list holds `name` in `scope`.
    pub(super) fn lists(&self, text: &EventText<'_>, scope: Scope, name: &str) -> bool {
        self.listed
            .iter()
            .any(|dropped| dropped.scope == scope && text.get(dropped.name) == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_stops_at_its_bound_and_the_count_goes_on() {
        // The bound is the list's own, whatever its callers check first.
        let names: Vec<String> = (0..=MAX_LISTED_UNKNOWN).map(|i| format!("n{i}")).collect();
        let mut text = EventText::new("");
        let mut dropped = DroppedAttributes::default();
        for name in &names {
            dropped.push(&mut text, Scope::Payload, Cow::Borrowed(name));
        }
        assert_eq!(dropped.count, MAX_LISTED_UNKNOWN + 1);
        assert_eq!(dropped.listed.len(), MAX_LISTED_UNKNOWN);
        let last = dropped.listed.last().map(|listed| text.get(listed.name));
        assert_eq!(last, Some(format!("n{}", MAX_LISTED_UNKNOWN - 1).as_str()));
        assert!(dropped.lists(&text, Scope::Payload, "n0"));
        assert!(!dropped.lists(&text, Scope::Event, "n0"));
        let past_the_bound = format!("n{MAX_LISTED_UNKNOWN}");
        assert!(!dropped.lists(&text, Scope::Payload, &past_the_bound));
    }
}
