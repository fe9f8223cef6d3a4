//! What the router tests share: a response read whole, and form and URL
//! helpers.

use serde_json::Value;

pub use conversion_gateway_testkit::{Reply, encode, form, url_param as param};

/// The base URL the tests give the gateway: the realm of its challenges.
pub const BASE_URL: &str = "http://gateway.test";

/// The test app's redirect URI.
pub const DEMO_REDIRECT_URI: &str = "http://127.0.0.1:9/callback";

/// A conversion event the demo account accepts.
pub fn conversion_body(email: &str) -> Value {
    serde_json::json!({
        "event_type": "CONVERSION",
        "event_family": "CDP",
        "payload": { "conversion_identifier": "newsletter", "email": email, "cf_plan": "pro" },
    })
}
