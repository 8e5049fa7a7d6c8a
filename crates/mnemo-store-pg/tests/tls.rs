//! TLS to PostgreSQL against the local test cluster, which `scripts/setup-postgres` starts with
//! a certificate for `db.mnemo.test` signed by a throwaway CA (`MNEMO_TEST_PG_TLS_DIR`). Every
//! `sslmode` is tried for what it promises: encrypted or not, and which certificates it refuses.

use mnemo_store_pg::{PgOptions, PgStore};

/// The test database's URL with the host swapped for the certificate's name (the connection
/// still goes to 127.0.0.1 through `hostaddr`) and the given query appended.
fn url(host: &str, query: &str) -> Option<String> {
    let base = std::env::var("MNEMO_TEST_DATABASE_URL").ok()?;
    let base = base.replace("@127.0.0.1:", &format!("@{host}:"));
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{sep}hostaddr=127.0.0.1&{query}"))
}

async fn secured(s: &PgStore) -> Option<String> {
    s.connection_security().await.unwrap()
}

async fn connect(url: String) -> Result<PgStore, String> {
    PgStore::connect(PgOptions { pool: 2, schema: Some("tls_test".into()), ..PgOptions::new(url) })
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn every_sslmode_does_what_it_says() {
    let (Some(plain), Ok(dir)) = (url("127.0.0.1", "sslmode=disable"), std::env::var("MNEMO_TEST_PG_TLS_DIR")) else {
        eprintln!(
            "TLS on postgres: SKIPPED (eval \"$(./scripts/setup-postgres)\" sets MNEMO_TEST_DATABASE_URL and MNEMO_TEST_PG_TLS_DIR)"
        );
        return;
    };
    let ca = format!("{dir}/ca.crt");
    let other = format!("{dir}/other-ca.crt");

    // Encrypted and verified: the certificate chains to the CA and names the host.
    let full = connect(url("db.mnemo.test", &format!("sslmode=verify-full&sslrootcert={ca}")).unwrap()).await.unwrap();
    let v = secured(&full).await.expect("verify-full is encrypted");
    assert!(v.starts_with("TLSv1."), "{v}");
    // The pool's other connections are encrypted too: one store, several round trips.
    for _ in 0..4 {
        assert!(secured(&full).await.is_some());
    }

    // verify-full refuses a certificate for another name, and one from another CA.
    let e = connect(url("127.0.0.1", &format!("sslmode=verify-full&sslrootcert={ca}")).unwrap()).await.err().unwrap();
    assert!(
        e.contains("cannot connect to PostgreSQL") && e.contains("certificate not valid for name \"127.0.0.1\""),
        "{e}"
    );
    let e = connect(url("db.mnemo.test", &format!("sslmode=verify-full&sslrootcert={other}")).unwrap())
        .await
        .err()
        .unwrap();
    assert!(e.contains("UnknownIssuer"), "{e}");
    // Without sslrootcert the public roots are used: a private CA is not among them.
    let e = connect(url("db.mnemo.test", "sslmode=verify-full").unwrap()).await.err().unwrap();
    assert!(e.contains("UnknownIssuer"), "{e}");

    // verify-ca: the chain, not the name.
    let ca_only = connect(url("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={ca}")).unwrap()).await.unwrap();
    assert!(secured(&ca_only).await.is_some());
    let e = connect(url("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={other}")).unwrap()).await.err().unwrap();
    assert!(e.contains("UnknownIssuer"), "{e}");

    // require: encrypted, not verified — unless a root is given (libpq's rule: then as verify-ca).
    let req = connect(url("127.0.0.1", "sslmode=require").unwrap()).await.unwrap();
    assert!(secured(&req).await.is_some());
    let e = connect(url("127.0.0.1", &format!("sslmode=require&sslrootcert={other}")).unwrap()).await.err().unwrap();
    assert!(e.contains("UnknownIssuer"), "{e}");

    // prefer (the default) takes TLS when offered; disable never does.
    let pref = connect(url("127.0.0.1", "application_name=mnemo-tls-test").unwrap()).await.unwrap();
    assert!(secured(&pref).await.is_some(), "prefer uses TLS when the server offers it");
    let off = connect(plain).await.unwrap();
    assert_eq!(secured(&off).await, None);

    // The key=value form carries the same settings.
    let kv = std::env::var("MNEMO_TEST_DATABASE_URL").unwrap();
    let rest = kv.trim_start_matches("postgres://postgres@127.0.0.1:");
    let (port, db) = rest.split_once('/').unwrap();
    let kv = format!(
        "host=db.mnemo.test hostaddr=127.0.0.1 port={port} user=postgres dbname={db} sslmode=verify-full sslrootcert={ca}"
    );
    assert!(secured(&connect(kv).await.unwrap()).await.is_some());
}
