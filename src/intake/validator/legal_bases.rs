//! Legal bases: the `legal_bases` array of the payload, each element a
//! `category`, a `type` and (with type `consent`) a `status`; the typed
//! [`LegalBasis`] it yields.

use super::choice::Chosen;
use super::context::{Ctx, Shaped};
use super::errors::{DataType, ErrorType, ValidationRules};
use super::event::ConversionEvent;
use super::lexer::{Lexer, Scalar, Scan};
use super::unknown::read_unknown_attribute;
use super::vocabulary::{Field, LegalBasis, LegalBasisType, Scope};

/// Members of a legal-basis object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BasisKey {
    /// `category`.
    Category,
    /// `type`.
    Type,
    /// `status`.
    Status,
}

impl BasisKey {
    /// The member's name on the wire.
    const fn name(self) -> &'static str {
        match self {
            BasisKey::Category => "category",
            BasisKey::Type => "type",
            BasisKey::Status => "status",
        }
    }

    /// The member `name` names, if the validator knows it.
    fn classify(name: &str) -> Option<Self> {
        match name {
            "category" => Some(BasisKey::Category),
            "type" => Some(BasisKey::Type),
            "status" => Some(BasisKey::Status),
            _ => None,
        }
    }
}

/// Reads `legal_bases` (an array at depth 3) into the event.
pub(super) fn read_legal_bases<'a>(
    lexer: &mut Lexer<'a>,
    ctx: &mut Ctx<'_, 'a>,
    event: &mut ConversionEvent<'a>,
) -> Scan<Shaped<()>> {
    match lexer.peek_value() {
        Some(b'[') => lexer.open(b'[', 3)?,
        Some(b'n') => return lexer.literal(b"null").map(|()| Shaped::Null),
        _ => return lexer.skip_value(3).map(|_| Shaped::Wrong),
    }
    let max = ctx.limits.max_legal_bases;
    let (mut first, mut index) = (true, 0);
    while lexer.next_element(&mut first)? {
        if index >= max {
            if index == max {
                ctx.report(
                    ErrorType::TooManyItems,
                    ctx.field_path(Field::LegalBases),
                    Some(ValidationRules::MaxItems(max)),
                );
            }
            lexer.skip_value(4)?;
        } else if lexer.peek_value() == Some(b'{') {
            if let Some(basis) = read_legal_basis(lexer, ctx, event, index)? {
                event.push_legal_basis(basis);
            }
        } else {
            lexer.skip_value(4)?;
            ctx.wrong_type(ctx.basis_path(index), DataType::Object);
        }
        index += 1;
    }
    Ok(Shaped::Right(()))
}

/// Reads one legal-basis object (at depth 4), its `{` next; `None` when its
/// category or type is missing or not one of the options.
fn read_legal_basis<'a>(
    lexer: &mut Lexer<'a>,
    ctx: &mut Ctx<'_, 'a>,
    event: &mut ConversionEvent<'a>,
    index: usize,
) -> Scan<Option<LegalBasis>> {
    lexer.open(b'{', 4)?;
    let mut seen = [false; 3];
    let mut sent = [false; 3];
    let (mut category, mut kind, mut status) = (None, None, None);
    let mut first = true;
    while let Some(key) = lexer.next_key(&mut first)? {
        let name = key.decode();
        let Some(key) = BasisKey::classify(&name) else {
            let scope = Scope::LegalBasis(u32::try_from(index).unwrap_or(u32::MAX));
            // Depth 5: event 1, payload 2, legal_bases 3, this object 4.
            read_unknown_attribute(
                lexer,
                ctx,
                name,
                scope,
                5,
                &mut event.extras,
                &mut event.text,
            )?;
            continue;
        };
        let path = |ctx: &Ctx<'_, 'a>| ctx.basis_path(index).name(key.name());
        if std::mem::replace(&mut seen[key as usize], true) {
            lexer.skip_value(5)?;
            ctx.report(ErrorType::DuplicateField, path(ctx), None);
            continue;
        }
        let value = lexer.scalar(5)?;
        sent[key as usize] = !matches!(value, Scalar::Null);
        match key {
            BasisKey::Category => category = ctx.check_choice(path, Chosen::of(value)),
            BasisKey::Type => kind = ctx.check_choice(path, Chosen::of(value)),
            BasisKey::Status => status = ctx.check_choice(path, Chosen::of(value)),
        }
    }
    let mut required = [BasisKey::Category, BasisKey::Type, BasisKey::Status].as_slice();
    // The real service asks for status with type consent (only); without it the consent
    // would record neither a grant nor a refusal.
    if kind != Some(LegalBasisType::Consent) {
        required = &required[..2];
    }
    for key in required {
        if !sent[*key as usize] {
            ctx.report(
                ErrorType::CannotBeNull,
                ctx.basis_path(index).name(key.name()),
                None,
            );
        }
    }
    // A basis with other errors (a duplicate member, a missing status) is
    // kept too: an event with any error is never returned, so keeping it
    // changes no answer, and the check cost a count on every basis.
    Ok(match (category, kind) {
        (Some(category), Some(kind)) => Some(LegalBasis {
            category,
            kind,
            status,
        }),
        _ => None,
    })
}
