//! TLS on the broker port, as RocketMQ's remoting server has it: `permissive` serves plain and
//! TLS clients on one port (a TLS client's first byte starts a handshake record), `enforcing`
//! closes plain clients. Python reads and checks the files (and decrypts a key that has a
//! password); the plane is given the PEM bytes.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, Error, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::TlsAcceptor;

/// The first byte of a TLS handshake record (a ClientHello starts with it).
pub const HANDSHAKE_FIRST_BYTE: u8 = 0x16;

/// Whether clients must show a certificate (`tls.server.need.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Optional,
    Require,
}

/// What the plane needs to serve TLS clients.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// Plain clients are closed (`enforcing`); else they are served beside TLS ones.
    pub enforcing: bool,
    /// The certificate chain the server presents, PEM.
    pub cert_chain_pem: Vec<u8>,
    /// Its private key (PKCS#8, PKCS#1 or SEC1), PEM, not encrypted.
    pub key_pem: Vec<u8>,
    pub client_auth: ClientAuth,
    /// The certificates client certificates are checked against, PEM (with a client auth).
    pub trust_pem: Option<Vec<u8>>,
}

/// TLS as the plane serves it.
#[derive(Clone)]
pub struct TlsServer {
    pub enforcing: bool,
    pub acceptor: TlsAcceptor,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("enforcing", &self.enforcing)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    /// The server's TLS configuration, or a sentence saying which part is unusable.
    pub fn new(settings: &TlsSettings) -> Result<TlsServer, String> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&settings.cert_chain_pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("the server certificate is not PEM: {e}"))?;
        if chain.is_empty() {
            return Err("the server certificate file holds no certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(&settings.key_pem)
            .map_err(|e| format!("the server key is not a PEM private key: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match (&settings.trust_pem, settings.client_auth) {
            (Some(trust), ClientAuth::Optional | ClientAuth::Require) => {
                let mut roots = RootCertStore::empty();
                let mut trusted = Vec::new();
                for cert in CertificateDer::pem_slice_iter(trust) {
                    let cert = cert.map_err(|e| format!("the trusted certificates: {e}"))?;
                    roots
                        .add(cert.clone())
                        .map_err(|e| format!("a trusted certificate is unusable: {e}"))?;
                    trusted.push(cert);
                }
                let algorithms = provider.signature_verification_algorithms;
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider);
                let verifier = if settings.client_auth == ClientAuth::Optional {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let chains = verifier
                    .build()
                    .map_err(|e| format!("the client certificate check: {e}"))?;
                builder.with_client_cert_verifier(Arc::new(TrustedClients {
                    chains,
                    trusted,
                    algorithms,
                }))
            }
            // Without trusted certificates nothing could be checked (Python refuses that
            // outside test mode).
            _ => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| format!("the server certificate and key do not go together: {e}"))?;
        Ok(TlsServer {
            enforcing: settings.enforcing,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// A certificate trusted as it is still has to be within its validity dates (as Java's trust
/// manager and OpenSSL require of it).
fn within_validity(cert: &CertificateDer<'_>, now: UnixTime) -> Result<(), Error> {
    use rustls::CertificateError;
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let now = now.as_secs() as i64;
    let validity = parsed.validity();
    if now < validity.not_before.timestamp() {
        return Err(Error::InvalidCertificate(CertificateError::NotValidYet));
    }
    if now > validity.not_after.timestamp() {
        return Err(Error::InvalidCertificate(CertificateError::Expired));
    }
    Ok(())
}

/// Client certificates as Java's trust manager (and OpenSSL) take them: one listed in the trust
/// file itself is trusted as it is, a self-signed one included (RocketMQ deployments commonly
/// trust each client's self-signed certificate; webpki alone refuses a CA certificate as a
/// client's); any other must chain to a trusted one.
#[derive(Debug)]
struct TrustedClients {
    chains: Arc<dyn ClientCertVerifier>,
    trusted: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for TrustedClients {
    fn offer_client_auth(&self) -> bool {
        self.chains.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.chains.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chains.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        if self
            .trusted
            .iter()
            .any(|t| t.as_ref() == end_entity.as_ref())
        {
            return within_validity(end_entity, now).map(|()| ClientCertVerified::assertion());
        }
        self.chains
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
