//! TLS to the database, with libpq's `sslmode` and `sslrootcert` in the URL (or key=value
//! string), over rustls (the `ring` provider; no OpenSSL).
//!
//! | `sslmode` | encrypted | certificate checked |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default) | when the server offers it | no |
//! | `require` | always | no — unless `sslrootcert` is given, then as `verify-ca` (libpq's rule) |
//! | `verify-ca` | always | chain to a trusted root |
//! | `verify-full` | always | chain, and the certificate names the host |
//!
//! Trusted roots: the PEM file `sslrootcert` names (one or more certificates), or with
//! `sslrootcert=system` or none given, the Mozilla root set (`webpki-roots`: what managed
//! databases with public certificates need). Client certificates (`sslcert`, `sslkey`) are not
//! supported and say so. `tokio-postgres` knows neither the two verifying modes nor
//! `sslrootcert`, so both are taken out of the connection string here and applied to the
//! connector; the host name checked is the `host` (with `hostaddr` the address connected to).

use mnemo_core::StoreError;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

pub(crate) type Connector = MakeRustlsConnect;

const MODES: &str = "disable, allow, prefer, require, verify-ca, verify-full";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    Nothing,
    Chain,
    ChainAndName,
}

/// A connection string with the TLS settings taken out: what `tokio-postgres` parses, and how to
/// connect.
pub(crate) fn configure(url: &str) -> Result<(tokio_postgres::Config, Connector), StoreError> {
    let (rest, sslmode, rootcert) = split(url)?;
    let mut config: tokio_postgres::Config =
        rest.parse().map_err(|e| StoreError::backend(format!("store.url: not a PostgreSQL URL ({e})")))?;
    let mode = sslmode.as_deref().unwrap_or("prefer");
    let (ssl, verify) = match mode {
        "disable" => (SslMode::Disable, Verify::Nothing),
        "allow" | "prefer" => (SslMode::Prefer, Verify::Nothing),
        "require" if rootcert.is_some() => (SslMode::Require, Verify::Chain),
        "require" => (SslMode::Require, Verify::Nothing),
        "verify-ca" => (SslMode::Require, Verify::Chain),
        "verify-full" => (SslMode::Require, Verify::ChainAndName),
        other => {
            return Err(StoreError::backend(format!("store.url: sslmode \"{other}\" must be one of {MODES}")));
        }
    };
    config.ssl_mode(ssl);
    Ok((config, connector(verify, rootcert.as_deref())?))
}

/// Splits `sslmode`, `sslrootcert` (and the unsupported client-certificate keys) out of a URL's
/// query or a key=value string.
fn split(url: &str) -> Result<(String, Option<String>, Option<String>), StoreError> {
    let (mut mode, mut root) = (None, None);
    let mut take = |key: &str, value: String| -> Result<bool, StoreError> {
        match key {
            "sslmode" => mode = Some(value),
            "sslrootcert" => root = Some(value),
            "sslcert" | "sslkey" | "sslpassword" => {
                return Err(StoreError::backend(format!(
                    "store.url: {key} (client certificates) is not supported; use a password"
                )));
            }
            _ => return Ok(false),
        }
        Ok(true)
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else { return Ok((url.to_string(), None, None)) };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(k, percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned())? {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
        return Ok((rest, mode, root));
    }
    // key=value form: the two keys' values may not be quoted or hold spaces.
    let mut kept = Vec::new();
    for word in url.split_whitespace() {
        let (k, v) = word.split_once('=').unwrap_or((word, ""));
        if !take(k.trim(), v.trim_matches('\'').to_string())? {
            kept.push(word);
        }
    }
    Ok((kept.join(" "), mode, root))
}

fn roots(rootcert: Option<&str>) -> Result<RootCertStore, StoreError> {
    let mut store = RootCertStore::empty();
    match rootcert {
        None | Some("system") => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let bad = |e: String| StoreError::backend(format!("store.url: sslrootcert \"{path}\": {e}"));
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("holds no PEM certificate".into()));
            }
            for c in certs {
                store.add(c).map_err(|e| bad(e.to_string()))?;
            }
        }
    }
    Ok(store)
}

fn connector(verify: Verify, rootcert: Option<&str>) -> Result<Connector, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::backend(format!("TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Nothing => Arc::new(Unverified(provider)),
        Verify::Chain | Verify::ChainAndName => {
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(rootcert)?), provider)
                .build()
                .map_err(|e| StoreError::backend(format!("TLS: {e}")))?;
            if verify == Verify::Chain { Arc::new(ChainOnly(webpki)) } else { webpki }
        }
    };
    let config = builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// `require` / `prefer` without roots (libpq's meaning): encrypted, the certificate not checked —
/// the handshake's signatures still are.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name is not checked. rustls checks
/// the name last, after the chain, so a name error means the chain held.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_keys_are_taken_out_of_both_forms() {
        let (rest, mode, root) =
            split("postgres://u:p@db:5432/x?application_name=a&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.crt")
                .unwrap();
        assert_eq!(rest, "postgres://u:p@db:5432/x?application_name=a");
        assert_eq!((mode.as_deref(), root.as_deref()), (Some("verify-full"), Some("/tmp/ca.crt")));
        let (rest, mode, root) = split("postgres://db/x?sslmode=require").unwrap();
        assert_eq!((rest.as_str(), mode.as_deref(), root), ("postgres://db/x", Some("require"), None));
        let (rest, mode, root) = split("host=db dbname=x sslmode=verify-ca sslrootcert='/etc/ca.pem'").unwrap();
        assert_eq!(rest, "host=db dbname=x");
        assert_eq!((mode.as_deref(), root.as_deref()), (Some("verify-ca"), Some("/etc/ca.pem")));
        assert_eq!(split("postgres://db/x").unwrap(), ("postgres://db/x".to_string(), None, None));
    }

    fn error(url: &str) -> String {
        configure(url).err().expect("refused").to_string()
    }

    #[test]
    fn bad_tls_settings_are_named() {
        let e = error("postgres://db/x?sslmode=strict");
        assert!(
            e.contains("sslmode \"strict\" must be one of disable, allow, prefer, require, verify-ca, verify-full"),
            "{e}"
        );
        let e = error("postgres://db/x?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt");
        assert!(e.contains("sslrootcert \"/nonexistent/ca.crt\""), "{e}");
        let e = error("postgres://db/x?sslcert=/c.pem");
        assert!(e.contains("sslcert (client certificates) is not supported"), "{e}");
        let (config, _) = configure("postgres://db/x?sslmode=verify-full").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        let (config, _) = configure("postgres://db/x").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Prefer);
    }
}
