//! Hostile conversion bodies, each at the default size limit (200 KiB): one
//! per shape that can make a validator work harder than the bytes it reads,
//! or answer with an error list as long as the body.
//!
//! Shared by `benches/validation.rs` (their cost per byte beside the
//! typical event's, in the same run), `tests/intake/validation/hostile.rs`
//! (what each is answered, and that the answer and the event stay bounded)
//! and `tests/intake/alloc.rs` (the memory they take). Built in code rather
//! than stored as files: 2 MB of generated JSON would teach a reader
//! nothing.

/// The default `ConversionLimits::max_body_bytes`: every body fills it.
pub const BODY_LIMIT: usize = 200 * 1024;

/// Which entry point a body is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `validate_conversion`.
    Single,
    /// `validate_batch`.
    Batch,
}

/// One hostile body and the account it is sent to.
pub struct Hostile {
    /// The shape's name, as the bench and the tests print it.
    pub name: &'static str,
    /// The body, at most [`BODY_LIMIT`] bytes.
    pub body: Vec<u8>,
    /// The account's custom fields, without the `cf_` prefix.
    pub custom_fields: Vec<String>,
    /// Which entry point it is for.
    pub entry: Entry,
}

impl Hostile {
    /// The custom fields as the validator takes them.
    pub fn custom_field_names(&self) -> Vec<&str> {
        self.custom_fields.iter().map(String::as_str).collect()
    }
}

/// `index` in base 36 over `[0-9a-z]`, `width` digits wide: distinct names
/// of one length.
pub fn fixed_name(mut index: usize, width: usize) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut name = vec![b'0'; width];
    for slot in name.iter_mut().rev() {
        *slot = DIGITS[index % DIGITS.len()];
        index /= DIGITS.len();
    }
    String::from_utf8(name).expect("ASCII")
}

/// An event's opening up to its payload's required fields; members follow
/// after a comma.
const EVENT_OPEN: &str = r#"{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"hostile","email":"a@b.co""#;
const EVENT_CLOSE: &str = "}}";

/// The `index`th name over `[a-z0-9]`, shortest first (`a`, ..., `9`, `aa`,
/// ...), so that many distinct names cost few bytes.
pub fn short_name(mut index: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut name = Vec::new();
    loop {
        name.push(ALPHABET[index % ALPHABET.len()]);
        index /= ALPHABET.len();
        if index == 0 {
            break;
        }
        index -= 1;
    }
    String::from_utf8(name).expect("ASCII")
}

/// `open`, then as many `member(i)` as fit before `close` within the limit,
/// each after a comma (the first one too when `comma_first`).
fn fill(
    open: &str,
    close: &str,
    comma_first: bool,
    mut member: impl FnMut(usize) -> String,
) -> (Vec<u8>, usize) {
    let mut body = open.as_bytes().to_vec();
    let mut count = 0;
    loop {
        let next = member(count);
        let comma = usize::from(comma_first || count > 0);
        if body.len() + comma + next.len() + close.len() > BODY_LIMIT {
            break;
        }
        if comma == 1 {
            body.push(b',');
        }
        body.extend_from_slice(next.as_bytes());
        count += 1;
    }
    body.extend_from_slice(close.as_bytes());
    (body, count)
}

/// One event whose payload holds the required fields and then `member(i)`
/// repeated up to the limit.
fn event_filled_with(member: impl FnMut(usize) -> String) -> Vec<u8> {
    fill(EVENT_OPEN, EVENT_CLOSE, true, member).0
}

fn single(name: &'static str, body: Vec<u8>) -> Hostile {
    Hostile {
        name,
        body,
        custom_fields: Vec::new(),
        entry: Entry::Single,
    }
}

/// ~25,600 distinct unknown attributes (`"abc":0`), all accepted and dropped.
pub fn unknown_attributes() -> Hostile {
    single(
        "unknown_attributes",
        event_filled_with(|i| format!(r#""{}":0"#, short_name(i))),
    )
}

/// One unknown attribute repeated ~34,000 times.
pub fn repeated_unknown_key() -> Hostile {
    single(
        "repeated_unknown_key",
        event_filled_with(|_| r#""x":0"#.to_owned()),
    )
}

/// One known key repeated ~18,600 times: as many `DUPLICATE_FIELD` errors.
pub fn repeated_known_key() -> Hostile {
    single(
        "repeated_known_key",
        event_filled_with(|_| r#""name":"x""#.to_owned()),
    )
}

/// One of the account's custom fields repeated ~15,000 times: as many
/// `DUPLICATE_FIELD` errors, each naming a member of the body
/// (`$.payload.cf_plan`), whose path must copy the name when it is kept.
pub fn repeated_custom_field() -> Hostile {
    Hostile {
        name: "repeated_custom_field",
        body: event_filled_with(|_| r#""cf_plan":"x""#.to_owned()),
        custom_fields: vec!["plan".to_owned()],
        entry: Entry::Single,
    }
}

/// An account with ~13,000 custom fields, every one of them sent: all but the
/// first 64 fall outside a 64-bit "seen" set.
pub fn custom_fields() -> Hostile {
    let name = |i: usize| format!("f{i:05}");
    let (body, count) = fill(EVENT_OPEN, EVENT_CLOSE, true, |i| {
        format!(r#""cf_{}":"""#, name(i))
    });
    Hostile {
        name: "custom_fields",
        body,
        custom_fields: (0..count).map(name).collect(),
        entry: Entry::Single,
    }
}

/// An account with 1,000 custom fields, and ~17,000 `cf_` attributes of the
/// same length that are none of them: each is looked up and dropped.
pub fn unknown_custom_fields() -> Hostile {
    let body = event_filled_with(|i| format!(r#""cf_u{}":0"#, fixed_name(i, 3)));
    Hostile {
        name: "unknown_custom_fields",
        body,
        custom_fields: (0..1000)
            .map(|i| format!("k{}", fixed_name(i, 3)))
            .collect(),
        entry: Entry::Single,
    }
}

/// `name` holding ~100,000 two-byte characters (refused as too long).
pub fn long_string() -> Hostile {
    let overhead = EVENT_OPEN.len() + EVENT_CLOSE.len() + r#","name":"""#.len();
    let value = "é".repeat((BODY_LIMIT - overhead) / 2);
    let body = format!(r#"{EVENT_OPEN},"name":"{value}"{EVENT_CLOSE}"#);
    single("long_string", body.into_bytes())
}

/// An unknown attribute holding a number of ~200,000 digits.
pub fn long_number() -> Hostile {
    let overhead = EVENT_OPEN.len() + EVENT_CLOSE.len() + r#","n":0."#.len();
    let digits = "7".repeat(BODY_LIMIT - overhead);
    let body = format!(r#"{EVENT_OPEN},"n":0.{digits}{EVENT_CLOSE}"#);
    single("long_number", body.into_bytes())
}

/// An unknown attribute holding arrays nested as deep as JSON parsers allow
/// (127 levels), side by side up to the limit.
pub fn deep_nesting() -> Hostile {
    // Depth: event 1, payload 2, `deep` 3; its elements start at 4, and 127
    // is the deepest level accepted.
    let levels = 127 - 3;
    let nested = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    let open = format!(r#"{EVENT_OPEN},"deep":["#);
    let close = format!("]{EVENT_CLOSE}");
    let (body, _) = fill(&open, &close, false, |_| nested.clone());
    single("deep_nesting", body)
}

/// An event with the most tags (50), each of the longest length (255), each
/// starting with an escape and differing from the others only at its end:
/// every uniqueness test compares them character by character.
fn tag_event() -> String {
    let tags: Vec<String> = (0..50)
        .map(|i| format!(r#""\u0074{}{}""#, "a".repeat(250), fixed_name(i, 4)))
        .collect();
    format!(r#"{EVENT_OPEN},"tags":[{}]{EVENT_CLOSE}"#, tags.join(","))
}

/// A batch of events with the most and longest tags, escaped (~15 events).
pub fn many_tags() -> Hostile {
    let event = tag_event();
    let (body, _) = fill("[", "]", false, |_| event.clone());
    Hostile {
        name: "many_tags",
        body,
        custom_fields: Vec::new(),
        entry: Entry::Batch,
    }
}

/// A batch of events with the most legal bases (10), each basis carrying
/// unknown members (~180 events).
pub fn many_legal_bases() -> Hostile {
    let basis = r#"{"category":"communications","type":"consent","status":"granted","a":0,"b":0}"#;
    let bases = [basis; 10].join(",");
    let event = format!(r#"{EVENT_OPEN},"legal_bases":[{bases}]{EVENT_CLOSE}"#);
    let (body, _) = fill("[", "]", false, |_| event.clone());
    Hostile {
        name: "many_legal_bases",
        body,
        custom_fields: Vec::new(),
        entry: Entry::Batch,
    }
}

/// ~12,000 distinct unknown attributes whose names are written with escapes
/// only (`"\u0061\u0062":0`), so each is unescaped into a string of its own.
pub fn escaped_names() -> Hostile {
    let escaped = |i: usize| -> String {
        short_name(i)
            .bytes()
            .map(|b| format!(r"\u{:04x}", b))
            .collect()
    };
    single(
        "escaped_names",
        event_filled_with(|i| format!(r#""{}":0"#, escaped(i))),
    )
}

/// A batch of ~68,000 empty objects: 1,000 events of three errors each, then
/// events past the batch bound.
pub fn empty_events() -> Hostile {
    let (body, _) = fill("[", "]", false, |_| "{}".to_owned());
    Hostile {
        name: "empty_events",
        body,
        custom_fields: Vec::new(),
        entry: Entry::Batch,
    }
}

/// Every hostile shape.
pub fn all() -> Vec<Hostile> {
    vec![
        unknown_attributes(),
        repeated_unknown_key(),
        repeated_known_key(),
        repeated_custom_field(),
        custom_fields(),
        unknown_custom_fields(),
        long_string(),
        long_number(),
        deep_nesting(),
        many_tags(),
        many_legal_bases(),
        escaped_names(),
        empty_events(),
    ]
}
