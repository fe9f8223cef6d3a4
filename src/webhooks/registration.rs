//! The body of `POST` and `PUT /integrations/webhooks`: read, checked
//! whole (every problem listed, in the crate's error shape), and turned
//! into a [`WebhookSpec`].

use serde_json::{Map, Value, json};

use crate::records::webhook::{WebhookEventType, WebhookRelation, WebhookStatus};
use crate::webhooks::destination::check_url;
use crate::webhooks::transport::DestinationRefused;

/// The most conversion identifiers one webhook may filter on.
pub const MAX_EVENT_IDENTIFIERS: usize = 100;

/// The longest conversion identifier accepted in `event_identifiers`.
pub const MAX_IDENTIFIER_LEN: usize = 255;

/// The event type the real service has and this platform not yet.
const MARKED_OPPORTUNITY: &str = "WEBHOOK.MARKED_OPPORTUNITY";

/// What a registration asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSpec {
    /// `event_type`.
    pub event_type: WebhookEventType,
    /// `url`, as sent.
    pub url: String,
    /// `event_identifiers` (empty: every conversion), without repeats.
    pub event_identifiers: Vec<String>,
    /// `include_relations`, without repeats, in their fixed order.
    pub include_relations: Vec<WebhookRelation>,
    /// `status`, where the body sets it (`PUT` only).
    pub status: Option<WebhookStatus>,
}

/// One problem of a registration body: answered as an item of `errors`,
/// `{"error_type", "error_message", "path", "validation_rules"?}`, the
/// shape of the intake's validation errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookFieldError {
    /// `error_type`, such as `INVALID_OPTION`.
    pub error_type: &'static str,
    /// `path`, such as `$.url`.
    pub path: String,
    /// `error_message`, in plain English.
    pub message: String,
    /// `validation_rules`, when a rule names what is accepted.
    pub rules: Option<Value>,
}

impl WebhookFieldError {
    fn new(error_type: &'static str, field: &str, message: impl Into<String>) -> Self {
        Self {
            error_type,
            path: if field.is_empty() {
                "$".to_owned()
            } else {
                format!("$.{field}")
            },
            message: message.into(),
            rules: None,
        }
    }

    fn with_rules(mut self, rules: Value) -> Self {
        self.rules = Some(rules);
        self
    }

    /// The item of the `errors` array.
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("error_type".into(), self.error_type.into());
        object.insert("error_message".into(), self.message.clone().into());
        object.insert("path".into(), self.path.clone().into());
        if let Some(rules) = &self.rules {
            object.insert("validation_rules".into(), rules.clone());
        }
        Value::Object(object)
    }

    /// The error about `url` for a refused destination.
    pub(crate) fn destination(refused: &DestinationRefused) -> Self {
        let error_type = match refused {
            DestinationRefused::Malformed | DestinationRefused::Scheme => "INVALID_FORMAT",
            _ => "INVALID_DESTINATION",
        };
        Self::new(error_type, "url", format!("url: {refused}"))
    }
}

/// Reads a registration body: a `POST`'s (`current` is `None`), or a
/// `PUT`'s, whose fields left out keep the webhook's `current` values (so
/// that a client may send the whole object or only what changes) and which
/// may set `status`.
///
/// # Errors
/// Every problem found, in document order of the fields checked.
pub(crate) fn read_spec(
    body: &[u8],
    allow_private: bool,
    current: Option<&Map<String, Value>>,
) -> Result<WebhookSpec, Vec<WebhookFieldError>> {
    let put = current.is_some();
    let object = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut object)) => {
            for (name, value) in current.into_iter().flatten() {
                object.entry(name.clone()).or_insert_with(|| value.clone());
            }
            object
        }
        Ok(_) => {
            return Err(vec![WebhookFieldError::new(
                "BAD_REQUEST",
                "",
                "the body must be a JSON object",
            )]);
        }
        Err(_) => {
            return Err(vec![WebhookFieldError::new(
                "BAD_REQUEST",
                "",
                "the body is not valid JSON",
            )]);
        }
    };
    let mut errors = Vec::new();
    let event_type = read_event_type(&object, &mut errors);
    one_option(&object, "entity_type", "CONTACT", &mut errors);
    let url = read_url(&object, allow_private, &mut errors);
    one_option(&object, "http_method", "POST", &mut errors);
    let event_identifiers = read_identifiers(&object, &mut errors);
    let include_relations = read_relations(&object, &mut errors);
    let status = if put {
        read_status(&object, &mut errors)
    } else {
        None
    };
    match (event_type, url) {
        (Some(event_type), Some(url)) if errors.is_empty() => Ok(WebhookSpec {
            event_type,
            url,
            event_identifiers,
            include_relations,
            status,
        }),
        _ => Err(errors),
    }
}

fn missing(field: &str) -> WebhookFieldError {
    WebhookFieldError::new(
        "CANNOT_BE_NULL",
        field,
        format!("{field} is required and cannot be null"),
    )
}

fn not_a(field: &str, data_type: &str, article: &str) -> WebhookFieldError {
    WebhookFieldError::new(
        "INVALID_DATA_TYPE",
        field,
        format!("{field} must be {article} {data_type}"),
    )
    .with_rules(json!({ "data_type": data_type }))
}

fn read_event_type(
    object: &Map<String, Value>,
    errors: &mut Vec<WebhookFieldError>,
) -> Option<WebhookEventType> {
    let supported = WebhookEventType::Converted.as_str();
    match object.get("event_type") {
        None | Some(Value::Null) => errors.push(missing("event_type")),
        Some(Value::String(text)) => match WebhookEventType::parse(text) {
            Some(event_type) => return Some(event_type),
            None => {
                let message = if text == MARKED_OPPORTUNITY {
                    format!(
                        "event_type {MARKED_OPPORTUNITY} is not supported yet: this platform has no opportunities; the supported value is {supported}"
                    )
                } else {
                    format!("event_type must be {supported}")
                };
                errors.push(
                    WebhookFieldError::new("INVALID_OPTION", "event_type", message)
                        .with_rules(json!({ "valid_options": [supported] })),
                );
            }
        },
        Some(_) => errors.push(not_a("event_type", "string", "a")),
    }
    None
}

/// A required field with a single valid value.
fn one_option(
    object: &Map<String, Value>,
    field: &str,
    only: &str,
    errors: &mut Vec<WebhookFieldError>,
) {
    match object.get(field) {
        None | Some(Value::Null) => errors.push(missing(field)),
        Some(Value::String(text)) if text == only => {}
        Some(Value::String(_)) => errors.push(
            WebhookFieldError::new("INVALID_OPTION", field, format!("{field} must be {only}"))
                .with_rules(json!({ "valid_options": [only] })),
        ),
        Some(_) => errors.push(not_a(field, "string", "a")),
    }
}

fn read_url(
    object: &Map<String, Value>,
    allow_private: bool,
    errors: &mut Vec<WebhookFieldError>,
) -> Option<String> {
    match object.get("url") {
        None | Some(Value::Null) => errors.push(missing("url")),
        Some(Value::String(text)) => match check_url(text, allow_private) {
            Ok(_) => return Some(text.clone()),
            Err(refused) => errors.push(WebhookFieldError::destination(&refused)),
        },
        Some(_) => errors.push(not_a("url", "string", "a")),
    }
    None
}

fn read_identifiers(
    object: &Map<String, Value>,
    errors: &mut Vec<WebhookFieldError>,
) -> Vec<String> {
    let items = match object.get("event_identifiers") {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => {
            errors.push(not_a("event_identifiers", "array", "an"));
            return Vec::new();
        }
    };
    if items.len() > MAX_EVENT_IDENTIFIERS {
        errors.push(
            WebhookFieldError::new(
                "TOO_MANY_ITEMS",
                "event_identifiers",
                format!("event_identifiers holds more than {MAX_EVENT_IDENTIFIERS} items"),
            )
            .with_rules(json!({ "max_items": MAX_EVENT_IDENTIFIERS })),
        );
        return Vec::new();
    }
    let mut identifiers: Vec<String> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let field = format!("event_identifiers[{index}]");
        match item {
            Value::String(text) if text.trim().is_empty() => errors.push(WebhookFieldError::new(
                "CANNOT_BE_BLANK",
                &field,
                format!("{field} cannot be blank"),
            )),
            Value::String(text) if text.chars().count() > MAX_IDENTIFIER_LEN => errors.push(
                WebhookFieldError::new(
                    "VALUE_TOO_LONG",
                    &field,
                    format!("{field} is longer than {MAX_IDENTIFIER_LEN} characters"),
                )
                .with_rules(json!({ "max_length": MAX_IDENTIFIER_LEN })),
            ),
            Value::String(text) => {
                if !identifiers.contains(text) {
                    identifiers.push(text.clone());
                }
            }
            _ => errors.push(not_a(&field, "string", "a")),
        }
    }
    identifiers
}

fn read_relations(
    object: &Map<String, Value>,
    errors: &mut Vec<WebhookFieldError>,
) -> Vec<WebhookRelation> {
    let items = match object.get("include_relations") {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => {
            errors.push(not_a("include_relations", "array", "an"));
            return Vec::new();
        }
    };
    let options: Vec<&str> = WebhookRelation::ALL.iter().map(|r| r.as_str()).collect();
    let mut relations = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let field = format!("include_relations[{index}]");
        match item.as_str().map(WebhookRelation::parse) {
            Some(Some(relation)) => relations.push(relation),
            Some(None) => errors.push(
                WebhookFieldError::new(
                    "INVALID_OPTION",
                    &field,
                    format!("{field} must be one of {}", options.join(", ")),
                )
                .with_rules(json!({ "valid_options": options })),
            ),
            None => errors.push(not_a(&field, "string", "a")),
        }
    }
    relations.sort();
    relations.dedup();
    relations
}

fn read_status(
    object: &Map<String, Value>,
    errors: &mut Vec<WebhookFieldError>,
) -> Option<WebhookStatus> {
    match object.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            let status = WebhookStatus::parse(text);
            if status.is_none() {
                errors.push(
                    WebhookFieldError::new(
                        "INVALID_OPTION",
                        "status",
                        "status must be active or inactive",
                    )
                    .with_rules(json!({ "valid_options": ["active", "inactive"] })),
                );
            }
            status
        }
        Some(_) => {
            errors.push(not_a("status", "string", "a"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: Value) -> Result<WebhookSpec, Vec<WebhookFieldError>> {
        read_spec(body.to_string().as_bytes(), false, None)
    }

    fn put(body: Value, current: &Value) -> Result<WebhookSpec, Vec<WebhookFieldError>> {
        read_spec(body.to_string().as_bytes(), false, current.as_object())
    }

    fn valid() -> Value {
        json!({
            "event_type": "WEBHOOK.CONVERTED",
            "entity_type": "CONTACT",
            "url": "https://hooks.example.com/in",
            "http_method": "POST",
        })
    }

    #[test]
    fn a_valid_body_reads_with_defaults() {
        assert_eq!(
            read(valid()),
            Ok(WebhookSpec {
                event_type: WebhookEventType::Converted,
                url: "https://hooks.example.com/in".into(),
                event_identifiers: Vec::new(),
                include_relations: Vec::new(),
                status: None,
            })
        );
        let mut body = valid();
        body["event_identifiers"] = json!(["signup", "demo", "signup"]);
        body["include_relations"] = json!(["CONTACT_FUNNEL", "COMPANY", "COMPANY"]);
        body["status"] = json!("inactive");
        let spec = read(body.clone()).unwrap();
        assert_eq!(spec.event_identifiers, ["signup", "demo"]);
        assert_eq!(
            spec.include_relations,
            [WebhookRelation::Company, WebhookRelation::ContactFunnel]
        );
        assert_eq!(spec.status, None, "status is read on PUT only");
        let spec = put(body, &valid()).unwrap();
        assert_eq!(spec.status, Some(WebhookStatus::Inactive));
    }

    #[test]
    fn every_error_is_listed_with_its_path() {
        let errors = read(json!({
            "event_type": "WEBHOOK.OTHER",
            "entity_type": "COMPANY",
            "url": "http://hooks.example.com/in",
            "http_method": 1,
            "event_identifiers": ["", 7, "x".repeat(256)],
            "include_relations": ["DEALS", null],
        }))
        .unwrap_err();
        let found: Vec<(&str, &str)> = errors
            .iter()
            .map(|error| (error.error_type, error.path.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("INVALID_OPTION", "$.event_type"),
                ("INVALID_OPTION", "$.entity_type"),
                ("INVALID_FORMAT", "$.url"),
                ("INVALID_DATA_TYPE", "$.http_method"),
                ("CANNOT_BE_BLANK", "$.event_identifiers[0]"),
                ("INVALID_DATA_TYPE", "$.event_identifiers[1]"),
                ("VALUE_TOO_LONG", "$.event_identifiers[2]"),
                ("INVALID_OPTION", "$.include_relations[0]"),
                ("INVALID_DATA_TYPE", "$.include_relations[1]"),
            ]
        );
        assert_eq!(
            errors[0].to_json()["validation_rules"],
            json!({"valid_options": ["WEBHOOK.CONVERTED"]})
        );
        let missing = read(json!({})).unwrap_err();
        let paths: Vec<&str> = missing.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["$.event_type", "$.entity_type", "$.url", "$.http_method"]
        );
        assert!(missing.iter().all(|e| e.error_type == "CANNOT_BE_NULL"));
    }

    #[test]
    fn marked_opportunity_is_refused_naming_the_supported_value() {
        let mut body = valid();
        body["event_type"] = json!("WEBHOOK.MARKED_OPPORTUNITY");
        let errors = read(body).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].error_type, "INVALID_OPTION");
        assert!(
            errors[0].message.contains("WEBHOOK.CONVERTED"),
            "{}",
            errors[0].message
        );
        assert!(errors[0].message.contains("WEBHOOK.MARKED_OPPORTUNITY"));
    }

    #[test]
    fn private_destinations_are_refused_unless_allowed() {
        let mut body = valid();
        body["url"] = json!("https://169.254.169.254/latest");
        let errors = read(body.clone()).unwrap_err();
        assert_eq!(errors[0].error_type, "INVALID_DESTINATION");
        assert_eq!(errors[0].path, "$.url");
        assert!(read_spec(body.to_string().as_bytes(), true, None).is_ok());
    }

    #[test]
    fn bodies_that_are_not_objects_are_bad_requests() {
        for body in [&b"not json"[..], b"[]", b"\"x\"", b""] {
            let errors = read_spec(body, false, None).unwrap_err();
            assert_eq!(errors.len(), 1);
            assert_eq!(errors[0].error_type, "BAD_REQUEST");
            assert_eq!(errors[0].path, "$");
        }
        let mut body = valid();
        body["event_identifiers"] = json!("signup");
        body["include_relations"] = json!({});
        body["status"] = json!(true);
        let errors = put(body, &valid()).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["$.event_identifiers", "$.include_relations", "$.status"]
        );
        // The bounds themselves are accepted.
        let most: Vec<String> = (0..MAX_EVENT_IDENTIFIERS).map(|i| i.to_string()).collect();
        let mut body = valid();
        body["event_identifiers"] = json!(most);
        assert_eq!(
            read(body).unwrap().event_identifiers.len(),
            MAX_EVENT_IDENTIFIERS
        );
        let mut body = valid();
        body["event_identifiers"] = json!(["é".repeat(MAX_IDENTIFIER_LEN)]);
        assert!(
            read(body).is_ok(),
            "the length counts characters, not bytes"
        );
        let too_many: Vec<String> = (0..=MAX_EVENT_IDENTIFIERS).map(|i| i.to_string()).collect();
        let mut body = valid();
        body["event_identifiers"] = json!(too_many);
        assert_eq!(read(body).unwrap_err()[0].error_type, "TOO_MANY_ITEMS");
        let errors = put(json!({"status": "paused"}), &valid()).unwrap_err();
        assert_eq!(errors[0].path, "$.status");
    }

    #[test]
    fn a_put_keeps_the_fields_it_leaves_out() {
        let mut current = valid();
        current["event_identifiers"] = json!(["signup"]);
        let spec = put(json!({"url": "https://hooks.example.com/new"}), &current).unwrap();
        assert_eq!(spec.url, "https://hooks.example.com/new");
        assert_eq!(spec.event_identifiers, ["signup"]);
        assert_eq!(spec.event_type, WebhookEventType::Converted);
        assert_eq!(spec.status, None);
        // What it sends replaces, and is checked.
        let spec = put(json!({"event_identifiers": []}), &current).unwrap();
        assert!(spec.event_identifiers.is_empty());
        let errors = put(json!({"url": null, "entity_type": "DEAL"}), &current).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["$.entity_type", "$.url"]);
        // A body that is not an object is refused whatever the webhook.
        assert!(put(json!([]), &current).is_err());
    }
}
