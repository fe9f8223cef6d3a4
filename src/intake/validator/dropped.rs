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
