//! Optional TLS on the link, for links that leave the machine (rustls, TLS 1.3 only, ring):
//! the box presents a certificate chain and its private key; the head trusts the
//! certificates of a PEM file (a CA's, or the box's own self-signed one) and checks that
//! the box's certificate names the box (its address, or the name it is told).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::{Error, Result};

/// A byte stream the link runs on: TCP, or TLS over TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub(crate) type Stream = Box<dyn Io>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::Tls(format!("certificates in {}: {e}", path.display())))?;
    match certs.is_empty() {
        true => Err(Error::Tls(format!(
            "{} holds no PEM certificate",
            path.display()
        ))),
        false => Ok(certs),
    }
}

/// The box's side: its certificate chain and key.
#[derive(Clone)]
pub struct TlsServer(TlsAcceptor);

impl TlsServer {
    /// From PEM files: `cert` holds the chain (the box's certificate first), `key` its
    /// private key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(cert: &Path, key: &Path) -> Result<TlsServer> {
        let chain = certificates(cert)?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| Error::Tls(format!("private key in {}: {e}", key.display())))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| Error::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| Error::Tls(format!("the certificate and key: {e}")))?;
        Ok(TlsServer(TlsAcceptor::from(Arc::new(config))))
    }

    pub(crate) async fn accept(&self, tcp: TcpStream) -> Result<Stream> {
        let tls = self.0.accept(tcp).await?;
        Ok(Box::new(tls))
    }
}

/// The head's side: the certificates it trusts, and the name the box's must carry.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("name", &self.name)
            .finish()
    }
}

impl TlsClient {
    /// Trusts the certificates in the PEM file `ca`; the box's certificate must name
    /// `name` (a DNS name or an IP address), or without one the address connected to.
    pub fn from_pem(ca: &Path, name: Option<&str>) -> Result<TlsClient> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in certificates(ca)? {
            roots
                .add(cert)
                .map_err(|e| Error::Tls(format!("a certificate in {}: {e}", ca.display())))?;
        }
        let name = name
            .map(|n| {
                ServerName::try_from(n.to_string())
                    .map_err(|e| Error::Tls(format!("'{n}' is not a server name: {e}")))
            })
            .transpose()?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| Error::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        })
    }

    pub(crate) async fn connect(&self, addr: SocketAddr, tcp: TcpStream) -> Result<Stream> {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()));
        let tls = self.connector.connect(name, tcp).await?;
        Ok(Box::new(tls))
    }
}
