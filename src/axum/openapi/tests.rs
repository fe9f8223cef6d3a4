//! Every answer the core can give on each route, one per variant of each
//! result and error type, against the document: its status is listed for
//! the route and its body validates against the listed schema. The
//! scenarios of `tests/axum/openapi.rs` reach most answers through the
//! router; these reach the rest (a store refusing data, a limiter down, a
//! PKCE mismatch, a webhook list full). Each error type's samples end in
//! an exhaustive `match`: a new variant does not compile until it has a
//! sample here.

use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

use super::openapi_document;
use crate::account::AccountId;
use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::intake::endpoint::{IntakeError, IntakeReceipt};
use crate::intake::rate_limit::LimitKind;
use crate::intake::rate_limit::answer::RateLimited;
use crate::intake::rate_limit::limit::Limit;
use crate::intake::validator::errors::ValidationErrors;
use crate::intake::validator::limits::ConversionLimits;
use crate::intake::validator::validate_conversion;
use crate::oauth::bearer::BearerError;
use crate::oauth::decisions::Caller;
use crate::oauth::introspection::{ActiveToken, Introspection, TokenKind};
use crate::oauth::revocation::{Revocation, RevocationError};
use crate::oauth::token_endpoint::TokenResponse;
use crate::oauth::token_error::TokenError;
use crate::records::client::ClientId;
use crate::records::grant::GrantId;
use crate::records::webhook::{
    AttemptRecord, DeliveryId, Webhook, WebhookEventType, WebhookId, WebhookRelation, WebhookStatus,
};
use crate::secret::{AccessToken, RefreshToken, SecretHasher};
use crate::store::error::StoreError;
use crate::webhooks::endpoint::{
    WebhookCreated, WebhookDeleted, WebhookDetail, WebhookError, WebhookList, WebhookView,
};
use crate::webhooks::registration::WebhookFieldError;
use crate::webhooks::signing::WebhookSecret;

/// The context of every answer here.
fn context() -> AnswerContext<'static> {
    AnswerContext::new("https://api.example/")
}

/// Asserts that the document lists `answer` for `method path`.
#[track_caller]
fn assert_documented(document: &Value, method: &str, path: &str, answer: &HttpAnswer) {
    let operation = &document["paths"][path][method];
    let response = &operation["responses"][answer.status.to_string()];
    assert!(
        response.is_object(),
        "{method} {path} may answer {answer:?}, which the document does not list"
    );
    let Some(body) = answer.json_body() else {
        assert!(response["content"].is_null(), "{method} {path}: {answer:?}");
        return;
    };
    let schema = &response["content"]["application/json"]["schema"];
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&root)
        .expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|error| format!("{error} at {}", error.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {}: {body} does not match {schema}: {errors:?}",
        answer.status
    );
}

fn store_errors() -> Vec<StoreError> {
    let samples = vec![
        StoreError::backend("read", std::io::Error::other("down")),
        StoreError::Duplicate { what: "event" },
        StoreError::rejected("insert", std::io::Error::other("nul")),
    ];
    for sample in &samples {
        match sample {
            StoreError::Backend { .. }
            | StoreError::Duplicate { .. }
            | StoreError::Rejected { .. } => {}
        }
    }
    samples
}

fn bearer_errors() -> Vec<BearerError> {
    let mut samples = vec![
        BearerError::Missing,
        BearerError::Invalid,
        BearerError::Expired,
    ];
    samples.extend(store_errors().into_iter().map(BearerError::Store));
    for sample in &samples {
        match sample {
            BearerError::Missing
            | BearerError::Invalid
            | BearerError::Expired
            | BearerError::Store(_) => {}
        }
    }
    samples
}

fn token_errors() -> Vec<TokenError> {
    let mut samples = vec![
        TokenError::MissingField {
            path: "body.client_secret",
        },
        TokenError::InvalidDataType {
            path: "body.code".into(),
        },
        TokenError::MalformedBody,
        TokenError::UnsupportedMediaType,
        TokenError::DuplicateParameter {
            name: "code".into(),
        },
        TokenError::Conflicting {
            path: "body.code",
            reason: "the request refreshes a token",
        },
        TokenError::UnsupportedGrantType,
        TokenError::InvalidClient { basic: true },
        TokenError::InvalidClient { basic: false },
        TokenError::InvalidCode,
        TokenError::InvalidCodeVerifier,
        TokenError::ExpiredCode,
        TokenError::InvalidRefreshToken,
    ];
    samples.extend(store_errors().into_iter().map(TokenError::Store));
    for sample in &samples {
        match sample {
            TokenError::MissingField { .. }
            | TokenError::InvalidDataType { .. }
            | TokenError::MalformedBody
            | TokenError::UnsupportedMediaType
            | TokenError::DuplicateParameter { .. }
            | TokenError::Conflicting { .. }
            | TokenError::UnsupportedGrantType
            | TokenError::InvalidClient { .. }
            | TokenError::InvalidCode
            | TokenError::InvalidCodeVerifier
            | TokenError::ExpiredCode
            | TokenError::InvalidRefreshToken
            | TokenError::Store(_) => {}
        }
    }
    samples
}

fn validation_errors() -> Vec<ValidationErrors> {
    let limits = ConversionLimits::default();
    let invalid = br#"{"event_type":"SALE","event_family":1,"payload":{"email":"x","tags":["A"],
        "client_tracking_id":"no","legal_bases":[{"category":"x"}]}}"#;
    let mut many = String::from(r#"{"event_type":"CONVERSION","event_family":"CDP","payload":{"#);
    for index in 0..150 {
        many.push_str(&format!(r#""name{index}":1,"#));
    }
    many.push_str(r#""email":""}}"#);
    let mut samples = vec![ValidationErrors::body_too_large(limits.max_body_bytes)];
    for body in [&invalid[..], b"{", b"[]", many.as_bytes()] {
        samples.push(validate_conversion(body, &[], &limits).expect_err("invalid"));
    }
    samples
}

fn rate_limited() -> RateLimited {
    RateLimited {
        kind: LimitKind::Lead,
        limit: Limit::new(120, time::Duration::days(1)),
        subject: "the contact ana@example.com".into(),
        used: 120,
        retry_after: time::Duration::seconds(90),
    }
}

fn intake_errors() -> Vec<IntakeError> {
    let mut samples = vec![
        IntakeError::InvalidApiKey,
        IntakeError::UnsupportedMediaType,
        IntakeError::MalformedQuery,
        IntakeError::InvalidIdempotencyKey,
        IntakeError::IdempotencyKeyReused,
        IntakeError::RateLimited(rate_limited()),
        IntakeError::LimiterUnavailable,
    ];
    samples.extend(bearer_errors().into_iter().map(IntakeError::Bearer));
    samples.extend(validation_errors().into_iter().map(IntakeError::Invalid));
    samples.extend(store_errors().into_iter().map(IntakeError::Store));
    for sample in &samples {
        match sample {
            IntakeError::InvalidApiKey
            | IntakeError::Bearer(_)
            | IntakeError::UnsupportedMediaType
            | IntakeError::MalformedQuery
            | IntakeError::Invalid(_)
            | IntakeError::InvalidIdempotencyKey
            | IntakeError::IdempotencyKeyReused
            | IntakeError::RateLimited(_)
            | IntakeError::LimiterUnavailable
            | IntakeError::Store(_) => {}
        }
    }
    samples
}

/// The errors of a webhook route: those of every route (token, store, no
/// such webhook), and for `POST` and `PUT` those of the body.
fn webhook_errors(with_body: bool) -> Vec<WebhookError> {
    let mut samples: Vec<WebhookError> = bearer_errors()
        .into_iter()
        .map(WebhookError::Bearer)
        .chain(store_errors().into_iter().map(WebhookError::Store))
        .collect();
    if with_body {
        let field = WebhookFieldError {
            error_type: "INVALID_OPTION",
            path: "$.event_type".into(),
            message: "event_type must be WEBHOOK.CONVERTED".into(),
            rules: Some(json!({ "valid_options": ["WEBHOOK.CONVERTED"] })),
        };
        let plain = WebhookFieldError {
            rules: None,
            ..field.clone()
        };
        samples.extend([
            WebhookError::UnsupportedMediaType,
            WebhookError::Invalid(vec![field, plain]),
            WebhookError::DuplicateUrl,
            WebhookError::TooMany(20),
            WebhookError::ValidationCallFailed {
                seconds: 5,
                reason: "timeout".into(),
            },
        ]);
    }
    for sample in &samples {
        match sample {
            WebhookError::Bearer(_)
            | WebhookError::UnsupportedMediaType
            | WebhookError::Invalid(_)
            | WebhookError::DuplicateUrl
            | WebhookError::TooMany(_)
            | WebhookError::ValidationCallFailed { .. }
            | WebhookError::NotFound
            | WebhookError::Store(_) => {}
        }
    }
    samples
}

fn webhook() -> Webhook {
    let at = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    Webhook {
        id: WebhookId(Uuid::from_u128(7)),
        account_id: AccountId(Uuid::from_u128(8)),
        client_id: ClientId::new("cgid_app"),
        event_type: WebhookEventType::Converted,
        url: "https://hooks.example/in".into(),
        event_identifiers: vec!["newsletter".into()],
        include_relations: vec![WebhookRelation::Company, WebhookRelation::ContactFunnel],
        status: WebhookStatus::Inactive,
        created_at: at,
        updated_at: at,
        secret_salt: [1; 16],
        failing_since: None,
    }
}

fn caller() -> Caller {
    Caller {
        account_id: AccountId(Uuid::from_u128(8)),
        client_id: ClientId::new("cgid_app"),
        grant_id: GrantId(Uuid::from_u128(9)),
    }
}

fn answers<T: ToHttpAnswer>(items: impl IntoIterator<Item = T>) -> Vec<HttpAnswer> {
    items
        .into_iter()
        .map(|item| item.to_http_answer(&context()))
        .collect()
}

#[test]
fn every_answer_of_the_oauth_routes_is_documented() {
    let document = openapi_document();
    let tokens = TokenResponse {
        access_token: AccessToken::new("cgat_a"),
        refresh_token: RefreshToken::new("cgrt_r"),
        expires_in: 86_400,
        caller: caller(),
    };
    let mut token = answers(token_errors());
    token.push(tokens.to_http_answer(&context()));
    for answer in &token {
        assert_documented(&document, "post", "/auth/token", answer);
    }
    let mut revoke = answers(token_errors().into_iter().map(RevocationError::Request));
    revoke.extend(answers(
        bearer_errors().into_iter().map(RevocationError::Bearer),
    ));
    for revoked_grant in [None, Some(GrantId(Uuid::from_u128(1)))] {
        revoke.push(Revocation { revoked_grant }.to_http_answer(&context()));
    }
    for answer in &revoke {
        assert_documented(&document, "post", "/auth/revoke", answer);
    }
    let issued_at = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let active = |kind, expires_at| {
        Introspection::Active(ActiveToken {
            kind,
            client_id: ClientId::new("cgid_app"),
            account_id: AccountId(Uuid::from_u128(8)),
            grant_id: GrantId(Uuid::from_u128(9)),
            issued_at,
            expires_at,
        })
    };
    let mut introspect = answers(token_errors());
    introspect.extend(answers([
        Introspection::Inactive,
        active(TokenKind::AccessToken, Some(issued_at)),
        active(TokenKind::RefreshToken, None),
    ]));
    for answer in &introspect {
        assert_documented(&document, "post", "/auth/introspect", answer);
    }
}

#[test]
fn every_answer_of_the_event_routes_is_documented() {
    let document = openapi_document();
    let one = IntakeReceipt {
        event_uuids: vec![Uuid::from_u128(1)],
        batch_uuid: None,
        replayed: true,
        dropped_attributes: vec!["$.payload.color".into()],
    };
    let batch = IntakeReceipt {
        event_uuids: vec![Uuid::from_u128(1), Uuid::from_u128(2)],
        batch_uuid: Some(Uuid::from_u128(3)),
        replayed: false,
        dropped_attributes: Vec::new(),
    };
    for (path, receipt) in [
        ("/platform/conversions", &one),
        ("/platform/events", &one),
        ("/platform/events/batch", &batch),
    ] {
        let mut all = answers(intake_errors());
        all.push(receipt.to_http_answer(&context()));
        for answer in &all {
            assert_documented(&document, "post", path, answer);
        }
    }
}

#[test]
fn every_answer_of_the_webhook_routes_is_documented() {
    let document = openapi_document();
    let hasher = SecretHasher::new([2; 32]);
    let webhook = webhook();
    let secret = WebhookSecret::derive(&hasher, webhook.id, &webhook.secret_salt);
    let created = WebhookCreated {
        webhook: webhook.clone(),
        secret,
    };
    let attempt = |status, error: Option<&str>| AttemptRecord {
        delivery_id: DeliveryId(Uuid::from_u128(4)),
        webhook_id: webhook.id,
        at: webhook.created_at,
        status,
        error: error.map(str::to_owned),
        duration_ms: 12,
    };
    let detail = WebhookDetail {
        webhook: webhook.clone(),
        attempts: vec![attempt(Some(200), None), attempt(None, Some("timeout"))],
    };
    let not_found = WebhookError::NotFound.to_http_answer(&context());
    let routes: [(&str, &str, bool, HttpAnswer); 5] = [
        (
            "post",
            "/integrations/webhooks",
            true,
            created.to_http_answer(&context()),
        ),
        (
            "get",
            "/integrations/webhooks",
            false,
            WebhookList(vec![webhook.clone()]).to_http_answer(&context()),
        ),
        (
            "get",
            "/integrations/webhooks/{uuid}",
            false,
            detail.to_http_answer(&context()),
        ),
        (
            "put",
            "/integrations/webhooks/{uuid}",
            true,
            WebhookView(webhook.clone()).to_http_answer(&context()),
        ),
        (
            "delete",
            "/integrations/webhooks/{uuid}",
            false,
            WebhookDeleted.to_http_answer(&context()),
        ),
    ];
    for (method, path, with_body, success) in routes {
        let mut all = answers(webhook_errors(with_body));
        all.push(success);
        if path.ends_with("{uuid}") {
            all.push(not_found.clone());
        }
        for answer in &all {
            assert_documented(&document, method, path, answer);
        }
    }
}

/// For every Unicode scalar value `c` the pattern's engine has assigned
/// (Rust's tables may be a Unicode version newer): the validator accepts
/// the event whose `field` is `value(c)` exactly when `pattern` matches it.
/// Returns the characters where they disagree.
fn disagreements(
    field: &str,
    pattern: &str,
    value: impl Fn(char) -> Value,
    text: impl Fn(char) -> String,
) -> Vec<String> {
    let pattern = jsonschema::validator_for(&json!({ "type": "string", "pattern": pattern }))
        .expect("a valid pattern");
    let unassigned =
        jsonschema::validator_for(&json!({ "pattern": "^\\p{Cn}$" })).expect("a valid pattern");
    let limits = ConversionLimits::default();
    let mut found = Vec::new();
    for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
        if unassigned.is_valid(&json!(c.to_string())) {
            continue;
        }
        let mut event = json!({
            "event_type": "CONVERSION",
            "event_family": "CDP",
            "payload": { "conversion_identifier": "x", "email": "ana@example.com" },
        });
        event["payload"][field] = value(c);
        let accepted = validate_conversion(event.to_string().as_bytes(), &[], &limits).is_ok();
        if accepted != pattern.is_valid(&json!(text(c))) {
            found.push(format!("U+{:04X}", u32::from(c)));
        }
    }
    found
}

/// A tag of one character is refused by the validator exactly when the
/// document's tag pattern refuses it: uppercase (`char::is_uppercase`, far
/// more than ASCII), blank or a control character.
#[test]
fn the_tag_pattern_refuses_exactly_what_the_validator_refuses() {
    use crate::axum::openapi::intake::Tag;
    let found = disagreements(
        "tags",
        Tag::pattern(),
        |c| json!([c.to_string()]),
        |c| c.to_string(),
    );
    assert!(found.is_empty(), "{found:?}");
}

/// A required string (`conversion_identifier`) of one character is
/// refused by the validator exactly when the document's pattern refuses it:
/// blank by Rust's white space, or a control character.
#[test]
fn the_required_string_pattern_refuses_exactly_what_the_validator_refuses() {
    use crate::axum::openapi::intake::RequiredString;
    let found = disagreements(
        "conversion_identifier",
        RequiredString::pattern(),
        |c| json!(c.to_string()),
        |c| c.to_string(),
    );
    assert!(found.is_empty(), "{found:?}");
}

/// The document's blank tracking id is exactly what the validator takes
/// for one: a value of a character twice is refused by the validator
/// exactly when the document's pattern for a blank id refuses it (every
/// such value is too short to be a UUID).
#[test]
fn a_blank_tracking_id_is_what_the_validator_calls_blank() {
    use crate::axum::openapi::intake::TrackingId;
    let found = disagreements(
        "client_tracking_id",
        TrackingId::blank_pattern(),
        |c| json!(format!("{c}{c}")),
        |c| format!("{c}{c}"),
    );
    assert!(found.is_empty(), "{found:?}");
}

/// A webhook's conversion identifier of one character is refused as blank
/// by the registration exactly when the document's pattern refuses it, for
/// every Unicode scalar value. (Schemathesis once sent `"\u0085"`, which
/// ECMA-262's `\S` matches and `str::trim` removes.)
#[test]
fn the_event_identifier_pattern_refuses_exactly_what_the_registration_refuses() {
    use crate::axum::openapi::webhooks::EventIdentifier;
    use crate::webhooks::registration::read_spec;
    let pattern = jsonschema::validator_for(
        &json!({ "type": "string", "pattern": EventIdentifier::pattern() }),
    )
    .expect("a valid pattern");
    let found: Vec<String> = (0..=u32::from(char::MAX))
        .filter_map(char::from_u32)
        .filter(|&c| {
            let body = json!({
                "event_type": "WEBHOOK.CONVERTED",
                "entity_type": "CONTACT",
                "url": "https://hooks.example.com/in",
                "http_method": "POST",
                "event_identifiers": [c.to_string()],
            });
            let accepted = read_spec(body.to_string().as_bytes(), false, None).is_ok();
            accepted != pattern.is_valid(&json!(c.to_string()))
        })
        .map(|c| format!("U+{:04X}", u32::from(c)))
        .collect();
    assert!(found.is_empty(), "{found:?}");
    assert!(
        !pattern.is_valid(&json!("\u{85}")),
        "NEL is white space to the registration"
    );
}
