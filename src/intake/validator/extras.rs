//! The parts of a validated event that most events lack (legal bases,
//! custom fields, attributes dropped), kept in one block of their own.

use smallvec::SmallVec;

use super::dropped::DroppedAttributes;
use super::text_span::TextSpan;
use super::vocabulary::LegalBasis;

/// The legal bases, custom fields and dropped attributes of one event.
///
/// Kept apart from [`ConversionEvent`](super::event::ConversionEvent), in
/// one block allocated when the first of them is read, so that the event
/// stays small to move. Held inline, they made the event 528 bytes where it
/// is now 240, and every move of it cost: the caller's first reads of an
/// event just copied out of the validator waited on the copy's wide
/// stores. A minimal event took a third less time under the validator
/// bench for it (benches/README.md, "Validation"); an event with custom
/// fields, legal bases or dropped attributes pays one allocation.
#[derive(Clone, Debug, Default)]
pub(super) struct EventExtras {
    /// The legal bases sent, in order.
    pub(super) legal_bases: SmallVec<[LegalBasis; 16]>,
    /// Custom fields as (full key with its `cf_` prefix, value).
    pub(super) custom: SmallVec<[(TextSpan, TextSpan); 8]>,
    /// The attributes accepted and dropped.
    pub(super) dropped: DroppedAttributes,
}

impl EventExtras {
    /// The extras of `slot`, made empty when the event had none yet.
    pub(super) fn of(slot: &mut Option<Box<EventExtras>>) -> &mut EventExtras {
        slot.get_or_insert_with(Box::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::validator::event::ConversionEvent;

    #[test]
    fn an_event_stays_small_to_move() {
        // Every move of an event copies it whole; what does not fit here
        // belongs in the extras (see the type's documentation).
        assert!(
            size_of::<ConversionEvent<'_>>() <= 240,
            "{} bytes",
            size_of::<ConversionEvent<'_>>()
        );
    }

    #[test]
    fn the_extras_are_made_once_and_kept() {
        let mut slot = None;
        EventExtras::of(&mut slot)
            .custom
            .push((TextSpan::ABSENT, TextSpan::ABSENT));
        EventExtras::of(&mut slot).dropped.count = 3;
        let extras = slot.expect("made on first use");
        assert_eq!(extras.custom.len(), 1);
        assert_eq!(extras.dropped.count, 3);
    }
}
