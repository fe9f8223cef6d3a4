//! Closed sets of wire strings (`event_type`, a legal basis's `category`,
//! `type` and `status`): how a value is matched against its set, and what the
//! readers make of a value that is not in it.

use super::lexer::Scalar;

/// A closed set of string values, as sent on the wire.
pub(super) trait Choice: Copy + 'static {
    /// Every accepted value, for `validation_rules.valid_options`.
    const OPTIONS: &'static [&'static str];
    /// The value `value` names, if it is one of [`Choice::OPTIONS`]; the
    /// match is exact (case and all), as the real service's is.
    fn parse(value: &str) -> Option<Self>;
}

/// Implements [`Choice`], `as_str` and `Display` for a fieldless enum, from
/// one list of variants and their wire names, so the three cannot disagree.
macro_rules! choice {
    ($name:ident { $($variant:ident => $wire:literal),+ $(,)? }) => {
        impl $crate::intake::validator::choice::Choice for $name {
            const OPTIONS: &'static [&'static str] = &[$($wire),+];
            fn parse(value: &str) -> Option<Self> {
                match value {
                    $($wire => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl $name {
            /// The value as sent on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(super) use choice;

/// What a value read where a [`Choice`] is expected turned out to be.
pub(super) enum Chosen<C> {
    /// `null`: the same as absent.
    Null,
    /// One of the set.
    Valid(C),
    /// A string outside the set: an `INVALID_OPTION`.
    Invalid,
    /// Not a string: an `INVALID_DATA_TYPE`.
    WrongType,
}

impl<C: Choice> Chosen<C> {
    /// Matches the scalar the lexer read against the set of `C`.
    pub(super) fn of(scalar: Scalar<'_>) -> Self {
        match scalar {
            Scalar::Null => Chosen::Null,
            Scalar::Str(value) => C::parse(&value.decode()).map_or(Chosen::Invalid, Chosen::Valid),
            Scalar::Bool(_) | Scalar::Other => Chosen::WrongType,
        }
    }
}
