//! Registering third-party applications: what an application registers
//! with. The registered [`Client`](crate::records::client::Client) is a
//! stored record, in [`crate::records::client`].

use crate::records::refresh_policy::RefreshPolicy;

/// What an application registers with: its name and callback URLs, and the
/// options that differ from the defaults.
///
/// ```
/// use conversion_gateway::{ClientRegistration, RefreshPolicy};
///
/// let registration = ClientRegistration::new("Lead Sync", ["https://app.example/cb"])
///     .require_pkce(true)
///     .refresh_policy(RefreshPolicy::Reuse);
/// assert!(registration.require_pkce);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientRegistration {
    /// The name shown to the user on the consent screen.
    pub name: String,
    /// The callback URLs; the dialog redirects only to one of these.
    pub redirect_uris: Vec<String>,
    /// Whether every authorization request must carry a PKCE challenge.
    /// Default `false`.
    pub require_pkce: bool,
    /// The application's own refresh policy. Default `None`: the gateway's.
    pub refresh_policy: Option<RefreshPolicy>,
}

impl ClientRegistration {
    /// A registration with the defaults.
    pub fn new<U: Into<String>>(
        name: impl Into<String>,
        redirect_uris: impl IntoIterator<Item = U>,
    ) -> Self {
        Self {
            name: name.into(),
            redirect_uris: redirect_uris.into_iter().map(Into::into).collect(),
            require_pkce: false,
            refresh_policy: None,
        }
    }

    /// Sets whether authorization requests must carry a PKCE challenge.
    pub fn require_pkce(mut self, require: bool) -> Self {
        self.require_pkce = require;
        self
    }

    /// Gives the application a refresh policy of its own, for example
    /// [`RefreshPolicy::Reuse`] for a client known never to store a new
    /// refresh token, or [`RefreshPolicy::Rotate`] for one known to.
    pub fn refresh_policy(mut self, policy: RefreshPolicy) -> Self {
        self.refresh_policy = Some(policy);
        self
    }
}
