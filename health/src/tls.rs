//! The rustls client configuration for probes, built from `health.tls`.

use crate::outcome::TlsProblem;
use kubegate_net::tls::{load_certs, load_key, load_roots, TlsPolicy};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct};
use std::sync::Arc;

/// Builds the client config. Errors name the file and what is wrong with it.
pub fn client_config(tls: &kubegate_config::HealthTls) -> Result<ClientConfig, String> {
    let policy = TlsPolicy::new(tls.min_version, &tls.cipher_suites)?;
    let provider = policy.provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(policy.versions())
        .map_err(|e| e.to_string())?;
    let builder = if tls.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
    } else {
        let ca_file = tls
            .ca_file
            .as_deref()
            .ok_or("health.tls.ca_file is not set")?;
        builder.with_root_certificates(load_roots(ca_file)?)
    };
    let mut config = match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(cert), Some(key)) => {
            let chain = load_certs(cert)?;
            let key = load_key(key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{}: {e}", cert.display()))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Names a handshake failure. Certificate problems keep their specific cause.
pub fn classify(err: &rustls::Error) -> TlsProblem {
    use CertificateError as C;
    match err {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer | C::BadSignature => TlsProblem::UnknownCa,
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsProblem::NameMismatch,
            C::Expired | C::ExpiredContext { .. } => TlsProblem::Expired,
            C::NotValidYet | C::NotValidYetContext { .. } => TlsProblem::NotYetValid,
            _ => TlsProblem::Handshake,
        },
        rustls::Error::NoCertificatesPresented => TlsProblem::ClientAuth,
        rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired
            | rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::UnknownCA
            | rustls::AlertDescription::CertificateUnknown,
        ) => TlsProblem::ClientAuth,
        _ => TlsProblem::Handshake,
    }
}

/// `insecure_skip_verify: true`: any certificate is accepted, signatures are still checked so
/// the handshake itself stays sound.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
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
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
