//! The one error every store operation returns.

use std::error::Error;
use std::sync::Arc;

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};

/// A storage failure.
///
/// Not finding a record is not an error (that is `Ok(None)`); this is the
/// backend failing. The detail kept in `source` is for the host's logs
/// only: the HTTP answer (503, or 422 for [`StoreError::Rejected`]) is
/// generic.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend failed: database down, pool exhausted, timeout, I/O.
    #[error("storage backend failed while trying to {action}")]
    Backend {
        /// What the store was doing, in a few words ("insert an event").
        action: &'static str,
        /// The backend's own error.
        #[source]
        source: Arc<dyn Error + Send + Sync>,
    },
    /// An insert met a record with the same identifier or hash.
    #[error("a {what} with the same identifier already exists")]
    Duplicate {
        /// The kind of record ("client", "access token").
        what: &'static str,
    },
    /// The backend refused the data itself (a value it cannot hold, a
    /// constraint other than uniqueness): the same request would fail the
    /// same way however often it is retried.
    #[error("the storage backend refused the data while trying to {action}")]
    Rejected {
        /// What the store was doing, in a few words ("insert an event").
        action: &'static str,
        /// The backend's own error.
        #[source]
        source: Arc<dyn Error + Send + Sync>,
    },
}

impl StoreError {
    /// Wraps a backend error.
    pub fn backend(action: &'static str, source: impl Error + Send + Sync + 'static) -> Self {
        StoreError::Backend {
            action,
            source: Arc::new(source),
        }
    }

    /// Wraps a backend error caused by the data itself.
    pub fn rejected(action: &'static str, source: impl Error + Send + Sync + 'static) -> Self {
        StoreError::Rejected {
            action,
            source: Arc::new(source),
        }
    }

    /// Whether retrying the same request may succeed: true for a backend
    /// failure or a colliding identifier (a fresh one is drawn on retry),
    /// false when the backend refused the data itself.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Backend { .. } | StoreError::Duplicate { .. } => true,
            StoreError::Rejected { .. } => false,
        }
    }
}

// Beside the error, as every error's answer is: `answer` is a shared type
// below the stores, so the stores still import nothing above them.
/// A store failure, with a generic message so that no internal detail
/// reaches a client. A backend failure is 503 `SERVICE_UNAVAILABLE` with
/// `Retry-After`: nothing was acknowledged and a retry may succeed. Data the
/// backend refused is 422 `UNPROCESSABLE_ENTITY` without `Retry-After`: a
/// client that retried it would loop forever.
impl ToHttpAnswer for StoreError {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        if self.is_retryable() {
            HttpAnswer::error(
                503,
                "SERVICE_UNAVAILABLE",
                "the service is temporarily unavailable, please retry",
            )
            .with_header("retry-after", "1")
        } else {
            HttpAnswer::error(
                422,
                "UNPROCESSABLE_ENTITY",
                "the request holds a value the service cannot store",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_keep_their_source_for_the_logs() {
        let error = StoreError::backend("insert an event", std::io::Error::other("disk on fire"));
        assert_eq!(
            error.to_string(),
            "storage backend failed while trying to insert an event"
        );
        assert!(std::error::Error::source(&error).is_some());
        assert!(error.is_retryable());
        let rejected = StoreError::rejected("insert an event", std::io::Error::other("nul byte"));
        assert!(!rejected.is_retryable());
        assert!(StoreError::Duplicate { what: "client" }.is_retryable());
    }
}
