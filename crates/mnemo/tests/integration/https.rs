//! Outbound HTTPS against servers with a private CA, as a hosted model behind a corporate CA or a
//! TLS-terminated vLLM/TEI looks to mnemo: chat extraction, embeddings and a webhook receiver
//! all work with `tls.ca_file`; a certificate from an untrusted CA or for another name fails at
//! once, permanently, saying which URL, why, and what to configure; the CLI takes `--ca-file`.

use crate::harness::*;
use crate::llm::{Answer, fake_llm_app};
use crate::pki::Pki;
use axum::{Router, body::Bytes, http::StatusCode, routing::post};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

fn extraction() -> Answer {
    Answer::Json(json!({
        "events": [{"type": "event_v1", "fields": {"summary": "The user adopted a cat named Miso."}, "source": [1], "supersedes": null}],
        "profile": [{"type": "profile_v1", "op": "add", "attribute": "pets", "value": "cat"}],
    }))
}

fn chats(requests: &Mutex<Vec<Value>>) -> Vec<Value> {
    requests.lock().unwrap().iter().filter(|b| b.get("messages").is_some()).cloned().collect()
}

#[tokio::test]
async fn extraction_embeddings_and_webhooks_reach_https_endpoints_of_a_private_ca() {
    let pki = Pki::new();
    let (app, llm) = fake_llm_app(false, |_, _| extraction());
    let port = pki.serve(app).await;
    let hooks: Arc<Mutex<Vec<String>>> = Arc::default();
    let got = hooks.clone();
    let receiver = Router::new().route(
        "/hook",
        post(move |body: Bytes| {
            let got = got.clone();
            async move {
                got.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
                StatusCode::NO_CONTENT
            }
        }),
    );
    let hook_port = pki.serve(receiver).await;
    let s = Server::start(&format!(
        "tls:\n  ca_file: {ca}\n\
         extraction:\n  provider: llm\n  base_url: https://localhost:{port}/v1\n  model: hosted-model\n  request_timeout_secs: 5\n\
         embedding:\n  provider: openai\n  base_url: https://localhost:{port}/v1\n  model: hosted-embedder\n  dimension: 8\n\
         webhooks:\n  - url: https://localhost:{hook_port}/hook\n    secret: whsec_dGVzdC1zZWNyZXQtZm9yLW1uZW1vLXdlYmhvb2tz\n\
         webhook_delivery:\n  backoff_base_ms: 100\n  backoff_max_secs: 1\n",
        ca = pki.ca_file.display()
    ));
    s.write(
        "conv",
        msgs(&[("user", "I adopted a cat named Miso."), ("assistant", "Congratulations!")]),
        json!({"message_count": 2}),
        "u1",
    )
    .await;
    let jobs = eventually(30, "the extraction to finish", || async {
        let jobs = s.jobs().await;
        jobs.iter().all(|j| j["state"] == "done").then_some(jobs)
    })
    .await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(chats(&llm.requests).len(), 1, "one chat call over https");
    let events = s.events("u1").await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(events[0]["memory_info"]["summary"].as_str().unwrap().contains("Miso"));
    // The event was embedded by the https endpoint: a query search ranks it.
    let found =
        s.ok("event/search", json!({"collection_name": "c", "query": "cat", "filter": {"user_id": "u1"}})).await;
    assert_eq!(found["result_list"].as_array().unwrap().len(), 1, "{found}");
    let embedded = llm.requests.lock().unwrap().iter().filter(|b| b.get("input").is_some()).count();
    assert!(embedded >= 2, "document and query embeddings went over https ({embedded})");
    // Deliveries arrive in no fixed order (a profile.updated may come before the event's):
    // wait for the event's, not for the first one.
    let about_the_event = |b: &String| b.contains("Miso") || b.contains("event");
    let delivered = eventually(30, "the event's webhook delivery over https", || async {
        let h = hooks.lock().unwrap().clone();
        h.iter().any(about_the_event).then_some(h)
    })
    .await;
    assert!(delivered.iter().any(about_the_event), "{delivered:?}");
}

/// A job whose model endpoint has an untrusted certificate fails on its first attempt with the
/// reason, the URL and the setting to change — never retried as if the network were down.
async fn fails_permanently(pki: &Pki, ca_file: Option<&std::path::Path>, host: &str, reason: &str) {
    let (app, llm) = fake_llm_app(false, |_, _| extraction());
    let port = pki.serve(app).await;
    let tls = ca_file.map(|f| format!("tls:\n  ca_file: {}\n", f.display())).unwrap_or_default();
    let s = Server::start(&format!(
        "{tls}extraction:\n  provider: llm\n  base_url: https://{host}:{port}/v1\n  model: hosted-model\n  request_timeout_secs: 5\n  max_retries: 2\n"
    ));
    s.write(
        "conv",
        msgs(&[("user", "I adopted a cat named Miso."), ("assistant", "Nice!")]),
        json!({"message_count": 2}),
        "u1",
    )
    .await;
    let job =
        eventually(30, "the job to fail", || async { s.jobs().await.into_iter().find(|j| j["state"] == "failed") })
            .await;
    let error = job["last_error"].as_str().unwrap();
    assert!(error.contains(&format!("https://{host}:{port}/v1/chat/completions")), "names the URL: {error}");
    assert!(error.contains(reason), "names the reason {reason}: {error}");
    assert!(error.contains("tls.ca_file"), "says what to configure: {error}");
    assert_eq!(job["attempts"], 1, "a certificate problem is not retried: {job}");
    assert!(chats(&llm.requests).is_empty(), "nothing reached the model");
}

#[tokio::test]
async fn a_certificate_from_an_unknown_ca_fails_the_job_at_once_saying_why() {
    let pki = Pki::new();
    // Public and system roots only; then a private CA, but not the one that signed.
    fails_permanently(&pki, None, "localhost", "UnknownIssuer").await;
    fails_permanently(&pki, Some(&pki.other_ca_file), "localhost", "UnknownIssuer").await;
}

#[tokio::test]
async fn a_certificate_for_another_name_fails_the_job_at_once_saying_why() {
    // The right CA, but the certificate names localhost and the URL says 127.0.0.1.
    let pki = Pki::new();
    fails_permanently(&pki, Some(&pki.ca_file), "127.0.0.1", "NotValidForName").await;
}

// The CLI runs as a blocking child process: the TLS server needs a thread of its own meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reaches_an_https_server_with_ca_file_and_says_what_to_do_without() {
    let pki = Pki::new();
    let app = Router::new().route(
        "/api/memory/event/search",
        post(|| async {
            axum::Json(
                json!({"code": 0, "message": "success", "request_id": "r", "data": {"result_list": [], "count": 0}}),
            )
        }),
    );
    let port = pki.serve(app).await;
    let url = format!("https://localhost:{port}");
    let run = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["search", "--url", &url, "--user", "u1", "--json"]).args(extra).arg("cats");
        cmd.env_remove("MNEMO_CA_FILE");
        cmd.output().unwrap()
    };
    let ok = run(&["--ca-file", pki.ca_file.to_str().unwrap()]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let bad = run(&[]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("UnknownIssuer") && err.contains("--ca-file") && err.contains(&url), "{err}");
}
