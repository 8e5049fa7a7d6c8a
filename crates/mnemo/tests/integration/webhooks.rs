//! Webhooks against the real binary: a local receiver hears every change exactly once across a
//! SIGKILL and a restart, each delivery is signed (a wrong secret does not verify), refused
//! deliveries are retried, dead letters are visible and can be sent again, and the API says
//! what is wrong with a bad request.

use crate::harness::*;
use axum::{Router, body::Bytes, http::HeaderMap, http::StatusCode, routing::post};
use mnemo_core::service::sign_webhook;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const SECRET: &str = "whsec_dGVzdC1zZWNyZXQtZm9yLW1uZW1vLXdlYmhvb2tz";

#[derive(Default)]
struct Receiver {
    accept: AtomicBool,
    refused: AtomicUsize,
    /// Accepted deliveries: (webhook-id, webhook-timestamp, webhook-signature, body).
    got: Mutex<Vec<(String, i64, String, String)>>,
}

async fn receiver() -> (Arc<Receiver>, String) {
    let r = Arc::new(Receiver::default());
    let state = r.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: Bytes| {
            let r = state.clone();
            async move {
                if !r.accept.load(Ordering::SeqCst) {
                    r.refused.fetch_add(1, Ordering::SeqCst);
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
                let h = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                let ts = h("webhook-timestamp").parse().unwrap_or(0);
                let body = String::from_utf8_lossy(&body).into_owned();
                r.got.lock().unwrap().push((h("webhook-id"), ts, h("webhook-signature"), body));
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (r, url)
}

fn event(summary: &str, user: &str) -> Value {
    json!({"collection_name": "c", "event_type": "event_v1", "user_id": user, "memory_info": {"summary": summary}})
}

#[tokio::test]
async fn every_change_reaches_the_receiver_once_across_a_kill_and_restart() {
    let (rx, url) = receiver().await;
    let mut s = Server::start(&format!(
        "webhooks:\n  - url: {url}\n    secret: {SECRET}\n    description: the test receiver\n\
         webhook_delivery:\n  backoff_base_ms: 100\n  backoff_max_secs: 1\n  timeout_ms: 2000\n  max_attempts: 1000\n"
    ));
    let hooks = s.ok("webhook/list", json!({})).await;
    assert_eq!(hooks["count"], json!(1));
    assert_eq!(hooks["webhooks"][0]["source"], json!("config"));
    assert!(hooks["webhooks"][0].get("secret").is_none(), "the secret is never listed");

    // Changes while the receiver refuses everything: acknowledged, announced, not delivered.
    let mut want: Vec<(String, String)> = Vec::new();
    let mut ids = Vec::new();
    for (text, user) in [("alice adopted a quokka", "u1"), ("alice runs on sundays", "u1"), ("bob sails", "u2")] {
        let id = s.ok("event/add", event(text, user)).await["event_id"].as_str().unwrap().to_string();
        want.push(("memory.created".into(), id.clone()));
        ids.push(id);
    }
    s.ok(
        "event/update",
        json!({"collection_name": "c", "event_id": ids[1], "memory_info": {"summary": "alice runs on saturdays"}}),
    )
    .await;
    want.push(("memory.updated".into(), ids[1].clone()));
    s.ok("event/delete", json!({"collection_name": "c", "event_id": ids[0]})).await;
    want.push(("memory.deleted".into(), ids[0].clone()));
    let p =
        s.ok("profile/add", json!({"collection_name": "c", "user_id": "u1", "memory_info": {"city": "Lisbon"}})).await;
    want.push(("profile.updated".into(), p["profile_id"].as_str().unwrap().to_string()));
    // Forgetting u2 takes the announcement of u2's memory (it carries u2's words) out of the
    // outbox, and announces the deletion and the forgetting instead.
    s.ok("user/forget", json!({"collection_name": "c", "user_id": "u2"})).await;
    want.retain(|(_, id)| id != &ids[2]);
    want.push(("memory.deleted".into(), ids[2].clone()));
    want.push(("user.forgotten".into(), "u2".into()));
    // Every announcement refused at least once (on a busy machine the last ones can lag the
    // first ones by several retries, so a total count of refusals is not enough).
    eventually(30, "every delivery refused at least once", || async {
        let d = s.ok("webhook/deliveries", json!({"state": "pending", "limit": 100})).await;
        let all = d["deliveries"].as_array().unwrap();
        (all.len() == want.len() && all.iter().all(|d| d["last_status"].as_u64().is_some_and(|c| c >= 500)))
            .then_some(())
    })
    .await;
    assert!(rx.refused.load(Ordering::SeqCst) >= want.len());
    assert!(rx.got.lock().unwrap().is_empty());

    // SIGKILL mid-retry; a new process on the same data delivers what is owed.
    s.kill9();
    s.restart();
    rx.accept.store(true, Ordering::SeqCst);
    eventually(30, "every change delivered", || async { (rx.got.lock().unwrap().len() >= want.len()).then_some(()) })
        .await;
    // Nothing more arrives (no duplicate from the killed process's claims).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let got = rx.got.lock().unwrap().clone();

    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut heard: Vec<(String, String)> = Vec::new();
    let now = chrono::Utc::now().timestamp();
    for (id, ts, sig, body) in &got {
        *seen.entry(id.clone()).or_default() += 1;
        assert!((now - ts).abs() < 120, "a fresh timestamp: {ts}");
        assert_eq!(sig, &sign_webhook(SECRET, id, *ts, body), "signed with the endpoint's secret");
        assert_ne!(
            sig,
            &sign_webhook("whsec_d3JvbmctdGVzdC1zZWNyZXQ=", id, *ts, body),
            "a wrong secret does not verify"
        );
        assert_ne!(sig, &sign_webhook(SECRET, id, *ts, &format!("{body} ")), "nor a changed body");
        let v: Value = serde_json::from_str(body).unwrap();
        let data = &v["data"];
        assert_eq!((data["project_name"].as_str(), data["collection_name"].as_str()), (Some("default"), Some("c")));
        assert!(v["timestamp"].as_str().unwrap().ends_with('Z'), "{v}");
        let about = ["event_id", "profile_id", "user_id"].iter().find_map(|k| data[*k].as_str()).unwrap();
        heard.push((v["type"].as_str().unwrap().to_string(), about.to_string()));
        if v["type"] == "memory.updated" {
            assert_eq!(data["memory_info"]["summary"], json!("alice runs on saturdays"));
        }
    }
    let dupes: BTreeMap<&String, &usize> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dupes.is_empty(), "each delivery once: {dupes:?}");
    heard.sort();
    want.sort();
    assert_eq!(heard, want);

    let d = s.ok("webhook/deliveries", json!({"state": "delivered", "limit": 100})).await;
    assert_eq!(d["count"], json!(want.len()));
    let retried = d["deliveries"].as_array().unwrap().iter().filter(|d| d["attempts"].as_u64().unwrap() > 1).count();
    assert!(retried >= 7, "the refused ones were attempted more than once: {d}");
    let hooks = s.ok("webhook/list", json!({})).await;
    assert_eq!(hooks["webhooks"][0]["deliveries"], json!({"pending": 0, "delivered": want.len(), "dead": 0}));
}

#[tokio::test]
async fn dead_letters_are_listed_and_sent_again_and_bad_requests_are_named() {
    let (rx, url) = receiver().await;
    rx.accept.store(true, Ordering::SeqCst);
    let s = Server::start(
        "webhook_delivery:\n  backoff_base_ms: 50\n  backoff_max_secs: 1\n  timeout_ms: 1000\n  max_attempts: 2\n",
    );
    // Nobody listens on port 9 of loopback: every attempt fails at once.
    let dead = s.ok("webhook/create", json!({"url": "http://127.0.0.1:9/nobody", "events": ["memory.created"]})).await;
    let dead_id = dead["webhook_id"].as_str().unwrap().to_string();
    assert!(dead["secret"].as_str().unwrap().starts_with("whsec_"), "a generated secret, shown once: {dead}");
    let live = s
        .ok("webhook/create", json!({"url": url, "events": ["memory.deleted"], "secret": "a plain shared secret"}))
        .await;
    assert_eq!(live["secret"], json!("a plain shared secret"));

    let id = s.ok("event/add", event("carol keeps bees", "u3")).await["event_id"].as_str().unwrap().to_string();
    let letters = eventually(20, "a dead letter", || async {
        let d = s.ok("webhook/deliveries", json!({"webhook_id": dead_id, "state": "dead"})).await;
        (d["count"] == json!(1)).then_some(d)
    })
    .await;
    let letter = &letters["deliveries"][0];
    assert_eq!(
        (letter["type"].as_str(), letter["data"]["event_id"].as_str()),
        (Some("memory.created"), Some(id.as_str()))
    );
    assert_eq!(letter["attempts"], json!(2));
    assert!(letter["last_error"].as_str().unwrap().contains("connect"), "{letter}");
    assert!(rx.got.lock().unwrap().is_empty(), "the other endpoint did not subscribe to memory.created");
    let hooks = s.ok("webhook/list", json!({})).await;
    let listed =
        hooks["webhooks"].as_array().unwrap().iter().find(|w| w["webhook_id"] == json!(dead_id)).unwrap().clone();
    assert_eq!(listed["deliveries"]["dead"], json!(1));

    let metrics = http_client().get(format!("{}/metrics", s.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("mnemo_webhook_deliveries{state=\"dead\"} 1"), "{metrics}");
    let again = s.ok("webhook/redeliver", json!({"webhook_id": dead_id})).await;
    assert_eq!(again["count"], json!(1));
    eventually(20, "dead again after its attempts", || async {
        let d = s.ok("webhook/deliveries", json!({"webhook_id": dead_id, "state": "dead"})).await;
        (d["count"] == json!(1) && d["deliveries"][0]["attempts"] == json!(2)).then_some(())
    })
    .await;

    // A plain secret signs with its bytes.
    s.ok("event/delete", json!({"collection_name": "c", "event_id": id})).await;
    let (mid, ts, sig, body) =
        eventually(20, "the delete delivered", || async { rx.got.lock().unwrap().first().cloned() }).await;
    assert_eq!(sig, sign_webhook("a plain shared secret", &mid, ts, &body));

    for (body, status, says) in [
        (json!({"url": "ftp://example.com"}), 400, "url: must start with http:// or https://"),
        (
            json!({"url": "https://example.com", "events": ["memory.exploded"]}),
            400,
            "events[0]: must be one of memory.created",
        ),
        (json!({"url": "https://example.com", "secret": "short"}), 400, "secret: must be 8 to 256 characters"),
        (json!({"url": "https://example.com", "retries": 3}), 400, "retries: unknown field"),
        (json!({}), 400, "url"),
    ] {
        let (st, v) = s.post("webhook/create", body.clone()).await;
        assert_eq!(st, status, "{body} → {v}");
        assert!(v["message"].as_str().unwrap().starts_with(says), "{body} → {v}");
    }
    let (st, v) = s.post("webhook/delete", json!({"webhook_id": "wh_nope"})).await;
    assert_eq!((st, v["message"].as_str().unwrap().starts_with("webhook_id: no webhook")), (404, true), "{v}");
    let (st, v) = s.post("webhook/deliveries", json!({"state": "lost"})).await;
    assert_eq!((st, v["message"].as_str().unwrap().starts_with("state: must be one of pending")), (400, true), "{v}");
    let (st, v) = s.post("webhook/redeliver", json!({"webhook_id": "wh_nope"})).await;
    assert_eq!(st, 404, "{v}");
    s.ok("webhook/delete", json!({"webhook_id": dead_id})).await;
    let left = s.ok("webhook/list", json!({})).await;
    assert_eq!(left["count"], json!(1));
    let d = s.ok("webhook/deliveries", json!({"webhook_id": dead_id})).await;
    assert_eq!(d["count"], json!(0), "its deliveries went with it");
}

#[tokio::test]
async fn a_config_webhook_cannot_be_deleted_through_the_api_and_a_bad_one_stops_the_start() {
    let s = Server::start(
        "webhooks:\n  - url: http://127.0.0.1:9/x\n    secret: a-config-secret\n    events: [job.failed]\n",
    );
    let id = s.ok("webhook/list", json!({})).await["webhooks"][0]["webhook_id"].as_str().unwrap().to_string();
    let (st, v) = s.post("webhook/delete", json!({"webhook_id": id})).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("config file"), "{v}");

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mnemo.yaml");
    std::fs::write(
        &config,
        "webhooks:\n  - url: http://127.0.0.1:9/x\n    secret: a-config-secret\n    events: [memory.lost]\n",
    )
    .unwrap();
    let err = Server::spawn(&config, &dir.path().join("data"), "127.0.0.1:0", &[]).err().expect("refused");
    assert!(err.contains("webhooks[0].events[0]"), "{err}");
    std::fs::write(&config, "webhooks:\n  - url: http://127.0.0.1:9/x\n").unwrap();
    let err = Server::spawn(&config, &dir.path().join("data"), "127.0.0.1:0", &[]).err().expect("refused");
    assert!(err.contains("webhooks[0].secret"), "{err}");
}
