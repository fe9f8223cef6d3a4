//! OAuth 2.0 for third-party applications: the authorization code grant of
//! RFC 6749 section 4.1, with PKCE (RFC 7636), refresh-token rotation
//! (RFC 9700 section 4.14), revocation (RFC 7009) and bearer tokens
//! (RFC 6750).
//!
//! # The flow, step by step
//!
//! RFC 6749 section 4.1's steps, and the method of [`crate::Gateway`] that
//! serves each:
//!
//! | step | what happens | served by |
//! |---|---|---|
//! | (A) | the application sends the browser to the dialog with its `client_id`, `redirect_uri`, `state` and, optionally, a PKCE challenge | [`crate::Gateway::authorization_request`] validates the query ([`dialog`]) |
//! | (B) | the user signs in (the host's page) and allows or denies | [`crate::Gateway::approve`], [`crate::Gateway::deny`] |
//! | (C) | the browser is redirected back with `code` and `state`, or `error=access_denied` | the [`crate::Approval`] or [`crate::Denial`] redirect |
//! | (D) | the application exchanges the code, authenticated with its secret | [`crate::Gateway::token`] ([`token_endpoint`], the client checked by [`client_auth`]) |
//! | (E) | it receives an access token (86400 s) and a refresh token | [`crate::TokenResponse`] |
//!
//! Then, outside section 4.1: refreshing (section 6, the same
//! [`crate::Gateway::token`], in [`refresh`], ruled by the client's
//! [`crate::RefreshPolicy`]),
//! revoking (RFC 7009, [`crate::Gateway::revoke`]), calling the API with
//! the access token ([`crate::Gateway::authenticate_bearer`]), and, for the
//! platform's other services, introspecting a token (RFC 7662,
//! [`crate::Gateway::introspect`]) and discovering the endpoints (RFC 8414,
//! [`crate::Gateway::metadata`]). An application's life after its
//! registration (secret rotation, redirect URIs, switching it off) and an
//! account's connected applications are in [`lifecycle`].
//!
//! Every endpoint loads what it needs, asks a pure function of
//! [`decisions`] what is allowed (no clock, random source or store there),
//! and persists the outcome through [`crate::TokenStore`] in one atomic
//! operation. The records it keeps (clients, grants, codes and tokens) are
//! in [`crate::records`], below this module and the stores; no secret is
//! ever stored, only its keyed hash.

pub(crate) mod bearer;
pub(crate) mod client;
pub(crate) mod client_auth;
pub(crate) mod decisions;
pub(crate) mod dialog;
pub(crate) mod introspection;
pub(crate) mod lifecycle;
pub(crate) mod metadata;
pub(crate) mod refresh;
pub(crate) mod revocation;
pub(crate) mod token_endpoint;
pub(crate) mod token_error;
