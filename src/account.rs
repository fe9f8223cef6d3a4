//! Marketing accounts: the resource owners of the OAuth flow and the
//! owners of the contacts that events describe.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::random::{RandomSource, random_uuid};

/// The identifier of an account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AccountId(pub Uuid);

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A marketing account: the resource owner of the OAuth flow and the owner
/// of the contacts that conversion events describe.
#[derive(Clone, PartialEq, Eq)]
pub struct Account {
    /// The identifier.
    pub id: AccountId,
    /// The account's display name, shown on the consent screen.
    pub name: String,
    /// The login e-mail of the account owner, stored lowercased.
    pub email: String,
    /// A password hash in PHC string form (argon2, scrypt...), opaque to the
    /// core: the host verifies logins with the password library it chooses.
    pub password_hash: Option<String>,
    /// The names of the account's custom fields, without the `cf_` prefix.
    /// Conversion payloads may carry `cf_<name>` for each of them.
    pub custom_fields: Vec<String>,
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("email", &self.email)
            .field("password_hash", &self.password_hash.as_ref().map(|_| "***"))
            .field("custom_fields", &self.custom_fields)
            .finish()
    }
}

impl Account {
    /// A new account with a fresh id, its e-mail lowercased.
    pub fn new(name: impl Into<String>, email: &str, random: &dyn RandomSource) -> Self {
        Self {
            id: AccountId(random_uuid(random)),
            name: name.into(),
            email: email.trim().to_lowercase(),
            password_hash: None,
            custom_fields: Vec::new(),
        }
    }

    /// `text` trimmed, if it looks like a login e-mail: something, `@`,
    /// something, and no whitespace. Only a guard against a name or other
    /// value given in its place (an operator's swapped flags); whether the
    /// address works is its owner's to prove.
    ///
    /// # Errors
    /// [`EmailError`] for anything else.
    pub fn checked_email(text: &str) -> Result<String, EmailError> {
        let address = text.trim();
        let looks_right = address
            .split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty())
            && !address.chars().any(char::is_whitespace);
        if looks_right {
            Ok(address.to_owned())
        } else {
            Err(EmailError {
                text: text.to_owned(),
            })
        }
    }
}

/// Text that [`Account::checked_email`] refused.
///
/// Its message follows the name of the setting, as in
/// `format!("--email {error}")`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be an e-mail address, not {text:?}")]
pub struct EmailError {
    /// The text given.
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;

    #[test]
    fn account_debug_hides_the_password_hash() {
        let mut account = Account::new("Acme", " Owner@Example.COM ", &SeededRandom::new(1));
        account.password_hash = Some("$argon2id$v=19$secret".into());
        let printed = format!("{account:?}");
        assert!(!printed.contains("argon2"));
        assert_eq!(account.email, "owner@example.com");
    }

    #[test]
    fn a_login_email_needs_something_on_each_side_of_an_at_and_no_space() {
        assert_eq!(
            Account::checked_email(" Owner@Example.com "),
            Ok("Owner@Example.com".to_owned())
        );
        for bad in [
            "",
            "Acme Inc",
            "@example.com",
            "owner@",
            "ow ner@example.com",
        ] {
            let error = Account::checked_email(bad).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("must be an e-mail address, not {bad:?}")
            );
        }
    }
}
