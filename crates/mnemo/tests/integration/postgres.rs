//! PostgreSQL in production: the server over TLS to the database (`sslmode=verify-full` with the
//! test cluster's CA, `scripts/setup-postgres`), and a bad TLS setting stopping the start with
//! its name. Runs when the suite runs on PostgreSQL.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn the_server_talks_to_postgres_over_verified_tls() {
    let (Some(url), Ok(dir)) = (postgres_url(), std::env::var("MNEMO_TEST_PG_TLS_DIR")) else {
        eprintln!(
            "the_server_talks_to_postgres_over_verified_tls: SKIPPED (needs MNEMO_TEST_STORE=postgres and MNEMO_TEST_PG_TLS_DIR)"
        );
        return;
    };
    // The certificate names db.mnemo.test; the connection goes to 127.0.0.1 through hostaddr.
    let tls = format!(
        "{}?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={dir}/ca.crt",
        url.replace("@127.0.0.1:", "@db.mnemo.test:")
    );
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, data, log) = (tmp.path().join("m.yaml"), tmp.path().join("data"), tmp.path().join("log"));
    std::fs::write(&cfg, "").unwrap();
    let env = [("MNEMO_STORE__URL", tls.as_str())];
    let mut s = Server::spawn_with_log(&cfg, &data, "127.0.0.1:0", &env, Some(&log)).expect("starts over TLS");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("PostgreSQL: connected over TLS") && logged.contains("TLSv1."), "{logged}");

    let id = s
        .ok(
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u",
                   "memory_info": {"summary": "the user renewed the database certificate"}}),
        )
        .await["event_id"]
        .clone();
    let found = s
        .ok(
            "event/search",
            json!({"collection_name": "c", "query": "database certificate", "filter": {"user_id": "u"}}),
        )
        .await;
    assert_eq!(found["result_list"][0]["event_id"], id, "{found}");

    // A certificate from another CA is refused: the server does not start, and says why.
    s.kill9();
    let other = tls.replace("/ca.crt", "/other-ca.crt");
    let err =
        Server::spawn(&cfg, &data, "127.0.0.1:0", &[("MNEMO_STORE__URL", other.as_str())]).err().expect("refused");
    assert!(err.contains("cannot connect to PostgreSQL") && err.contains("UnknownIssuer"), "{err}");
    let bad = tls.replace("sslmode=verify-full", "sslmode=verify");
    let err = Server::spawn(&cfg, &data, "127.0.0.1:0", &[("MNEMO_STORE__URL", bad.as_str())]).err().expect("refused");
    assert!(
        err.contains("sslmode \"verify\" must be one of disable, allow, prefer, require, verify-ca, verify-full"),
        "{err}"
    );
}
