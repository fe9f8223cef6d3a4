//! The bounds the validator enforces, and what it does with attributes it
//! does not know: the host's configuration of a validation.

/// What the validator does with attributes that are neither standard fields
/// nor custom fields of the account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnknownAttributes {
    /// Accept the event, leave the attribute out of the recorded payload and
    /// list it in [`ConversionEvent::unknown_attributes`](crate::ConversionEvent::unknown_attributes). This is what the
    /// real service does (it stores them nowhere and still accepts the
    /// event), so it is the default.
    #[default]
    AcceptAndDrop,
    /// Reject the event with an [`ErrorType::UnknownField`](crate::ErrorType::UnknownField) error
    /// (`UNKNOWN_FIELD`) on each such attribute.
    Reject,
}

/// Bounds the validator enforces on a conversion event.
///
/// Build one with [`ConversionLimits::default`] and change the fields you need:
///
/// ```
/// let mut limits = conversion_gateway::ConversionLimits::default();
/// limits.max_tags = 20;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConversionLimits {
    /// Largest body accepted, in bytes, checked before any parsing; a larger
    /// body is answered 413 with `BODY_TOO_LARGE`. Default 204 800 (200 KiB),
    /// the 0.2 MB cap of the real service's conversion and batch routes.
    /// Bodies over 1 GiB are refused whatever it says.
    pub max_body_bytes: usize,
    /// Longest string accepted in a standard field other than
    /// `traffic_source`, and in a custom field, in characters. Default 1024.
    pub max_string_len: usize,
    /// Longest `traffic_source` accepted, in characters. It may carry the
    /// base64 of the `__trf.src` cookie, a JSON document of a few hundred bytes
    /// to a few KiB, hence its own bound. Default 4096.
    pub max_traffic_source_len: usize,
    /// Most elements accepted in `tags`. Default 50.
    pub max_tags: usize,
    /// Longest tag accepted, in characters. Default 255.
    pub max_tag_len: usize,
    /// Most elements accepted in `legal_bases`. Default 10.
    pub max_legal_bases: usize,
    /// Deepest nesting of arrays and objects accepted, counting the event
    /// object as depth 1 (so `payload` is 2 and a legal-basis object 4).
    ///
    /// It bounds the values the validator does not interpret: those of
    /// attributes accepted and dropped, the only place where the event may
    /// nest freely. The standard fields have a fixed shape and a wrong shape is
    /// an `INVALID_DATA_TYPE` error whatever its depth. Default 8.
    pub max_depth: usize,
    /// Most events accepted in one [`validate_batch`](crate::validate_batch) body. Default 1000.
    pub max_batch_events: usize,
    /// What to do with unknown attributes; default
    /// [`UnknownAttributes::AcceptAndDrop`].
    pub unknown_attributes: UnknownAttributes,
    /// Most errors listed in one answer (at least 1 is). When more are
    /// found, the answer lists the first ones and ends with a
    /// `TOO_MANY_ERRORS` item giving the total
    /// ([`ErrorType::TooManyErrors`](crate::ErrorType::TooManyErrors)); errors past the bound are counted, not
    /// kept, so a body of 18,000 repeated keys answers a few kilobytes rather
    /// than megabytes. Default 100.
    pub max_errors: usize,
}

impl Default for ConversionLimits {
    fn default() -> Self {
        ConversionLimits {
            max_body_bytes: 200 * 1024,
            max_string_len: 1024,
            max_traffic_source_len: 4096,
            max_tags: 50,
            max_tag_len: 255,
            max_legal_bases: 10,
            max_depth: 8,
            max_batch_events: 1000,
            unknown_attributes: UnknownAttributes::AcceptAndDrop,
            max_errors: 100,
        }
    }
}
