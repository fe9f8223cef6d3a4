//! The event envelope: the event object's `event_type`, `event_family` and
//! `payload`, and the batch array around events.
//!
//! Spec, "Conversion event": `event_type` "must be `CONVERSION` for this
//! event", `event_family` "only `CDP` is accepted", and the three members are
//! required.

use super::choice::Chosen;
use super::context::{Ctx, Shaped};
use super::errors::{DataType, ErrorType, ValidationRules};
use super::event::ConversionEvent;
use super::json_path::JsonPath;
use super::lexer::{Lexer, Scan};
use super::payload::read_payload;
use super::unknown::read_unknown_attribute;
use super::vocabulary::{EventFamily, EventType, Scope};

/// Top-level members of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Top {
    /// `event_type`.
    EventType,
    /// `event_family`.
    EventFamily,
    /// `payload`.
    Payload,
}

impl Top {
    /// The member's name on the wire.
    const fn name(self) -> &'static str {
        match self {
            Top::EventType => "event_type",
            Top::EventFamily => "event_family",
            Top::Payload => "payload",
        }
    }

    /// The member `name` names, if the validator knows it.
    fn classify(name: &str) -> Option<Self> {
        match name {
            "event_type" => Some(Top::EventType),
            "event_family" => Some(Top::EventFamily),
            "payload" => Some(Top::Payload),
            _ => None,
        }
    }
}

/// Reads one event object (at depth 1) into `event`, its errors into `ctx`.
///
/// Never [`Shaped::Null`]: unlike a `null` member of an event, which counts
/// as absent, a `null` event is a value that is not an object like any other
/// ([`Shaped::Wrong`]): a `BAD_REQUEST` for a single event, an
/// `INVALID_DATA_TYPE` at `$[i]` in a batch.
pub(super) fn read_event<'a>(
    lexer: &mut Lexer<'a>,
    ctx: &mut Ctx<'_, 'a>,
    event: &mut ConversionEvent<'a>,
) -> Scan<Shaped<()>> {
    // The names dropped from the previous event of a batch are not this one's.
    ctx.dropped_seen = None;
    match lexer.peek_value() {
        Some(b'{') => lexer.open(b'{', 1)?,
        _ => return lexer.skip_value(1).map(|_| Shaped::Wrong),
    }
    let (mut seen_type, mut seen_family, mut seen_payload) = (false, false, false);
    let (mut has_type, mut has_family, mut has_payload) = (false, false, false);
    let mut first = true;
    while let Some(key) = lexer.next_key(&mut first)? {
        let name = key.decode();
        let Some(top) = Top::classify(&name) else {
            read_unknown_attribute(
                lexer,
                ctx,
                name,
                Scope::Event,
                2,
                &mut event.extras,
                &mut event.text,
            )?;
            continue;
        };
        let seen = match top {
            Top::EventType => &mut seen_type,
            Top::EventFamily => &mut seen_family,
            Top::Payload => &mut seen_payload,
        };
        let path = |ctx: &Ctx<'_, 'a>| ctx.event_path().name(top.name());
        if std::mem::replace(seen, true) {
            lexer.skip_value(2)?;
            ctx.report(ErrorType::DuplicateField, path(ctx), None);
            continue;
        }
        match top {
            Top::EventType => {
                let chosen: Chosen<EventType> = Chosen::of(lexer.scalar(2)?);
                has_type = !matches!(chosen, Chosen::Null);
                ctx.check_choice(path, chosen);
            }
            Top::EventFamily => {
                let chosen: Chosen<EventFamily> = Chosen::of(lexer.scalar(2)?);
                has_family = !matches!(chosen, Chosen::Null);
                ctx.check_choice(path, chosen);
            }
            Top::Payload => match read_payload(lexer, ctx, event)? {
                Shaped::Right(()) => has_payload = true,
                Shaped::Null => {}
                Shaped::Wrong => {
                    has_payload = true;
                    ctx.wrong_type(path(ctx), DataType::Object);
                }
            },
        }
    }
    // Spec: event_type, event_family and payload are required.
    for (present, top) in [
        (has_type, Top::EventType),
        (has_family, Top::EventFamily),
        (has_payload, Top::Payload),
    ] {
        if !present {
            let path = ctx.event_path().name(top.name());
            ctx.report(ErrorType::CannotBeNull, path, None);
        }
    }
    Ok(Shaped::Right(()))
}

/// Reads a batch: an array of events; `None` when the body is not an array.
pub(super) fn read_batch<'a>(
    lexer: &mut Lexer<'a>,
    ctx: &mut Ctx<'_, 'a>,
) -> Scan<Option<Vec<ConversionEvent<'a>>>> {
    match lexer.peek_value() {
        Some(b'[') => lexer.open(b'[', 0)?,
        _ => return lexer.skip_value(0).map(|_| None),
    }
    let max = ctx.limits.max_batch_events;
    let mut events = Vec::with_capacity(max.min(4));
    let (mut first, mut index) = (true, 0);
    while lexer.next_element(&mut first)? {
        if index >= max {
            if index == max {
                ctx.event = None;
                ctx.report(
                    ErrorType::TooManyItems,
                    JsonPath::root(),
                    Some(ValidationRules::MaxItems(max)),
                );
            }
            lexer.skip_value(1)?;
            index += 1;
            continue;
        }
        ctx.event = Some(index);
        let mut event = ConversionEvent::empty(lexer.text());
        match read_event(lexer, ctx, &mut event)? {
            // Once any event failed the batch fails: stop keeping events.
            Shaped::Right(()) if ctx.errors.is_empty() => events.push(event),
            Shaped::Right(()) => {}
            Shaped::Null | Shaped::Wrong => ctx.wrong_type(ctx.event_path(), DataType::Object),
        }
        index += 1;
    }
    ctx.event = None;
    if index == 0 {
        ctx.report(ErrorType::CannotBeEmpty, JsonPath::root(), None);
    }
    Ok(Some(events))
}
