//! Unknown attributes: members that are neither standard fields nor custom
//! fields of the account, wherever they sit (the event, the payload, a legal
//! basis), and the list of those accepted and dropped.
//!
//! The real service accepts such attributes and drops them: they are not
//! stored and the event is still accepted; [`UnknownAttributes::Reject`] refuses them instead. Their values
//! are the only place where an event may nest freely, so they are where
//! [`ConversionLimits::max_depth`] applies.

use std::borrow::Cow;

use super::context::Ctx;
use super::dropped::{DroppedAttributes, MAX_LISTED_UNKNOWN};
use super::errors::{ErrorType, ValidationRules};
use super::extras::EventExtras;
use super::lexer::{Lexer, Scan};
use super::limits::UnknownAttributes;
use super::text_span::EventText;
use super::vocabulary::Scope;

/// Dropped attributes an event may have before their names are hashed
/// rather than searched.
const LINEAR_DROPPED: usize = 8;

/// Reads the value of an attribute that is neither standard nor custom,
/// and applies the unknown-attribute policy to it; `depth` is the depth
/// the value has if it is a container.
pub(super) fn read_unknown_attribute<'a>(
    lexer: &mut Lexer<'a>,
    ctx: &mut Ctx<'_, 'a>,
    name: Cow<'a, str>,
    scope: Scope,
    depth: usize,
    extras: &mut Option<Box<EventExtras>>,
    text: &mut EventText<'a>,
) -> Scan<()> {
    let deepest = lexer.skip_value(depth)?;
    match ctx.limits.unknown_attributes {
        UnknownAttributes::Reject => {
            ctx.report_member(ErrorType::UnknownField, scope, &name, None);
        }
        UnknownAttributes::AcceptAndDrop => {
            let max = ctx.limits.max_depth;
            if deepest > max {
                ctx.report_member(
                    ErrorType::TooDeeplyNested,
                    scope,
                    &name,
                    Some(ValidationRules::MaxDepth(max)),
                );
            } else {
                let dropped = &mut EventExtras::of(extras).dropped;
                drop_attribute(ctx, scope, name, dropped, text);
            }
        }
    }
    Ok(())
}

/// Adds a dropped attribute to the event's, unless the same name was
/// already dropped from the same object.
fn drop_attribute<'a>(
    ctx: &mut Ctx<'_, 'a>,
    scope: Scope,
    name: Cow<'a, str>,
    dropped: &mut DroppedAttributes,
    text: &mut EventText<'a>,
) {
    // A search of the list per name made 25,000 distinct names cost 300
    // million comparisons (0.5 to 1.5 s): past a few names, every one is
    // hashed instead.
    if ctx.dropped_seen.is_none() {
        if dropped.lists(text, scope, &name) {
            return;
        }
        if dropped.count < LINEAR_DROPPED {
            dropped.push(text, scope, name);
            return;
        }
        // All the names dropped so far are listed (fewer than the list
        // holds), so the set starts complete.
        let listed = dropped.listed.iter();
        let seen = listed.map(|dropped| (dropped.scope, text.cow(dropped.name)));
        ctx.dropped_seen = Some(seen.collect());
    }
    let Some(seen) = &mut ctx.dropped_seen else {
        return;
    };
    if dropped.listed.len() < MAX_LISTED_UNKNOWN {
        if seen.insert((scope, name.clone())) {
            dropped.push(text, scope, name);
        }
    } else if seen.insert((scope, name)) {
        dropped.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::validator::limits::ConversionLimits;

    /// Drops `name` from the object `scope` stands for, into `kept`.
    fn drop_in<'a>(
        ctx: &mut Ctx<'_, 'a>,
        (dropped, text): &mut (DroppedAttributes, EventText<'a>),
        scope: Scope,
        name: &'a str,
    ) {
        drop_attribute(ctx, scope, Cow::Borrowed(name), dropped, text);
    }

    #[test]
    fn dropped_names_are_hashed_past_a_few() {
        let names: Vec<String> = (0..1000).map(|i| format!("n{i}")).collect();
        let limits = ConversionLimits::default();
        let mut ctx = Ctx::new(&limits, &[]);
        let mut kept = (DroppedAttributes::default(), EventText::new(""));
        for (i, name) in names.iter().enumerate() {
            drop_in(&mut ctx, &mut kept, Scope::Payload, name);
            assert_eq!(ctx.dropped_seen.is_some(), i >= LINEAR_DROPPED, "{i}");
            // Again, and in another object: once per place.
            drop_in(&mut ctx, &mut kept, Scope::Payload, name);
        }
        drop_in(&mut ctx, &mut kept, Scope::Event, "n1");
        drop_in(&mut ctx, &mut kept, Scope::LegalBasis(0), "n1");
        drop_in(&mut ctx, &mut kept, Scope::LegalBasis(1), "n1");
        let (dropped, text) = kept;
        assert_eq!(dropped.count, 1003);
        assert_eq!(dropped.listed.len(), MAX_LISTED_UNKNOWN);
        let listed = dropped.listed.iter();
        let listed: Vec<&str> = listed.map(|d| text.get(d.name)).collect();
        let first: Vec<&str> = names.iter().take(100).map(String::as_str).collect();
        assert_eq!(listed, first);
    }
}
