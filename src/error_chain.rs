//! An error with its causes on one line, for a log or a message that says
//! what really failed.

use std::error::Error;
use std::fmt;

/// Displays an error and each of its causes ([`Error::source`]), joined by
/// `": "`: "cannot open the SQLite store gateway.db: unable to open
/// database file".
///
/// The library's errors keep their causes apart (a store error's cause is
/// the database's own message), and `%error` in a log shows only the first
/// line of that chain; a host logs or prints `ErrorChain(&error)` instead.
/// It adds nothing of its own, so it shows no more secrets than the errors
/// themselves (the library's show none).
///
/// ```
/// use conversion_gateway::{ErrorChain, StoreError};
///
/// let error = StoreError::backend("read a token", std::io::Error::other("connection refused"));
/// assert!(ErrorChain(&error).to_string().ends_with(": connection refused"));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ErrorChain<'a>(pub &'a dyn Error);

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a source, as a store's is.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("store down")
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_is_shown_with_each_of_its_causes() {
        let error = Wrapped(std::io::Error::other("connection refused"));
        assert_eq!(
            ErrorChain(&error).to_string(),
            "store down: connection refused"
        );
        let alone = std::io::Error::other("no cause");
        assert_eq!(ErrorChain(&alone).to_string(), "no cause");
    }
}
