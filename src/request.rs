//! The parts of an HTTP request the core needs, already extracted by the
//! adapter, and the parsing of parameters out of them.

use std::borrow::Cow;
use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// What an adapter extracts from an HTTP request for the core: no web
/// framework's types, only strings and bytes.
///
/// Its `Debug` output is safe to log: the query string (which carries the
/// `api_key`), the `Authorization` header and the body (client secrets,
/// codes, tokens) are redacted; only their presence and size show.
#[derive(Clone, Copy, Default)]
pub struct RequestParts<'a> {
    /// The raw query string, without the `?` (empty when there is none).
    pub query: &'a str,
    /// The `Content-Type` header, if sent.
    pub content_type: Option<&'a str>,
    /// The `Authorization` header, if sent.
    pub authorization: Option<&'a str>,
    /// The `Idempotency-Key` header, if sent. On the event routes, a retry
    /// with the same key and body answers the first request's identifiers.
    /// Keys are scoped by credential (each API key, each application), so
    /// one credential of an account cannot claim another's keys. A header
    /// sent with a value that is not text, or sent more than once, is
    /// [`RequestParts::UNREADABLE`]: refused as an invalid key, never taken
    /// for no key (which would record every retry again).
    pub idempotency_key: Option<&'a str>,
    /// The body bytes.
    pub body: &'a [u8],
}

impl RequestParts<'_> {
    /// What a host passes for a header it received but cannot give as one
    /// text (bytes that are not visible ASCII, or the header repeated):
    /// U+FFFD, which no value the core accepts holds, so the request is
    /// refused as one with an invalid value of that header.
    pub const UNREADABLE: &'static str = "\u{fffd}";
}

impl std::fmt::Debug for RequestParts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        /// A present secret-bearing value, shown as `***`.
        struct Redacted;
        impl std::fmt::Debug for Redacted {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("***")
            }
        }
        f.debug_struct("RequestParts")
            .field("query", &(!self.query.is_empty()).then_some(Redacted))
            .field("content_type", &self.content_type)
            .field("authorization", &self.authorization.map(|_| Redacted))
            .field("idempotency_key", &self.idempotency_key)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// Why parameters could not be read from a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParamsError {
    /// The body's media type is neither JSON nor a form.
    #[error("the content type must be application/json or application/x-www-form-urlencoded")]
    UnsupportedMediaType,
    /// The body could not be parsed as its content type says.
    #[error("the request body could not be parsed as its content type")]
    Malformed,
    /// A parameter was sent more than once (RFC 6749 section 3.2).
    #[error("parameter {0} was sent more than once")]
    Duplicate(String),
    /// A JSON member that must be a string was not.
    #[error("{0} must be a string")]
    NotAString(String),
}

/// The media types a body may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MediaType {
    Json,
    Form,
    /// `text/plain`: what `navigator.sendBeacon` sends a string as.
    Text,
}

/// The media type of `content_type`, ignoring parameters (`; charset=...`,
/// with or without a space, as Authlib sends it) and letter case.
pub(crate) fn media_type(content_type: &str) -> Option<MediaType> {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Some(MediaType::Json)
    } else if essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        Some(MediaType::Form)
    } else if essence.eq_ignore_ascii_case("text/plain") {
        Some(MediaType::Text)
    } else {
        None
    }
}

/// Named string parameters, each sent at most once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    /// The parameters of a query string or form body.
    pub(crate) fn from_form(input: &[u8]) -> Result<Self, ParamsError> {
        let mut map = HashMap::new();
        for (name, value) in form_urlencoded::parse(input) {
            if map.insert(name.to_string(), value.into_owned()).is_some() {
                return Err(ParamsError::Duplicate(name.into_owned()));
            }
        }
        Ok(Self(map))
    }

    /// The value of `name` in a query string or form body, if sent and not
    /// empty: what `from_form(input)?.get(name)` answers, errors included,
    /// without building the map when `input` holds a single parameter (a
    /// conversion's `?api_key=`, on every request).
    pub(crate) fn form_value<'i>(
        input: &'i str,
        name: &str,
    ) -> Result<Option<Cow<'i, str>>, ParamsError> {
        if input.contains('&') {
            let params = Self::from_form(input.as_bytes())?;
            return Ok(params.get(name).map(|value| Cow::Owned(value.to_owned())));
        }
        // No `&`: at most one pair, so nothing can be sent twice. Without a
        // `%` or `+` it decodes to itself.
        if !input.contains(['%', '+']) {
            let (sent, value) = input.split_once('=').unwrap_or((input, ""));
            return Ok((sent == name && !value.is_empty()).then_some(Cow::Borrowed(value)));
        }
        Ok(form_urlencoded::parse(input.as_bytes())
            .find(|(sent, _)| sent == name)
            .map(|(_, value)| value)
            .filter(|value| !value.is_empty()))
    }

    /// The string members of a JSON object. Members that are `null` count as
    /// absent; other non-string members are an error naming the member, since
    /// every parameter of the OAuth endpoints is a string.
    pub(crate) fn from_json(body: &[u8]) -> Result<Self, ParamsError> {
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).map_err(|_| ParamsError::Malformed)?;
        let mut map = HashMap::new();
        for (name, value) in object {
            match value {
                serde_json::Value::String(text) => {
                    map.insert(name, text);
                }
                serde_json::Value::Null => {}
                _ => return Err(ParamsError::NotAString(name)),
            }
        }
        Ok(Self(map))
    }

    /// The parameters of a body, by its content type. An empty body without
    /// a content type has no parameters.
    pub(crate) fn from_body(content_type: Option<&str>, body: &[u8]) -> Result<Self, ParamsError> {
        match content_type.map(media_type) {
            None if body.iter().all(u8::is_ascii_whitespace) => Ok(Self::default()),
            Some(Some(MediaType::Json)) => Self::from_json(body),
            Some(Some(MediaType::Form)) => Self::from_form(body),
            None | Some(None | Some(MediaType::Text)) => Err(ParamsError::UnsupportedMediaType),
        }
    }

    /// The value of `name`, if sent and not empty. RFC 6749 section 3.1:
    /// parameters sent without a value are treated as omitted.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    }
}

/// Credentials in an `Authorization` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeaderCredentials {
    /// `Basic`: a client id and secret (RFC 6749 section 2.3.1).
    Basic {
        client_id: String,
        client_secret: String,
    },
    /// `Bearer`: a token (RFC 6750 section 2.1).
    Bearer(String),
    /// Another scheme, or a header that could not be read.
    Unreadable,
}

/// Reads an `Authorization` header. The scheme is case-insensitive (RFC 9110
/// section 11.1). Basic credentials are percent-decoded as RFC 6749 section
/// 2.3.1 asks; clients that do not encode them (Authlib, requests) send the
/// same bytes for this crate's secrets, whose alphabet needs no encoding.
pub(crate) fn parse_authorization(header: &str) -> HeaderCredentials {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
        return HeaderCredentials::Bearer(rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = STANDARD
            .decode(rest)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok());
        if let Some((id, secret)) = decoded.as_deref().and_then(|text| text.split_once(':')) {
            return HeaderCredentials::Basic {
                client_id: percent_decode(id),
                client_secret: percent_decode(secret),
            };
        }
    }
    HeaderCredentials::Unreadable
}

/// Decodes `application/x-www-form-urlencoded` text (`%XX` and `+`).
fn percent_decode(text: &str) -> String {
    form_urlencoded::parse(format!("x={text}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_api_key_the_authorization_and_the_body() {
        let parts = RequestParts {
            query: "api_key=cgak_secretkey",
            content_type: Some("application/json"),
            authorization: Some("Basic Y2xpZW50OnMzY3JldA=="),
            idempotency_key: Some("order-1"),
            body: br#"{"client_secret":"cgcs_topsecret","code":"cgac_code"}"#,
        };
        let printed = format!("{parts:?}");
        for secret in ["cgak_secretkey", "Y2xpZW50", "cgcs_topsecret", "cgac_code"] {
            assert!(!printed.contains(secret), "{secret} leaked in {printed}");
        }
        assert!(printed.contains("application/json"), "{printed}");
        assert!(printed.contains("body_len: 53"), "{printed}");
        assert!(
            format!("{:?}", RequestParts::default()).contains("query: None"),
            "an empty query shows as absent"
        );
    }

    #[test]
    fn media_types_ignore_parameters_and_case() {
        assert_eq!(media_type("application/json"), Some(MediaType::Json));
        assert_eq!(
            media_type("application/json; charset=utf-8"),
            Some(MediaType::Json)
        );
        assert_eq!(
            media_type("application/x-www-form-urlencoded;charset=UTF-8"),
            Some(MediaType::Form)
        );
        assert_eq!(media_type("Application/JSON"), Some(MediaType::Json));
        assert_eq!(media_type("text/plain"), Some(MediaType::Text));
        assert_eq!(
            media_type("Text/Plain;charset=UTF-8"),
            Some(MediaType::Text)
        );
        assert_eq!(media_type("text/html"), None);
        assert_eq!(media_type("application/jsonx"), None);
    }

    #[test]
    fn one_form_value_is_what_the_whole_map_answers() {
        let inputs = [
            "",
            "api_key=cgak_1",
            "api_key=",
            "api_key",
            "api%5Fkey=a%2Bb+c",
            "api_key=a+b",
            "api_key=caf%C3%A9",
            "api_key=café",
            "other=1",
            "api_key=x&source=site",
            "source=site&api_key=x",
            "api_key=x&api_key=x",
            "api_key=x&other=1&other=2",
            "&api_key=x&",
            "api_key=%FF%FE",
            "api_key=a=b",
            "=x",
            "=",
            "api_key==",
        ];
        for input in inputs {
            let whole = Params::from_form(input.as_bytes());
            let expected = whole.as_ref().map(|params| params.get("api_key"));
            let one = Params::form_value(input, "api_key");
            let one = one.as_ref().map(|value| value.as_deref());
            assert_eq!(
                one.map_err(Clone::clone),
                expected.map_err(Clone::clone),
                "{input}"
            );
        }
        assert!(matches!(
            Params::form_value("api_key=x", "api_key"),
            Ok(Some(Cow::Borrowed("x")))
        ));
    }

    #[test]
    fn form_parameters_are_decoded_and_unique() {
        let params = Params::from_form(b"a=1&b=x%20y+z&c=").unwrap();
        assert_eq!(params.get("a"), Some("1"));
        assert_eq!(params.get("b"), Some("x y z"));
        assert_eq!(params.get("c"), None, "empty values count as omitted");
        assert_eq!(
            Params::from_form(b"a=1&a=2"),
            Err(ParamsError::Duplicate("a".into()))
        );
    }

    #[test]
    fn json_parameters_must_be_strings() {
        let params = Params::from_json(br#"{"code":"x","state":null}"#).unwrap();
        assert_eq!(params.get("code"), Some("x"));
        assert_eq!(params.get("state"), None);
        assert_eq!(
            Params::from_json(br#"{"code":1}"#),
            Err(ParamsError::NotAString("code".into()))
        );
        assert_eq!(Params::from_json(b"[1]"), Err(ParamsError::Malformed));
        assert_eq!(Params::from_json(b"{"), Err(ParamsError::Malformed));
    }

    #[test]
    fn bodies_are_read_by_content_type() {
        assert_eq!(Params::from_body(None, b""), Ok(Params::default()));
        assert_eq!(
            Params::from_body(None, b"a=1"),
            Err(ParamsError::UnsupportedMediaType)
        );
        assert_eq!(
            Params::from_body(Some("text/xml"), b"<a/>"),
            Err(ParamsError::UnsupportedMediaType)
        );
        assert!(Params::from_body(Some("application/x-www-form-urlencoded"), b"a=1").is_ok());
    }

    #[test]
    fn authorization_headers_are_read() {
        // "my id:s3cr%3At" with the colon in the secret percent-encoded.
        let basic = format!("Basic {}", STANDARD.encode("my%20id:s3cr%3At"));
        assert_eq!(
            parse_authorization(&basic),
            HeaderCredentials::Basic {
                client_id: "my id".into(),
                client_secret: "s3cr:t".into()
            }
        );
        assert_eq!(
            parse_authorization("bearer abc"),
            HeaderCredentials::Bearer("abc".into())
        );
        assert_eq!(parse_authorization("Bearer"), HeaderCredentials::Unreadable);
        assert_eq!(
            parse_authorization("Basic !!!"),
            HeaderCredentials::Unreadable
        );
        assert_eq!(
            parse_authorization("Digest x"),
            HeaderCredentials::Unreadable
        );
    }
}
