//! The TLS side of client certificates: verify who signed a certificate at the handshake, but
//! leave its validity period to each request.
//!
//! kube-apiserver's listener requests a client certificate without verifying it
//! (k8s.io/apiserver `pkg/server/secure_serving.go`, `tlsConfig.ClientAuth =
//! tls.RequestClientCert`); the x509 authenticators verify it at every request with the
//! current time (`pkg/authentication/request/x509/x509.go`). So a certificate that expired
//! an hour ago still completes the handshake, and its requests get 401; one that expires while
//! its connection is open gets 401 from then on. rustls' verifier checks the time at the
//! handshake, so this one asks it at a moment within the certificate's own validity, and
//! [`crate::auth::PeerCert::check_time`] checks the real time per request.
//!
//! Who signed it is still checked at the handshake (a certificate no trusted CA signed ends
//! the handshake, where the apiserver would answer each request 401 instead).

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

/// Verifies client certificates as `inner` does, but at a time inside each certificate's
/// validity.
#[derive(Debug)]
pub struct TimeDeferringVerifier {
    inner: Arc<dyn ClientCertVerifier>,
}

impl TimeDeferringVerifier {
    /// Wraps `inner` (the webpki verifier of the client and front-proxy CAs).
    pub fn new(inner: Arc<dyn ClientCertVerifier>) -> TimeDeferringVerifier {
        TimeDeferringVerifier { inner }
    }
}

/// `now`, moved into `[NotBefore, NotAfter]` of `end_entity` (unchanged if unreadable).
fn within_validity(end_entity: &CertificateDer<'_>, now: UnixTime) -> UnixTime {
    let Some((not_before, not_after)) = crate::auth::validity(end_entity) else {
        return now;
    };
    let secs = |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let at = now
        .as_secs()
        .clamp(secs(not_before), secs(not_after).max(secs(not_before)));
    UnixTime::since_unix_epoch(std::time::Duration::from_secs(at))
}

impl ClientCertVerifier for TimeDeferringVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, within_validity(end_entity, now))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use crate::testserver::{answer_headers, TestServer};
    use std::sync::atomic::Ordering;
    use time::Duration;

    const LIST: &[u8] = b"GET /api/v1/namespaces/default/configmaps HTTP/1.1";

    /// The apiserver's 401 (`Unauthorized` handler, HTTP/1.1), byte for byte.
    fn unauthorized(r: &crate::testserver::Raw) {
        let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}\n";
        assert_eq!((r.status, r.text()), (401, body));
        let json = "application/json";
        assert_eq!(r.stable_headers(), answer_headers(json, body.len(), &[]));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_expired_certificate_completes_the_handshake_and_each_request_gets_401() {
        let s = TestServer::start().await;
        let old = s.client_cert("old", "bob", false, Duration::days(-2), Duration::days(-1));
        let r = s.request(Some(&old), LIST, b"").await;
        unauthorized(&r);
        let early = s.client_cert("early", "bob", false, Duration::days(1), Duration::days(2));
        unauthorized(&s.request(Some(&early), LIST, b"").await);
        // The same for a front proxy's certificate, whatever its headers say.
        let proxy = s.client_cert(
            "proxy",
            "front-proxy-client",
            true,
            Duration::days(-2),
            Duration::days(-1),
        );
        let head = [LIST, b"\r\nX-Remote-User: alice"].concat();
        unauthorized(&s.request(Some(&proxy), &head, b"").await);
        assert_eq!(
            s.sim.requests.expired_certificates.load(Ordering::Relaxed),
            3
        );
        // With a valid bearer token the request is the token's, not refused.
        let head = [LIST, b"\r\nAuthorization: Bearer tok"].concat();
        let r = s.request(Some(&old), &head, b"").await;
        assert_eq!(
            (r.status, r.header("x-kubegate-sim-user")),
            (200, Some("alice"))
        );
        assert_eq!(
            s.sim.requests.expired_certificates.load(Ordering::Relaxed),
            3
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_certificate_that_expires_on_an_open_connection_is_refused_from_then_on() {
        let s = TestServer::start().await;
        for front_proxy in [false, true] {
            let cn = if front_proxy {
                "front-proxy-client"
            } else {
                "bob"
            };
            let file = if front_proxy { "fp-short" } else { "short" };
            let short = s.client_cert(
                file,
                cn,
                front_proxy,
                Duration::hours(-1),
                Duration::seconds(2),
            );
            let head = [LIST, b"\r\nX-Remote-User: carol"].concat();
            let mut conn = s.http1(Some(&short)).await;
            let r = conn.send(&head, b"").await;
            let user = if front_proxy { "carol" } else { "bob" };
            assert_eq!(
                (r.status, r.header("x-kubegate-sim-user")),
                (200, Some(user))
            );
            // Past NotAfter (whole seconds), on the same connection.
            tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
            unauthorized(&conn.send(&head, b"").await);
        }
    }
}
