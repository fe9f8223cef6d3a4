//! Custom fields: the `cf_` members of the payload that the account defines,
//! and the search of the account's list by name.
//!
//! As in the real service, a payload member `cf_plan` is the account's custom field
//! `plan`; its value must be a string. A `cf_` member the account does not
//! define is an unknown attribute ([`super::unknown`]).

use std::borrow::Cow;
use std::collections::HashMap;

use super::context::Ctx;
use super::errors::{DataType, ErrorType, ValidationRules};
use super::event::ConversionEvent;
use super::lexer::{Lexer, Scalar, Scan};
use super::membership::PositionSet;
use super::string_rules::{is_too_long, unescaped_refused_control};
use super::unknown::{Scope, read_unknown_attribute};

/// The prefix of a custom field's member name in the payload.
pub(super) const CUSTOM_PREFIX: &str = "cf_";

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

/// Reads a payload member that is not a standard field: a custom field of the
/// account, or an unknown attribute.
pub(super) fn read_other_payload_member<'a>(
    lexer: &mut Lexer<'a>,
    ctx: &mut Ctx<'_, 'a>,
    name: Cow<'a, str>,
    event: &mut ConversionEvent<'a>,
    custom_seen: &mut PositionSet,
) -> Scan<()> {
    let custom = match name.strip_prefix(CUSTOM_PREFIX) {
        Some(bare) => ctx.custom_fields.position(bare),
        None => None,
    };
    let Some(custom) = custom else {
        return read_unknown_attribute(lexer, ctx, name, Scope::Payload, 3, &mut event.dropped);
    };
    if !custom_seen.insert(custom) {
        lexer.skip_value(3)?;
        ctx.report(
            ErrorType::DuplicateField,
            ctx.payload_path().key(&*name),
            None,
        );
        return Ok(());
    }
    match lexer.scalar(3)? {
        Scalar::Null => {}
        Scalar::Str(value) => {
            let value = value.decode();
            // The name is stored too, as the payload's key: an account's
            // field named with a control character is refused like a value.
            let refused_control =
                unescaped_refused_control(&value) || unescaped_refused_control(&name);
            let max = ctx.limits.max_string_len;
            if refused_control {
                ctx.report(
                    ErrorType::InvalidCharacters,
                    ctx.payload_path().key(&*name),
                    None,
                );
            } else if is_too_long(&value, max) {
                ctx.report(
                    ErrorType::ValueTooLong,
                    ctx.payload_path().key(&*name),
                    Some(ValidationRules::MaxLength(max)),
                );
            } else {
                event.custom.push((name, value));
            }
        }
        Scalar::Bool(_) | Scalar::Other => {
            ctx.wrong_type(ctx.payload_path().key(&*name), DataType::String);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
