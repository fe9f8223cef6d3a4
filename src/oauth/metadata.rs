//! Authorization server metadata (RFC 8414): what a standard OAuth client
//! reads from `GET /.well-known/oauth-authorization-server` to find the
//! endpoints and what they support.

use serde::Serialize;
use serde_json::json;

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;

/// The path of the authorization dialog (the spec's `{base_url}/auth/dialog`;
/// the page itself is the host's).
pub const AUTHORIZATION_PATH: &str = "/auth/dialog";
/// The path of the token endpoint.
pub const TOKEN_PATH: &str = "/auth/token";
/// The path of the revocation endpoint (RFC 7009).
pub const REVOCATION_PATH: &str = "/auth/revoke";
/// The path of the introspection endpoint (RFC 7662).
pub const INTROSPECTION_PATH: &str = "/auth/introspect";
/// Where the metadata is served (RFC 8414 section 3), for an issuer without
/// a path. An issuer with a path component (`https://host/gw`) serves it at
/// `/.well-known/oauth-authorization-server/gw`, which the host routes.
pub const METADATA_PATH: &str = "/.well-known/oauth-authorization-server";

/// The client authentication methods of every authenticated endpoint: HTTP
/// Basic and the body's `client_id` and `client_secret` (RFC 6749 section
/// 2.3.1).
const AUTH_METHODS: [&str; 2] = ["client_secret_basic", "client_secret_post"];

/// RFC 8414 section 2's metadata of this service, built from
/// [`crate::GatewayConfig::base_url`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
// The schema of `GET /.well-known/oauth-authorization-server` in the
// router's OpenAPI document.
#[cfg_attr(feature = "axum", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct AuthorizationServerMetadata {
    /// The issuer: the base URL.
    pub issuer: String,
    /// The authorization dialog.
    pub authorization_endpoint: String,
    /// The token endpoint.
    pub token_endpoint: String,
    /// The revocation endpoint (RFC 7009).
    pub revocation_endpoint: String,
    /// The introspection endpoint (RFC 7662).
    pub introspection_endpoint: String,
    /// `["code"]`: the authorization code flow only.
    pub response_types_supported: Vec<&'static str>,
    /// `["query"]`: the code comes back in the redirect's query.
    pub response_modes_supported: Vec<&'static str>,
    /// `["authorization_code", "refresh_token"]`.
    pub grant_types_supported: Vec<&'static str>,
    /// HTTP Basic and the body.
    pub token_endpoint_auth_methods_supported: Vec<&'static str>,
    /// As the token endpoint's (a Bearer token is also accepted, which RFC
    /// 8414 has no name for).
    pub revocation_endpoint_auth_methods_supported: Vec<&'static str>,
    /// As the token endpoint's.
    pub introspection_endpoint_auth_methods_supported: Vec<&'static str>,
    /// `["S256"]`: PKCE's plain method is refused (RFC 7636 section 4.2
    /// allows it only for clients that cannot do SHA-256).
    pub code_challenge_methods_supported: Vec<&'static str>,
}

/// `200` with the metadata as JSON; cacheable for an hour, since it changes
/// only with the deployment.
impl ToHttpAnswer for AuthorizationServerMetadata {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        HttpAnswer::json(200, json!(self)).with_header("cache-control", "public, max-age=3600")
    }
}

impl Gateway {
    /// The authorization server metadata (RFC 8414), for `GET
    /// /.well-known/oauth-authorization-server` ([`METADATA_PATH`]). Answer
    /// it with [`Gateway::answer`].
    pub fn metadata(&self) -> AuthorizationServerMetadata {
        let base = &self.config.base_url;
        let endpoint = |path: &str| format!("{base}{path}");
        AuthorizationServerMetadata {
            issuer: base.clone(),
            authorization_endpoint: endpoint(AUTHORIZATION_PATH),
            token_endpoint: endpoint(TOKEN_PATH),
            revocation_endpoint: endpoint(REVOCATION_PATH),
            introspection_endpoint: endpoint(INTROSPECTION_PATH),
            response_types_supported: vec!["code"],
            response_modes_supported: vec!["query"],
            grant_types_supported: vec!["authorization_code", "refresh_token"],
            token_endpoint_auth_methods_supported: AUTH_METHODS.to_vec(),
            revocation_endpoint_auth_methods_supported: AUTH_METHODS.to_vec(),
            introspection_endpoint_auth_methods_supported: AUTH_METHODS.to_vec(),
            code_challenge_methods_supported: vec!["S256"],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayConfig;
    use crate::gateway::Stores;
    use crate::secret::SecretHasher;

    #[test]
    fn the_metadata_names_every_endpoint_under_the_base_url() {
        let gateway = Gateway::new(
            GatewayConfig::new("https://auth.example.com/"),
            Stores::in_memory(),
            SecretHasher::new([1; 32]),
        );
        let answer = gateway.answer(gateway.metadata());
        assert_eq!(answer.status, 200);
        assert_eq!(
            answer.json_body().cloned().unwrap_or_default(),
            json!({
                "issuer": "https://auth.example.com",
                "authorization_endpoint": "https://auth.example.com/auth/dialog",
                "token_endpoint": "https://auth.example.com/auth/token",
                "revocation_endpoint": "https://auth.example.com/auth/revoke",
                "introspection_endpoint": "https://auth.example.com/auth/introspect",
                "response_types_supported": ["code"],
                "response_modes_supported": ["query"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "token_endpoint_auth_methods_supported":
                    ["client_secret_basic", "client_secret_post"],
                "revocation_endpoint_auth_methods_supported":
                    ["client_secret_basic", "client_secret_post"],
                "introspection_endpoint_auth_methods_supported":
                    ["client_secret_basic", "client_secret_post"],
                "code_challenge_methods_supported": ["S256"],
            })
        );
    }
}
