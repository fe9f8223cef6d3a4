//! `/integrations/webhooks`: registration with its validation call, the
//! app's own listing, reads, changes and deletion, and every refusal.

use conversion_gateway::{DestinationRefused, SendOutcome, WebhookId, WebhookStatus, WebhookView};
use serde_json::json;

use crate::support::{Hooks, header, signed_by, status, webhook_body};

#[tokio::test]
async fn a_registration_answers_201_with_the_object_and_its_secret_once() {
    let t = Hooks::new().await;
    let created = t
        .register_with(json!({
            "event_identifiers": ["signup", "demo"],
            "include_relations": ["COMPANY"],
        }))
        .await;
    assert_eq!(created["event_type"], "WEBHOOK.CONVERTED");
    assert_eq!(created["entity_type"], "CONTACT");
    assert_eq!(created["url"], "https://hooks.example.com/in");
    assert_eq!(created["http_method"], "POST");
    assert_eq!(created["event_identifiers"], json!(["signup", "demo"]));
    assert_eq!(created["include_relations"], json!(["COMPANY"]));
    assert_eq!(created["status"], "active");
    assert_eq!(created["created_at"], "2026-01-01T00:00:00Z");
    assert_eq!(created["updated_at"], created["created_at"]);
    let secret = created["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");

    // The validation call came first, signed with that secret.
    let sent = t.receiver.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].url, "https://hooks.example.com/in");
    assert!(signed_by(&sent[0], secret));
    assert!(header(&sent[0], "webhook-id").starts_with("msg_"));
    let body: serde_json::Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(body["validation"], true);
    assert_eq!(body["event_type"], "WEBHOOK.CONVERTED");

    // Never again: not in the list, not in the object.
    let uuid = created["uuid"].as_str().unwrap();
    let shown = t.call("GET", Some(uuid), None).await;
    assert_eq!(shown.status, 200);
    let shown = shown.json_body().unwrap();
    assert!(shown.get("secret").is_none());
    assert_eq!(shown["uuid"], created["uuid"]);
    assert_eq!(shown["last_attempts"], json!([]));
    let listed = t.call("GET", None, None).await;
    assert_eq!(listed.status, 200);
    let webhooks = listed.json_body().unwrap()["webhooks"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(webhooks.len(), 1);
    assert!(webhooks[0].get("secret").is_none());
    assert!(!listed.body_bytes().windows(6).any(|w| w == b"whsec_"));
}

#[tokio::test]
async fn a_url_that_does_not_answer_2xx_to_the_validation_call_is_refused_401_and_nothing_is_created()
 {
    let t = Hooks::new().await;
    for outcome in [
        status(500),
        status(302),
        status(404),
        SendOutcome::TimedOut,
        SendOutcome::Failed("connection refused".into()),
    ] {
        t.receiver
            .answer("https://hooks.example.com/in", [outcome.clone()]);
        let answer = t
            .call(
                "POST",
                None,
                Some(webhook_body("https://hooks.example.com/in")),
            )
            .await;
        assert_eq!(answer.status, 401, "{outcome:?}");
        assert_eq!(answer.json_body().unwrap()["error_type"], "UNAUTHORIZED");
        let message = answer.json_body().unwrap()["error_message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains("validation call"), "{message}");
    }
    let listed = t.call("GET", None, None).await;
    assert_eq!(listed.json_body().unwrap()["webhooks"], json!([]));
}

#[tokio::test]
async fn a_destination_the_transport_refuses_is_a_400_on_url() {
    let t = Hooks::new().await;
    t.receiver.answer(
        "https://rebinds.example.com/in",
        [SendOutcome::Refused(DestinationRefused::PrivateAddress)],
    );
    let answer = t
        .call(
            "POST",
            None,
            Some(webhook_body("https://rebinds.example.com/in")),
        )
        .await;
    assert_eq!(answer.status, 400);
    let errors = &answer.json_body().unwrap()["errors"];
    assert_eq!(errors[0]["path"], "$.url");
    assert_eq!(errors[0]["error_type"], "INVALID_DESTINATION");
    // A name that does not resolve is a call that could not be made: 401.
    t.receiver.answer(
        "https://nowhere.example.com/in",
        [SendOutcome::Refused(DestinationRefused::Unresolvable)],
    );
    let answer = t
        .call(
            "POST",
            None,
            Some(webhook_body("https://nowhere.example.com/in")),
        )
        .await;
    assert_eq!(answer.status, 401);
    let message = answer.json_body().unwrap()["error_message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("does not resolve"), "{message}");
}

#[tokio::test]
async fn private_and_plain_http_urls_are_refused_before_any_call() {
    let t = Hooks::new().await;
    for url in [
        "http://hooks.example.com/in",
        "https://127.0.0.1/in",
        "https://localhost:8443/in",
        "https://[::1]/in",
        "https://10.0.0.8/in",
        "https://169.254.169.254/latest/meta-data/",
    ] {
        let answer = t.call("POST", None, Some(webhook_body(url))).await;
        assert_eq!(answer.status, 400, "{url}");
        assert_eq!(answer.json_body().unwrap()["errors"][0]["path"], "$.url");
    }
    assert!(t.receiver.sent().is_empty(), "no call was made");
}

#[tokio::test]
async fn the_same_url_twice_for_one_event_type_is_refused() {
    let t = Hooks::new().await;
    t.register("https://hooks.example.com/in").await;
    t.receiver.clear();
    let answer = t
        .call(
            "POST",
            None,
            Some(webhook_body("https://hooks.example.com/in")),
        )
        .await;
    assert_eq!(answer.status, 400);
    let error = &answer.json_body().unwrap()["errors"][0];
    assert_eq!(error["error_type"], "DUPLICATE_URL");
    assert_eq!(error["path"], "$.url");
    assert!(
        t.receiver.sent().is_empty(),
        "refused before the validation call: a registration taken already calls nobody"
    );
    // Another URL is fine.
    t.register("https://hooks.example.com/other").await;
}

#[tokio::test]
async fn bad_bodies_list_every_error_and_marked_opportunity_names_the_supported_value() {
    let t = Hooks::new().await;
    let answer = t
        .call(
            "POST",
            None,
            Some(json!({ "event_type": "WEBHOOK.MARKED_OPPORTUNITY", "entity_type": "DEAL" })),
        )
        .await;
    assert_eq!(answer.status, 400);
    let errors = answer.json_body().unwrap()["errors"]
        .as_array()
        .unwrap()
        .clone();
    let paths: Vec<&str> = errors.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        ["$.event_type", "$.entity_type", "$.url", "$.http_method"]
    );
    let message = errors[0]["error_message"].as_str().unwrap();
    assert!(message.contains("WEBHOOK.CONVERTED"), "{message}");
    for error in &errors {
        assert!(error["error_type"].is_string() && error["error_message"].is_string());
    }
    assert!(t.receiver.sent().is_empty());

    let not_json = t.gateway().answer(
        t.gateway()
            .create_webhook(&conversion_gateway::RequestParts {
                content_type: Some("application/json"),
                authorization: Some(&format!("Bearer {}", t.access)),
                body: b"{",
                ..Default::default()
            })
            .await,
    );
    assert_eq!(not_json.status, 400);
    assert_eq!(
        not_json.json_body().unwrap()["errors"][0]["error_type"],
        "BAD_REQUEST"
    );
    let form = t.gateway().answer(
        t.gateway()
            .create_webhook(&conversion_gateway::RequestParts {
                content_type: Some("application/x-www-form-urlencoded"),
                authorization: Some(&format!("Bearer {}", t.access)),
                body: b"url=x",
                ..Default::default()
            })
            .await,
    );
    assert_eq!(form.status, 415);
}

#[tokio::test]
async fn without_a_valid_token_every_route_answers_401() {
    let t = Hooks::new().await;
    let created = t.register("https://hooks.example.com/in").await;
    let uuid = created["uuid"].as_str().unwrap();
    for (method, id) in [
        ("POST", None),
        ("GET", None),
        ("GET", Some(uuid)),
        ("PUT", Some(uuid)),
        ("DELETE", Some(uuid)),
    ] {
        let answer = t
            .call_as(
                "cgat_not-a-token",
                method,
                id,
                Some(webhook_body("https://x.example.com/")),
            )
            .await;
        assert_eq!(answer.status, 401, "{method} {id:?}");
        assert!(answer.header("www-authenticate").is_some());
    }
}

#[tokio::test]
async fn an_app_sees_and_changes_only_its_own_webhooks() {
    let t = Hooks::new().await;
    let created = t.register("https://hooks.example.com/in").await;
    let uuid = created["uuid"].as_str().unwrap();
    let (other, _) = t.f.tokens_of_other_client().await;
    let listed = t.call_as(&other, "GET", None, None).await;
    assert_eq!(listed.json_body().unwrap()["webhooks"], json!([]));
    for method in ["GET", "PUT", "DELETE"] {
        let answer = t
            .call_as(
                &other,
                method,
                Some(uuid),
                Some(webhook_body("https://x.example.com/")),
            )
            .await;
        assert_eq!(answer.status, 404, "{method}");
        assert_eq!(answer.json_body().unwrap()["error_type"], "NOT_FOUND");
    }
    for id in ["not-a-uuid", "00000000-0000-0000-0000-000000000000"] {
        assert_eq!(t.call("GET", Some(id), None).await.status, 404);
    }
}

#[tokio::test]
async fn put_replaces_the_fields_calls_a_new_url_and_switches_status() {
    let t = Hooks::new().await;
    let created = t.register("https://hooks.example.com/in").await;
    let uuid = created["uuid"].as_str().unwrap();
    t.receiver.clear();
    t.f.clock.advance(time::Duration::minutes(5));

    // Same URL: no validation call.
    let mut body = webhook_body("https://hooks.example.com/in");
    body["event_identifiers"] = json!(["signup"]);
    body["status"] = json!("inactive");
    let answer = t.call("PUT", Some(uuid), Some(body)).await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
    let updated = answer.json_body().unwrap();
    assert_eq!(updated["event_identifiers"], json!(["signup"]));
    assert_eq!(updated["status"], "inactive");
    assert_eq!(updated["updated_at"], "2026-01-01T00:05:00Z");
    assert_eq!(updated["created_at"], created["created_at"]);
    assert!(t.receiver.sent().is_empty());

    // A new URL is called first; refused, nothing changes.
    t.receiver
        .answer("https://hooks.example.com/new", [status(500)]);
    let answer = t
        .call(
            "PUT",
            Some(uuid),
            Some(webhook_body("https://hooks.example.com/new")),
        )
        .await;
    assert_eq!(answer.status, 401);
    let shown = t.call("GET", Some(uuid), None).await;
    assert_eq!(
        shown.json_body().unwrap()["url"],
        "https://hooks.example.com/in"
    );
    let mut body = webhook_body("https://hooks.example.com/new");
    body["status"] = json!("active");
    let answer = t.call("PUT", Some(uuid), Some(body)).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.json_body().unwrap()["url"],
        "https://hooks.example.com/new"
    );
    assert_eq!(answer.json_body().unwrap()["status"], "active");

    // A URL another webhook has is refused.
    t.register("https://hooks.example.com/taken").await;
    let answer = t
        .call(
            "PUT",
            Some(uuid),
            Some(webhook_body("https://hooks.example.com/taken")),
        )
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(
        answer.json_body().unwrap()["errors"][0]["error_type"],
        "DUPLICATE_URL"
    );
    // Fields left out keep their values; those sent are checked.
    let answer = t
        .call(
            "PUT",
            Some(uuid),
            Some(json!({ "event_identifiers": ["demo"] })),
        )
        .await;
    assert_eq!(answer.status, 200);
    let kept = answer.json_body().unwrap();
    assert_eq!(kept["url"], "https://hooks.example.com/new");
    assert_eq!(kept["event_identifiers"], json!(["demo"]));
    let answer = t
        .call("PUT", Some(uuid), Some(json!({ "url": null })))
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json_body().unwrap()["errors"][0]["path"], "$.url");
}

#[tokio::test]
async fn put_back_to_active_clears_the_failures_in_the_webhook_it_returns() {
    let t = Hooks::new().await;
    let created = t.register("https://hooks.example.com/in").await;
    let uuid = created["uuid"].as_str().unwrap();
    let id = WebhookId(uuid.parse().unwrap());
    t.receiver
        .answer("https://hooks.example.com/in", [status(500)]);
    t.convert("lead@example.com", "signup").await;
    t.gateway().run_webhooks_once().await.unwrap();
    let failing = t.gateway().all_webhooks().await.unwrap()[0].failing_since;
    assert!(failing.is_some(), "failing since the 500");

    let put = async |status: &str| {
        let mut body = webhook_body("https://hooks.example.com/in");
        body["status"] = json!(status);
        let WebhookView(webhook) = t.update(uuid, &body).await;
        let stored = t.gateway().all_webhooks().await.unwrap();
        assert_eq!(stored[0].id, id);
        (webhook.failing_since, stored[0].failing_since)
    };
    // Switched off, it is still failing; switched on, its failures are
    // cleared, in the webhook returned as in the store.
    assert_eq!(put("inactive").await, (failing, failing));
    assert_eq!(put("active").await, (None, None));
}

#[tokio::test]
async fn delete_answers_204_then_404() {
    let t = Hooks::new().await;
    let created = t.register("https://hooks.example.com/in").await;
    let uuid = created["uuid"].as_str().unwrap();
    let answer = t.call("DELETE", Some(uuid), None).await;
    assert_eq!(answer.status, 204);
    assert!(answer.body_bytes().is_empty());
    assert_eq!(t.call("DELETE", Some(uuid), None).await.status, 404);
    assert_eq!(t.call("GET", Some(uuid), None).await.status, 404);
    // The URL is free again.
    t.register("https://hooks.example.com/in").await;
}

#[tokio::test]
async fn an_account_holds_a_bounded_number_of_webhooks() {
    let t = Hooks::new().await;
    for n in 0..conversion_gateway::MAX_WEBHOOKS_PER_ACCOUNT {
        t.register(&format!("https://hooks.example.com/{n}")).await;
    }
    let answer = t
        .call(
            "POST",
            None,
            Some(webhook_body("https://hooks.example.com/one-more")),
        )
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(
        answer.json_body().unwrap()["errors"][0]["error_type"],
        "TOO_MANY_WEBHOOKS"
    );
}

#[tokio::test]
async fn operators_list_every_webhook_and_switch_them() {
    let t = Hooks::new().await;
    let created = t.register("https://hooks.example.com/in").await;
    let all = t.gateway().all_webhooks().await.unwrap();
    assert_eq!(all.len(), 1);
    let id = all[0].id;
    assert_eq!(id.to_string(), created["uuid"].as_str().unwrap());
    assert!(
        t.gateway()
            .set_webhook_status(id, WebhookStatus::Inactive)
            .await
            .unwrap()
    );
    let shown = t.call("GET", Some(&id.to_string()), None).await;
    assert_eq!(shown.json_body().unwrap()["status"], "inactive");
    let unknown = conversion_gateway::WebhookId(uuid::Uuid::from_u128(9));
    assert!(
        !t.gateway()
            .set_webhook_status(unknown, WebhookStatus::Active)
            .await
            .unwrap()
    );
}
