//! The text format of the OAuth targets' inputs.
//!
//! An input reads like an HTTP request: header lines `name: value`, a blank
//! line, then the body bytes. Known names are `setup`, `query`,
//! `content-type`, `authorization` and `idempotency-key`; a name that is
//! absent gives `None` (the first line of a name wins, other lines are
//! ignored). Without a blank line the whole input is headers.
//!
//! ```text
//! setup: fresh pkce
//! query: code={code}
//! content-type: application/json
//! authorization: Basic <<{client_id}:{client_secret}>>
//!
//! {"code_verifier":"{code_verifier}"}
//! ```
//!
//! `{name}` is replaced by the fixture's value of that name (see
//! [`crate::fixture::Fixture::value`]), `{%name}` by its form-urlencoded
//! form, anywhere; in `authorization`, `<<text>>` is then replaced by the
//! standard base64 of `text`, for Basic credentials. Unknown placeholders
//! stay as they are. The fuzzer cannot guess a 256-bit secret, so
//! placeholders are how it reaches the paths behind client authentication.
//!
//! `setup` chooses the gateway: absent or `shared`, the process's shared one,
//! which no input changes; otherwise a fresh gateway whose code is live
//! (`fresh`), bound to a PKCE challenge (`pkce`), or already exchanged for
//! live tokens (`tokens`), with the clock then moved by `advance=SECONDS`.

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use conversion_gateway::RequestParts;

/// How the gateway for one input is prepared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Setup {
    /// A fresh gateway rather than the shared one.
    pub fresh: bool,
    /// The fresh client requires PKCE and its code carries a challenge.
    pub pkce: bool,
    /// The code was exchanged: access and refresh tokens are live.
    pub tokens: bool,
    /// Seconds the clock moves after the setup, before the request.
    pub advance: i64,
}

/// Clock moves are bounded (one year back, ten forward) so that time
/// arithmetic inside the crate cannot overflow on the harness's account.
const ADVANCE_RANGE: std::ops::RangeInclusive<i64> = -31_536_000..=315_360_000;

impl Setup {
    fn parse(line: &str) -> Self {
        let mut setup = Setup::default();
        for word in line.split_whitespace() {
            match word {
                "fresh" => setup.fresh = true,
                "pkce" => setup.pkce = true,
                "tokens" => setup.tokens = true,
                _ => {
                    if let Some(seconds) = word
                        .strip_prefix("advance=")
                        .and_then(|n| n.parse::<i64>().ok())
                    {
                        setup.advance = seconds.clamp(*ADVANCE_RANGE.start(), *ADVANCE_RANGE.end());
                    }
                }
            }
        }
        setup.fresh |= setup.pkce || setup.tokens || setup.advance != 0;
        setup
    }
}

/// An input split into its parts, placeholders not yet replaced.
#[derive(Clone, Debug, Default)]
pub struct RequestText<'a> {
    /// How to prepare the gateway.
    pub setup: Setup,
    query: Option<&'a [u8]>,
    content_type: Option<&'a [u8]>,
    authorization: Option<&'a [u8]>,
    idempotency_key: Option<&'a [u8]>,
    body: &'a [u8],
}

impl<'a> RequestText<'a> {
    /// Splits an input; every byte string is an input.
    pub fn parse(data: &'a [u8]) -> Self {
        let (head, body) = match data.windows(2).position(|pair| pair == b"\n\n") {
            Some(at) => (&data[..at], &data[at + 2..]),
            None => (data, &data[data.len()..]),
        };
        let mut text = RequestText {
            body,
            ..RequestText::default()
        };
        let mut setup = None;
        for line in head.split(|&byte| byte == b'\n') {
            let Some(colon) = line.iter().position(|&byte| byte == b':') else {
                continue;
            };
            let name = String::from_utf8_lossy(&line[..colon])
                .trim()
                .to_ascii_lowercase();
            let value = &line[colon + 1..];
            let value = value.strip_prefix(b" ").unwrap_or(value);
            let slot = match name.as_str() {
                "setup" => &mut setup,
                "query" => &mut text.query,
                "content-type" => &mut text.content_type,
                "authorization" => &mut text.authorization,
                "idempotency-key" => &mut text.idempotency_key,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        text.setup = setup.map_or_else(Setup::default, |line| {
            Setup::parse(&String::from_utf8_lossy(line))
        });
        text
    }

    /// The request with the placeholders replaced by `lookup`'s values.
    pub fn materialize(&self, lookup: impl Fn(&str) -> Option<String>) -> Request {
        let mut used = BTreeSet::new();
        let mut fill = |bytes: &[u8]| substitute(bytes, &lookup, &mut used);
        let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
        Request {
            query: self.query.map(&mut fill).map(text).unwrap_or_default(),
            content_type: self.content_type.map(&mut fill).map(text),
            authorization: self
                .authorization
                .map(&mut fill)
                .map(|bytes| text(encode_base64_spans(&bytes))),
            idempotency_key: self.idempotency_key.map(&mut fill).map(text),
            body: fill(self.body),
            used,
        }
    }
}

/// Replaces `{name}` and `{%name}` in `bytes` by `lookup`'s values.
pub fn fill_placeholders(bytes: &[u8], lookup: impl Fn(&str) -> Option<String>) -> Vec<u8> {
    substitute(bytes, &lookup, &mut BTreeSet::new())
}

/// Replaces `{name}` and `{%name}` in `bytes`, noting the names used.
fn substitute(
    bytes: &[u8],
    lookup: &impl Fn(&str) -> Option<String>,
    used: &mut BTreeSet<String>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(open) = rest.iter().position(|&byte| byte == b'{') {
        out.extend_from_slice(&rest[..open]);
        rest = &rest[open..];
        let close = rest.iter().take(40).position(|&byte| byte == b'}');
        let replaced = close.and_then(|close| {
            let inner = std::str::from_utf8(&rest[1..close]).ok()?;
            let (encode, name) = match inner.strip_prefix('%') {
                Some(name) => (true, name),
                None => (false, inner),
            };
            let value = lookup(name)?;
            used.insert(name.to_owned());
            let value = if encode {
                form_urlencoded::byte_serialize(value.as_bytes()).collect()
            } else {
                value
            };
            Some((close, value))
        });
        match replaced {
            Some((close, value)) => {
                out.extend_from_slice(value.as_bytes());
                rest = &rest[close + 1..];
            }
            None => {
                out.push(b'{');
                rest = &rest[1..];
            }
        }
    }
    out.extend_from_slice(rest);
    out
}

/// Replaces each `<<text>>` by the standard base64 of `text`.
fn encode_base64_spans(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some((open, len)) = next_span(rest) {
        out.extend_from_slice(&rest[..open]);
        let inner = &rest[open + 2..open + 2 + len];
        out.extend_from_slice(STANDARD.encode(inner).as_bytes());
        rest = &rest[open + 2 + len + 2..];
    }
    out.extend_from_slice(rest);
    out
}

/// Where the first `<<text>>` starts, and the length of its text.
fn next_span(bytes: &[u8]) -> Option<(usize, usize)> {
    let open = bytes.windows(2).position(|pair| pair == b"<<")?;
    let len = bytes[open + 2..]
        .windows(2)
        .position(|pair| pair == b">>")?;
    Some((open, len))
}

/// A request ready for the gateway.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The query string.
    pub query: String,
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The `Idempotency-Key` header.
    pub idempotency_key: Option<String>,
    /// The body.
    pub body: Vec<u8>,
    /// The placeholder names that were replaced.
    pub used: BTreeSet<String>,
}

impl Request {
    /// The parts an adapter would hand the gateway.
    pub fn parts(&self) -> RequestParts<'_> {
        RequestParts {
            query: &self.query,
            content_type: self.content_type.as_deref(),
            authorization: self.authorization.as_deref(),
            idempotency_key: self.idempotency_key.as_deref(),
            body: &self.body,
        }
    }

    /// Whether placeholder `name` was used anywhere in the request.
    pub fn uses(&self, name: &str) -> bool {
        self.used.contains(name)
    }

    /// Every parameter name the request carries, read both ways a body may
    /// be read: the query's, the body's as a form and as a JSON object.
    /// Names are echoed in errors by design (`parameter X was sent more than
    /// once`), so a secret the input put in a name may come back.
    pub fn parameter_names(&self) -> Vec<String> {
        let mut names: Vec<String> = form_urlencoded::parse(self.query.as_bytes())
            .chain(form_urlencoded::parse(&self.body))
            .map(|(name, _)| name.into_owned())
            .collect();
        if let Ok(object) =
            serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&self.body)
        {
            names.extend(object.keys().cloned());
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "id" => Some("cgid_1".into()),
            "uri" => Some("https://a.example/cb?x=1&y".into()),
            _ => None,
        }
    }

    #[test]
    fn headers_body_and_placeholders_are_read() {
        let data = b"setup: tokens advance=601\nquery: code={code}&r={%uri}\ncontent-type: application/json\nauthorization: Basic <<{id}:s>>\n\n{\"client_id\":\"{id}\"}";
        let text = RequestText::parse(data);
        assert_eq!(
            text.setup,
            Setup {
                fresh: true,
                pkce: false,
                tokens: true,
                advance: 601
            }
        );
        let request = text.materialize(lookup);
        assert_eq!(
            request.query,
            "code={code}&r=https%3A%2F%2Fa.example%2Fcb%3Fx%3D1%26y"
        );
        assert_eq!(request.content_type.as_deref(), Some("application/json"));
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Basic {}", STANDARD.encode("cgid_1:s")).as_str())
        );
        assert_eq!(request.idempotency_key, None);
        assert_eq!(request.body, br#"{"client_id":"cgid_1"}"#);
        assert!(request.uses("id") && request.uses("uri") && !request.uses("code"));
    }

    #[test]
    fn odd_inputs_still_make_a_request() {
        for data in [
            &b""[..],
            b"\n\n",
            b"query",
            b"{",
            b"<<",
            b"authorization: <<a",
            b"\xff:\xfe\n\n\xfd",
        ] {
            let request = RequestText::parse(data).materialize(lookup);
            assert!(request.query.is_empty());
        }
    }
}
