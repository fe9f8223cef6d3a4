//! OAuth 2.0 for third-party applications, through the `Gateway`: the
//! dialog and PKCE (`dialog`), token issue and client authentication
//! (`token`), the lifecycle over time with every refresh policy (`refresh`),
//! revocation with bearer authentication (`revocation`), introspection and
//! the metadata (`introspection`), and an application's life after
//! registration with the account's connected apps (`lifecycle`).

mod dialog;
mod introspection;
mod lifecycle;
mod refresh;
mod revocation;
mod token;
