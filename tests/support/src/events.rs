//! Event bodies.

use serde_json::{Value, json};

/// A valid conversion event body.
pub fn conversion_body(email: &str) -> Value {
    json!({
        "event_type": "CONVERSION",
        "event_family": "CDP",
        "payload": {
            "conversion_identifier": "newsletter-signup",
            "email": email,
            "name": "Ana Lima",
            "tags": ["lead", "webinar"],
            "cf_plan": "gold",
            "available_for_mailing": true,
        }
    })
}
