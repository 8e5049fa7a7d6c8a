//! The one recipe for outbound HTTP: every client mnemo builds (the `llm` extractor, the `openai`
//! embedder, webhook delivery, the CLI and the benchmarks) gets its TLS here.
//!
//! - TLS is rustls with the *ring* provider (no OpenSSL, no aws-lc build).
//! - Trusted roots: the Mozilla set (`webpki-roots`), plus the system's (`rustls-native-certs`,
//!   which honours `SSL_CERT_FILE` / `SSL_CERT_DIR`), plus `tls.ca_file` — a PEM bundle for a
//!   private CA.
//! - Proxies: `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (reqwest's own reading of
//!   the environment).
//!
//! A failure is reported with its whole cause chain ([`error_chain`]); a certificate the roots
//! do not trust is recognised ([`certificate_problem`]) so callers treat it as permanent — a
//! retry cannot fix it — and say what to do about it.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};
use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Outbound TLS settings (`tls` in the config file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// A PEM bundle of extra trusted certificates (a private CA).
    pub ca_file: Option<PathBuf>,
}

/// A client builder with mnemo's TLS: public and system roots plus `ca_file`.
pub fn client_builder(tls: &TlsOptions) -> Result<reqwest::ClientBuilder, String> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(client_config(tls)?))
}

/// The rustls configuration [`client_builder`] uses (ALPN for HTTP/1.1, which is what reqwest
/// is built with).
pub fn client_config(tls: &TlsOptions) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots(tls.ca_file.as_deref())?)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    // The system's store: unreadable or odd certificates there are skipped (as curl does), not fatal.
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(error = %e, "a system certificate could not be loaded");
    }
    store.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        let bad = |e: String| format!("tls.ca_file \"{}\": {e}", path.display());
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("holds no PEM certificate".into()));
        }
        for c in certs {
            store.add(c).map_err(|e| bad(format!("not a usable CA certificate ({e})")))?;
        }
    }
    Ok(store)
}

/// An error and every cause under it, `outer: inner: innermost` — reqwest's own message is only
/// the top line (`error sending request for url (…)`), which hides why.
pub fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let part = c.to_string();
        // Some layers repeat their cause in their own message.
        if !s.ends_with(&part) {
            s = format!("{s}: {part}");
        }
        cur = next_cause(c);
    }
    s
}

/// `source()`, except that an `io::Error` wrapping another error yields that error (its own
/// `source()` skips it; TLS failures arrive as an `io::Error` inside an `io::Error`).
fn next_cause<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)> {
    if let Some(io) = e.downcast_ref::<std::io::Error>()
        && let Some(inner) = io.get_ref()
    {
        return Some(inner);
    }
    e.source()
}

/// The certificate problem behind a request's failure, if that is what it was: the server's
/// certificate is not trusted (`UnknownIssuer`), names another host, has expired…
pub fn certificate_problem(e: &(dyn StdError + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(rustls::Error::InvalidCertificate(cert)) = c.downcast_ref::<rustls::Error>() {
            return Some(format!("{cert:?}"));
        }
        cur = next_cause(c);
    }
    None
}

/// What a failed request says in a job's `last_error` and in the log: the URL, the whole cause
/// chain and, for a certificate the roots do not trust, what to configure.
pub fn describe(url: &str, e: &reqwest::Error) -> String {
    let chain = error_chain(e);
    match certificate_problem(e) {
        Some(problem) => format!(
            "{url}: the server's TLS certificate is not trusted ({problem}); if it is signed by a private CA, \
             set tls.ca_file (env MNEMO_TLS__CA_FILE) to that CA's PEM file — {chain}"
        ),
        None => format!("{url}: {chain}"),
    }
}

/// Whether a failed request can succeed when retried: a certificate problem cannot.
pub fn is_transient(e: &reqwest::Error) -> bool {
    certificate_problem(e).is_none()
}

/// `Retry-After` as a pause: delay-seconds or an HTTP date (RFC 9110 §10.2.3), capped at `cap`.
pub fn retry_after(headers: &reqwest::header::HeaderMap, cap: std::time::Duration) -> Option<std::time::Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let pause = match v.parse::<u64>() {
        Ok(secs) => std::time::Duration::from_secs(secs),
        Err(_) => {
            let at = httpdate::parse_http_date(v).ok()?;
            at.duration_since(std::time::SystemTime::now()).unwrap_or_default()
        }
    };
    Some(pause.min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = reqwest::header::HeaderMap::new();
        let cap = Duration::from_secs(30);
        assert_eq!(retry_after(&h, cap), None);
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&h, cap), Some(Duration::from_secs(7)));
        h.insert("retry-after", "3600".parse().unwrap());
        assert_eq!(retry_after(&h, cap), Some(cap), "capped");
        let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(12));
        h.insert("retry-after", at.parse().unwrap());
        let p = retry_after(&h, cap).unwrap();
        assert!(p > Duration::from_secs(9) && p <= Duration::from_secs(12), "{p:?}");
        h.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&h, cap), Some(Duration::ZERO), "a date in the past: at once");
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h, cap), None);
    }

    #[test]
    fn a_ca_file_that_is_not_pem_is_named() {
        let dir = std::env::temp_dir().join(format!("mnemo-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("empty.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let e = client_config(&TlsOptions { ca_file: Some(f.clone()) }).unwrap_err();
        assert!(e.contains("tls.ca_file") && e.contains("empty.pem") && e.contains("no PEM certificate"), "{e}");
        let e = client_config(&TlsOptions { ca_file: Some(dir.join("missing.pem")) }).unwrap_err();
        assert!(e.contains("missing.pem"), "{e}");
        assert!(client_config(&TlsOptions::default()).is_ok());
    }
}
