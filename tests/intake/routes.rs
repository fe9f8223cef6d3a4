//! Conversion-event intake: API keys, the bearer and batch routes,
//! all-or-nothing batches, idempotent retries, and failures.

use std::sync::Arc;

use conversion_gateway::{ApiKeyError, ApiKeyId, HttpAnswer, RequestParts, Stores};
use conversion_gateway_testkit::*;
use serde_json::{Value, json};
use uuid::Uuid;

struct Intake {
    f: Fixture,
    api_key: String,
}

impl Intake {
    async fn new() -> Self {
        Self::with_stores(Stores::in_memory()).await
    }

    async fn with_stores(stores: Stores) -> Self {
        let f = Fixture::with_stores(stores, |_| {}).await;
        let (_, key) = f
            .gateway
            .issue_api_key(f.account.id, "website")
            .await
            .unwrap();
        Self {
            f,
            api_key: key.expose().to_owned(),
        }
    }

    /// The id of the account's first API key (the one `api_key` holds).
    async fn key_id(&self) -> ApiKeyId {
        let keys = self
            .f
            .stores
            .api_keys
            .list_api_keys(self.f.account.id)
            .await
            .unwrap();
        keys[0].id
    }

    async fn conversion(
        &self,
        query: &str,
        body: &[u8],
        content_type: &str,
        key: Option<&str>,
    ) -> HttpAnswer {
        let outcome = self
            .f
            .gateway
            .record_conversion(&RequestParts {
                query,
                content_type: Some(content_type),
                authorization: None,
                idempotency_key: key,
                body,
            })
            .await;
        self.f.gateway.answer(outcome)
    }

    async fn send(&self, body: &Value) -> HttpAnswer {
        let query = format!("api_key={}", self.api_key);
        self.conversion(
            &query,
            body.to_string().as_bytes(),
            "application/json",
            None,
        )
        .await
    }

    async fn event(
        &self,
        route_batch: bool,
        token: &str,
        body: &[u8],
        key: Option<&str>,
    ) -> HttpAnswer {
        let header = format!("Bearer {token}");
        let parts = RequestParts {
            query: "",
            content_type: Some("application/json; charset=utf-8"),
            authorization: Some(&header),
            idempotency_key: key,
            body,
        };
        let outcome = if route_batch {
            self.f.gateway.record_event_batch(&parts).await
        } else {
            self.f.gateway.record_event(&parts).await
        };
        self.f.gateway.answer(outcome)
    }

    async fn stored(&self, answer: &HttpAnswer) -> Option<conversion_gateway::RecordedEvent> {
        let id: Uuid = body(answer)["event_uuid"].as_str()?.parse().ok()?;
        self.f.stores.events.find_event(id).await.unwrap()
    }
}

#[tokio::test]
async fn a_valid_conversion_is_recorded_under_its_event_uuid() {
    let t = Intake::new().await;
    let answer = t.send(&conversion_body("lead@example.com")).await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
    assert_eq!(body(&answer).as_object().unwrap().len(), 1);
    let stored = t
        .stored(&answer)
        .await
        .expect("recorded under the answered uuid");
    assert_eq!(stored.account_id, t.f.account.id);
    assert_eq!(stored.email, "lead@example.com");
    assert_eq!(stored.conversion_identifier, "newsletter-signup");
    assert_eq!(stored.payload.to_value()["cf_plan"], "gold");
    assert_eq!(
        stored.payload.to_value()["tags"],
        json!(["lead", "webinar"])
    );
    assert_eq!(stored.channel, conversion_gateway::IntakeChannel::ApiKey);
}

#[tokio::test]
async fn each_conversion_is_recorded_each_time() {
    let t = Intake::new().await;
    let a = body(&t.send(&conversion_body("lead@example.com")).await);
    let b = body(&t.send(&conversion_body("lead@example.com")).await);
    assert_ne!(a["event_uuid"], b["event_uuid"]);
}

#[tokio::test]
async fn missing_unknown_and_switched_off_api_keys_are_unauthorized() {
    let t = Intake::new().await;
    let event = conversion_body("lead@example.com").to_string();
    for query in ["", "api_key=", "api_key=cgak_unknown", "other=1"] {
        let answer = t
            .conversion(query, event.as_bytes(), "application/json", None)
            .await;
        assert_error(&answer, 401, "UNAUTHORIZED");
    }
    let key_id = t.key_id().await;
    t.f.gateway.set_api_key_active(key_id, false).await.unwrap();
    let answer = t.send(&conversion_body("lead@example.com")).await;
    assert_error(&answer, 401, "UNAUTHORIZED");
    assert!(
        !String::from_utf8(answer.body_bytes())
            .unwrap()
            .contains(&t.api_key),
        "never echoed"
    );
    t.f.gateway.set_api_key_active(key_id, true).await.unwrap();
    assert_eq!(
        t.send(&conversion_body("lead@example.com")).await.status,
        200
    );
}

/// `GatewayConfig::api_key_cache_ttl`: a key switched off by another
/// instance (here: in the store directly) is still trusted until its cache
/// entry expires, and refused from then on; switched off through the
/// gateway, it is refused at once.
#[tokio::test]
async fn a_key_switched_off_elsewhere_is_refused_once_its_cache_entry_expires() {
    let t = Intake::new().await;
    let ttl = t.f.gateway.config().api_key_cache_ttl;
    assert_eq!(ttl, time::Duration::seconds(10), "the documented default");
    let event = conversion_body("lead@example.com");
    assert_eq!(t.send(&event).await.status, 200, "the key is now cached");
    let key_id = t.key_id().await;
    t.f.stores
        .api_keys
        .set_api_key_active(key_id, false)
        .await
        .unwrap();
    t.f.clock.advance(ttl - time::Duration::milliseconds(1));
    assert_eq!(t.send(&event).await.status, 200, "within the time to live");
    t.f.clock.advance(time::Duration::milliseconds(1));
    assert_error(&t.send(&event).await, 401, "UNAUTHORIZED");

    // Switched on again: usable at once (a refused key is never cached).
    t.f.stores
        .api_keys
        .set_api_key_active(key_id, true)
        .await
        .unwrap();
    assert_eq!(t.send(&event).await.status, 200);
    // Switched off through this gateway: refused at once, cached or not.
    t.f.gateway.set_api_key_active(key_id, false).await.unwrap();
    assert_error(&t.send(&event).await, 401, "UNAUTHORIZED");
}

/// A request that read its key as on before `set_api_key_active(false)`
/// finishes as it began, but cannot put the key back into the cache that
/// the switch cleared: the next request is refused, not accepted for another
/// time to live.
#[tokio::test]
async fn a_key_switched_off_during_a_lookup_in_flight_is_refused_from_the_next_request() {
    let held = Arc::new(HeldApiKeys::default());
    let t = Intake::with_stores(Stores {
        api_keys: held.clone(),
        ..Stores::in_memory()
    })
    .await;
    let key_id = t.key_id().await;
    let event = conversion_body("lead@example.com");

    let mut lookup = held.hold_next_lookup();
    let switch_off = async {
        // The request has read the key as on; it has not answered yet.
        lookup.until_read().await;
        let found = t.f.gateway.set_api_key_active(key_id, false).await;
        assert!(found.unwrap(), "the key exists");
        lookup.release();
    };
    let (in_flight, ()) = tokio::join!(t.send(&event), switch_off);
    assert_eq!(in_flight.status, 200, "{:?}", in_flight.json_body());

    // Same instant, same gateway: nothing of the stale read was kept.
    assert_error(&t.send(&event).await, 401, "UNAUTHORIZED");
}

/// The bound across instances holds from the switch, however long the
/// lookup that cached the key took: its entry lives from the moment the
/// store was asked, not from the answer.
#[tokio::test]
async fn a_key_switched_off_elsewhere_during_a_slow_lookup_is_refused_one_ttl_after_the_switch() {
    let held = Arc::new(HeldApiKeys::default());
    let t = Intake::with_stores(Stores {
        api_keys: held.clone(),
        ..Stores::in_memory()
    })
    .await;
    let ttl = t.f.gateway.config().api_key_cache_ttl;
    let key_id = t.key_id().await;
    let event = conversion_body("lead@example.com");

    let mut lookup = held.hold_next_lookup();
    let switch_off_elsewhere = async {
        lookup.until_read().await;
        // Another instance switches the key off in the store just after
        // this request read it, and this request's lookup takes 5 s more.
        t.f.stores
            .api_keys
            .set_api_key_active(key_id, false)
            .await
            .unwrap();
        t.f.clock.advance(time::Duration::seconds(5));
        lookup.release();
    };
    let (in_flight, ()) = tokio::join!(t.send(&event), switch_off_elsewhere);
    assert_eq!(in_flight.status, 200, "{:?}", in_flight.json_body());

    // Cached, as another instance's switch cannot reach this cache...
    t.f.clock
        .advance(ttl - time::Duration::seconds(5) - time::Duration::milliseconds(1));
    assert_eq!(t.send(&event).await.status, 200, "within the time to live");
    // ...but for no longer than the time to live after the switch.
    t.f.clock.advance(time::Duration::milliseconds(1));
    assert_error(&t.send(&event).await, 401, "UNAUTHORIZED");
}

#[tokio::test]
async fn a_zero_api_key_cache_ttl_asks_the_store_every_time() {
    let f = Fixture::with_config(|config| config.api_key_cache_ttl = time::Duration::ZERO).await;
    let (record, key) = f
        .gateway
        .issue_api_key(f.account.id, "website")
        .await
        .unwrap();
    let t = Intake {
        f,
        api_key: key.expose().to_owned(),
    };
    let event = conversion_body("lead@example.com");
    assert_eq!(t.send(&event).await.status, 200);
    t.f.stores
        .api_keys
        .set_api_key_active(record.id, false)
        .await
        .unwrap();
    assert_error(&t.send(&event).await, 401, "UNAUTHORIZED");
}

#[tokio::test]
async fn an_account_holds_at_most_five_api_keys() {
    let t = Intake::new().await;
    for _ in 0..4 {
        t.f.gateway
            .issue_api_key(t.f.account.id, "more")
            .await
            .expect("room for five keys");
    }
    let refused =
        t.f.gateway
            .issue_api_key(t.f.account.id, "sixth")
            .await
            .unwrap_err();
    assert!(
        matches!(refused, ApiKeyError::LimitReached { max: 5 }),
        "{refused:?}"
    );
    let answer = t.f.gateway.answer(&refused);
    assert_error(&answer, 409, "API_KEY_LIMIT_REACHED");
    let keys =
        t.f.stores
            .api_keys
            .list_api_keys(t.f.account.id)
            .await
            .unwrap();
    assert_eq!(keys.len(), 5, "the refused key was not stored");
}

#[tokio::test]
async fn the_spec_example_of_an_unaccepted_event_type_comes_out_as_shown() {
    let t = Intake::new().await;
    let mut event = conversion_body("lead@example.com");
    event["event_type"] = json!("OPPORTUNITY");
    let answer = t.send(&event).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let errors = body(&answer)["errors"].as_array().unwrap().clone();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["error_type"], "INVALID_OPTION");
    assert_eq!(
        errors[0]["validation_rules"],
        json!({"valid_options": ["CONVERSION"]})
    );
    assert_eq!(errors[0]["path"], "$.event_type");
    assert!(
        errors[0]["error_message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
}

#[tokio::test]
async fn every_validation_error_is_reported_and_nothing_is_recorded() {
    let t = Intake::new().await;
    let event = json!({
        "event_type": "CONVERSION", "event_family": "B2B",
        "payload": {"conversion_identifier": " ", "email": "not-an-email", "tags": ["ok", 3]},
    });
    let answer = t.send(&event).await;
    assert_eq!(answer.status, 400);
    let types: Vec<_> = body(&answer)["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error_type"].clone())
        .collect();
    assert!(types.len() >= 4, "{types:?}");
    assert!(types.contains(&json!("INVALID_OPTION")), "{types:?}");
    assert!(types.contains(&json!("CANNOT_BE_BLANK")), "{types:?}");
    assert!(types.contains(&json!("INVALID_EMAIL_FORMAT")), "{types:?}");
    assert!(types.contains(&json!("INVALID_DATA_TYPE")), "{types:?}");
}

#[tokio::test]
async fn wrong_content_type_malformed_and_oversized_bodies_are_json_errors() {
    let t = Intake::new().await;
    let query = format!("api_key={}", t.api_key);
    let event = conversion_body("lead@example.com").to_string();
    for other in [
        "text/html",
        "application/xml",
        "multipart/form-data; boundary=x",
        "",
    ] {
        let answer = t.conversion(&query, event.as_bytes(), other, None).await;
        assert_error(&answer, 415, "UNSUPPORTED_MEDIA_TYPE");
    }
    let answer = t
        .conversion(&query, b"{\"event_type\":", "application/json", None)
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(body(&answer)["errors"][0]["error_type"], "BAD_REQUEST");
    let huge = vec![b' '; 300 * 1024];
    let answer = t.conversion(&query, &huge, "application/json", None).await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn a_beacons_text_plain_conversion_is_recorded_in_any_charset() {
    let t = Intake::new().await;
    let query = format!("api_key={}", t.api_key);
    for content_type in [
        "text/plain;charset=UTF-8",
        "text/plain",
        "Text/Plain; charset=utf-8",
        "text/plain; charset=ISO-8859-1",
    ] {
        let event = conversion_body("beacon@example.com").to_string();
        let answer = t
            .conversion(&query, event.as_bytes(), content_type, None)
            .await;
        assert_eq!(
            answer.status,
            200,
            "{content_type}: {:?}",
            answer.json_body()
        );
        let stored = t.stored(&answer).await.expect("recorded");
        assert_eq!(stored.email, "beacon@example.com");
    }
    // The body is validated as any other: a broken one is a 400.
    let answer = t
        .conversion(&query, b"{\"event_type\":", "text/plain", None)
        .await;
    assert_eq!(answer.status, 400);
}

#[tokio::test]
async fn unknown_attributes_are_dropped_and_reported() {
    let t = Intake::new().await;
    let mut event = conversion_body("lead@example.com");
    event["payload"]["favourite_color"] = json!("teal");
    event["payload"]["cf_not_a_field"] = json!("x");
    let parts_query = format!("api_key={}", t.api_key);
    let bytes = event.to_string();
    let receipt =
        t.f.gateway
            .record_conversion(&RequestParts {
                query: &parts_query,
                content_type: Some("application/json"),
                authorization: None,
                idempotency_key: None,
                body: bytes.as_bytes(),
            })
            .await
            .unwrap();
    assert_eq!(
        receipt.dropped_attributes.len(),
        2,
        "{:?}",
        receipt.dropped_attributes
    );
    let stored =
        t.f.stores
            .events
            .find_event(receipt.event_uuids[0])
            .await
            .unwrap()
            .unwrap();
    let payload = stored.payload.to_value();
    let outcome = payload.get("favourite_color");
    assert!(outcome.is_none(), "{outcome:?}");
    let outcome = payload.get("cf_not_a_field");
    assert!(outcome.is_none(), "{outcome:?}");
}

#[tokio::test]
async fn the_bearer_route_records_events_for_the_token_account() {
    let t = Intake::new().await;
    let (access, _) = t.f.tokens().await;
    let event = conversion_body("lead@example.com").to_string();
    let answer = t.event(false, &access, event.as_bytes(), None).await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
    let stored = t.stored(&answer).await.unwrap();
    assert_eq!(
        stored.channel,
        conversion_gateway::IntakeChannel::Bearer {
            client_id: t.f.client.id.clone()
        }
    );
    let answer = t.event(false, "cgat_forged", event.as_bytes(), None).await;
    assert_error(&answer, 401, "UNAUTHORIZED");
    assert!(
        answer
            .header("www-authenticate")
            .unwrap()
            .contains("invalid_token")
    );
}

#[tokio::test]
async fn a_batch_is_recorded_in_request_order() {
    let t = Intake::new().await;
    let (access, _) = t.f.tokens().await;
    let batch = json!([
        conversion_body("a@example.com"),
        conversion_body("b@example.com"),
        conversion_body("c@example.com")
    ]);
    let answer = t
        .event(true, &access, batch.to_string().as_bytes(), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
    let b = body(&answer);
    assert!(
        b["event_batch_uuid"]
            .as_str()
            .unwrap()
            .parse::<Uuid>()
            .is_ok()
    );
    let events = b["events"].as_array().unwrap();
    assert_eq!(events.len(), 3);
    for (event, email) in events
        .iter()
        .zip(["a@example.com", "b@example.com", "c@example.com"])
    {
        let id: Uuid = event["event_uuid"].as_str().unwrap().parse().unwrap();
        let stored = t.f.stores.events.find_event(id).await.unwrap().unwrap();
        assert_eq!(stored.email, email);
    }
}

#[tokio::test]
async fn an_invalid_batch_records_nothing_and_names_each_event() {
    let sink = Arc::new(conversion_gateway::MemoryEventSink::new());
    let stores = Stores {
        events: sink.clone(),
        feed: sink.clone(),
        ..Stores::in_memory()
    };
    let t = Intake::with_stores(stores).await;
    let (access, _) = t.f.tokens().await;
    let batch = json!([
        conversion_body("a@example.com"),
        conversion_body("a@example.com"),
        conversion_body("bad"),
        conversion_body("b@example.com")
    ]);
    let answer = t
        .event(true, &access, batch.to_string().as_bytes(), None)
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(body(&answer)["errors"][0]["path"], "$[2].payload.email");
    assert!(sink.is_empty(), "all or nothing");
}

#[tokio::test]
async fn a_retry_with_the_same_idempotency_key_answers_the_first_uuid() {
    let sink = Arc::new(conversion_gateway::MemoryEventSink::new());
    let stores = Stores {
        events: sink.clone(),
        feed: sink.clone(),
        ..Stores::in_memory()
    };
    let t = Intake::with_stores(stores).await;
    let query = format!("api_key={}", t.api_key);
    let event = conversion_body("lead@example.com").to_string();
    let first = t
        .conversion(
            &query,
            event.as_bytes(),
            "application/json",
            Some("retry-1"),
        )
        .await;
    let second = t
        .conversion(
            &query,
            event.as_bytes(),
            "application/json",
            Some("retry-1"),
        )
        .await;
    assert_eq!(first.status, 200);
    assert_eq!(second.status, 200);
    assert_eq!(body(&first)["event_uuid"], body(&second)["event_uuid"]);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(sink.len(), 1, "recorded once");

    let other = conversion_body("other@example.com").to_string();
    let answer = t
        .conversion(
            &query,
            other.as_bytes(),
            "application/json",
            Some("retry-1"),
        )
        .await;
    assert_error(&answer, 409, "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(sink.len(), 1);

    let answer = t
        .conversion(
            &query,
            event.as_bytes(),
            "application/json",
            Some("bad key"),
        )
        .await;
    assert_error(&answer, 400, "INVALID_IDEMPOTENCY_KEY");
}

#[tokio::test]
async fn idempotency_keys_expire_after_the_retention_window() {
    let t = Intake::new().await;
    let query = format!("api_key={}", t.api_key);
    let event = conversion_body("lead@example.com").to_string();
    let first = t
        .conversion(&query, event.as_bytes(), "application/json", Some("k"))
        .await;
    t.f.clock.advance(time::Duration::hours(24));
    let later = t
        .conversion(&query, event.as_bytes(), "application/json", Some("k"))
        .await;
    assert_ne!(body(&first)["event_uuid"], body(&later)["event_uuid"]);
}

#[tokio::test]
async fn a_failing_sink_answers_503_without_a_uuid() {
    let stores = Stores {
        events: Arc::new(DownStore),
        ..Stores::in_memory()
    };
    let t = Intake::with_stores(stores).await;
    let answer = t.send(&conversion_body("lead@example.com")).await;
    assert_error(&answer, 503, "SERVICE_UNAVAILABLE");
    let text = String::from_utf8(answer.body_bytes()).unwrap();
    assert!(!text.contains("event_uuid"), "{text:?}");
    assert!(!text.contains("db.internal"), "no internal detail");
}

#[tokio::test]
async fn an_event_larger_than_the_sink_keeps_answers_422_and_is_not_recorded() {
    let sink = Arc::new(conversion_gateway::MemoryEventSink::new().with_max_event_text(1_000));
    let stores = Stores {
        events: sink.clone(),
        feed: sink.clone(),
        ..Stores::in_memory()
    };
    let t = Intake::with_stores(stores).await;
    let mut large = conversion_body("lead@example.com");
    large["payload"]["name"] = json!("n".repeat(1_000));
    let answer = t.send(&large).await;
    assert_error(&answer, 422, "UNPROCESSABLE_ENTITY");
    assert_eq!(answer.header("retry-after"), None, "retrying cannot help");
    assert!(sink.is_empty());
    // A small one is still recorded.
    let small = t.send(&conversion_body("lead@example.com")).await;
    assert_eq!(small.status, 200);
    assert!(t.stored(&small).await.is_some());
}

#[tokio::test]
async fn idempotency_keys_are_scoped_by_credential() {
    let t = Intake::new().await;
    let (token, _) = t.f.tokens().await;
    let query = format!("api_key={}", t.api_key);
    let website = conversion_body("form@example.com").to_string();
    let from_website = t
        .conversion(
            &query,
            website.as_bytes(),
            "application/json",
            Some("order-1"),
        )
        .await;
    assert_eq!(from_website.status, 200, "{:?}", body(&from_website));

    // Whoever reads the public website key cannot pre-claim the app's keys:
    // the app's own request with that key and another body is recorded.
    let app = conversion_body("app@example.com").to_string();
    let from_app = t
        .event(false, &token, app.as_bytes(), Some("order-1"))
        .await;
    assert_eq!(from_app.status, 200, "{:?}", body(&from_app));
    assert_ne!(
        body(&from_app)["event_uuid"],
        body(&from_website)["event_uuid"]
    );
    assert_eq!(from_app.header("idempotent-replayed"), None);

    // Each credential's retries still answer from its own claim.
    let app_retry = t
        .event(false, &token, app.as_bytes(), Some("order-1"))
        .await;
    assert_eq!(
        body(&app_retry)["event_uuid"],
        body(&from_app)["event_uuid"]
    );
    let website_retry = t
        .conversion(
            &query,
            website.as_bytes(),
            "application/json",
            Some("order-1"),
        )
        .await;
    assert_eq!(
        body(&website_retry)["event_uuid"],
        body(&from_website)["event_uuid"]
    );

    // A second API key of the same account has a key space of its own.
    let (_, second_key) =
        t.f.gateway
            .issue_api_key(t.f.account.id, "landing page")
            .await
            .unwrap();
    let other = conversion_body("landing@example.com").to_string();
    let from_second_key = t
        .conversion(
            &format!("api_key={}", second_key.expose()),
            other.as_bytes(),
            "application/json",
            Some("order-1"),
        )
        .await;
    assert_eq!(from_second_key.status, 200, "{:?}", body(&from_second_key));
    assert_ne!(
        body(&from_second_key)["event_uuid"],
        body(&from_website)["event_uuid"]
    );
}
