//! OAuth 2.0 for third-party applications, through the `Gateway`: the
//! dialog and PKCE (`dialog`), token issue and client authentication
//! (`token`), the lifecycle over time with every refresh policy (`refresh`),
//! and revocation with bearer authentication (`revocation`).

mod dialog;
mod refresh;
mod revocation;
mod token;
