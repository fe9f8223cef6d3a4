//! Client authentication at the token and revocation endpoints (RFC 6749
//! section 2.3.1): HTTP Basic or `client_id`/`client_secret` in the body.

use crate::gateway::Gateway;
use crate::oauth::token_error::TokenError;
use crate::records::client::{Client, ClientId};
use crate::request::{HeaderCredentials, Params, ParamsError, parse_authorization};
use crate::secret::ClientSecret;

/// Client credentials as presented, and whether they came by HTTP Basic.
pub(crate) struct PresentedClient {
    pub(crate) id: String,
    pub(crate) secret: String,
    pub(crate) basic: bool,
}

pub(crate) fn params_error(error: ParamsError) -> TokenError {
    match error {
        ParamsError::UnsupportedMediaType => TokenError::UnsupportedMediaType,
        ParamsError::Malformed => TokenError::MalformedBody,
        ParamsError::Duplicate(name) => TokenError::DuplicateParameter { name },
        ParamsError::NotAString(name) => TokenError::InvalidDataType {
            path: format!("body.{name}"),
        },
    }
}

/// The client credentials of a request: HTTP Basic (RFC 6749 section 2.3.1)
/// or `client_id`/`client_secret` in the body. Both may be sent if they agree;
/// if they disagree, the client is not authenticated (`invalid_client`).
/// A Bearer header is not client authentication and is ignored: some clients
/// send their access token on every request, this one included (the real
/// service's official Ruby client adds `Authorization: Bearer` to all its
/// calls).
///
/// Returns `Ok(None)` when neither was sent.
pub(crate) fn presented_client(
    params: &Params,
    authorization: Option<&str>,
) -> Result<Option<PresentedClient>, TokenError> {
    let header = authorization.map(parse_authorization);
    let body_id = params.get("client_id");
    let body_secret = params.get("client_secret");
    match header {
        Some(HeaderCredentials::Basic {
            client_id,
            client_secret,
        }) => {
            // Credentials in the body that disagree with the header name
            // another client, or the same one with another secret: the
            // client could not be authenticated (RFC 6749 section 5.2,
            // `invalid_client`, 401 with the Basic challenge). The request
            // itself is well formed, so this is not `invalid_request`.
            let disagrees = body_id.is_some_and(|id| id != client_id)
                || body_secret.is_some_and(|secret| secret != client_secret);
            if disagrees {
                return Err(TokenError::InvalidClient { basic: true });
            }
            Ok(Some(PresentedClient {
                id: client_id,
                secret: client_secret,
                basic: true,
            }))
        }
        Some(HeaderCredentials::Unreadable)
            if authorization
                .is_some_and(|h| h.trim_start().to_ascii_lowercase().starts_with("basic")) =>
        {
            Err(TokenError::InvalidClient { basic: true })
        }
        _ => match (body_id, body_secret) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(TokenError::MissingField {
                path: "body.client_id",
            }),
            (Some(_), None) => Err(TokenError::MissingField {
                path: "body.client_secret",
            }),
            (Some(id), Some(secret)) => Ok(Some(PresentedClient {
                id: id.to_owned(),
                secret: secret.to_owned(),
                basic: false,
            })),
        },
    }
}

impl Gateway {
    /// The registered client whose secret was presented.
    pub(crate) async fn authenticate_client(
        &self,
        presented: &PresentedClient,
    ) -> Result<Client, TokenError> {
        let invalid = TokenError::InvalidClient {
            basic: presented.basic,
        };
        let timer = self.metrics.store_operation("clients", "find_client");
        let client = self
            .stores
            .clients
            .find_client(&ClientId::new(presented.id.as_str()))
            .await;
        timer.done();
        let client = client?;
        // Hash the presented secret even for an unknown client, so that the
        // answer's timing does not tell which client ids exist.
        let secret = ClientSecret::new(presented.secret.as_str());
        match client {
            // A client switched off is refused like a wrong secret: its
            // credentials no longer obtain or manage tokens.
            Some(client) if client.secret_matches(&secret, &self.hasher, self.clock.now()) => {
                if client.active {
                    Ok(client)
                } else {
                    Err(invalid)
                }
            }
            Some(_) => Err(invalid),
            None => {
                let _ = secret.hash(&self.hasher);
                Err(invalid)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    fn form(text: &str) -> Params {
        Params::from_form(text.as_bytes()).expect("a valid form")
    }

    fn basic(id: &str, secret: &str) -> String {
        format!("Basic {}", STANDARD.encode(format!("{id}:{secret}")))
    }

    /// What was presented, as `(id, secret, basic)`, or the error's `Debug`.
    fn presented(
        body: &str,
        authorization: Option<&str>,
    ) -> Result<(String, String, bool), String> {
        match presented_client(&form(body), authorization) {
            Ok(Some(client)) => Ok((client.id, client.secret, client.basic)),
            Ok(None) => Err("nothing presented".into()),
            Err(error) => Err(format!("{error:?}")),
        }
    }

    #[test]
    fn basic_and_body_credentials_may_both_be_sent_if_they_agree() {
        let header = basic("app", "s3cret");
        let expected = Ok(("app".to_owned(), "s3cret".to_owned(), true));
        assert_eq!(presented("", Some(&header)), expected);
        assert_eq!(
            presented("client_id=app&client_secret=s3cret", Some(&header)),
            expected
        );
        // An empty value counts as absent (RFC 6749 section 3.1).
        assert_eq!(
            presented("client_id=&client_secret=", Some(&header)),
            expected
        );
        // Body credentials that disagree with the header: not authenticated,
        // whichever half disagrees (RFC 6749 section 5.2, `invalid_client`).
        let refused = Err(format!("{:?}", TokenError::InvalidClient { basic: true }));
        for body in [
            "client_secret=other",
            "client_id=other",
            "client_id=app&client_secret=other",
            "client_id=other&client_secret=s3cret",
        ] {
            assert_eq!(presented(body, Some(&header)), refused, "{body}");
        }
    }

    #[test]
    fn an_unreadable_basic_header_is_an_invalid_client_but_other_schemes_are_ignored() {
        let body = "client_id=app&client_secret=s3cret";
        for header in ["Basic !!!", "  basic !!!", "BASIC"] {
            let outcome = presented(body, Some(header));
            assert_eq!(
                outcome,
                Err(format!("{:?}", TokenError::InvalidClient { basic: true })),
                "{header}"
            );
        }
        // RFC 6749 section 2.3.1 names Basic; a Bearer token (sent by some
        // clients on every call) or another scheme is not client
        // authentication, and the body's credentials count.
        for header in ["Bearer cgat_x", "Digest abc", "Bearer"] {
            assert_eq!(
                presented(body, Some(header)),
                Ok(("app".to_owned(), "s3cret".to_owned(), false)),
                "{header}"
            );
        }
    }
}
