//! A throwaway private CA for the HTTPS tests, and a test server that speaks TLS with a
//! certificate it signed: what a hosted model behind a corporate CA, or a TLS-terminated vLLM,
//! looks like to mnemo.

use axum::Router;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Two CAs: `ca_file` signed the server certificate (for the name `localhost` only), `other_ca_file`
/// signed nothing.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub ca_file: PathBuf,
    pub other_ca_file: PathBuf,
    server: Arc<ServerConfig>,
}

fn ca(name: &str) -> (CertificateParams, KeyPair, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    (params, key, pem)
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let (ca_params, ca_key, ca_pem) = ca("mnemo test CA");
        let (_, _, other_pem) = ca("mnemo other test CA");
        let issuer = Issuer::new(ca_params, ca_key);
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "localhost");
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let ca_file = dir.path().join("ca.pem");
        let other_ca_file = dir.path().join("other-ca.pem");
        std::fs::write(&ca_file, ca_pem).unwrap();
        std::fs::write(&other_ca_file, other_pem).unwrap();
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Pki { _dir: dir, ca_file, other_ca_file, server: Arc::new(server) }
    }

    /// Serves `app` over TLS on a loopback port; returns the port. Reach it as
    /// `https://localhost:PORT` (the certificate's name) or `https://127.0.0.1:PORT` (a name it
    /// does not carry).
    pub async fn serve(&self, app: Router) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tls = TlsListener { inner: listener, acceptor: TlsAcceptor::from(self.server.clone()) };
        tokio::spawn(async move { axum::serve(tls, app).await.unwrap() });
        port
    }
}

/// Accepts TCP connections and completes their TLS handshake; a failed handshake (a client that
/// does not trust the certificate) drops that connection and the listener goes on.
struct TlsListener {
    inner: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.inner.accept().await else { continue };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
