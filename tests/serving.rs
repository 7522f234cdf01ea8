//! kubegate's own server side in terminate mode: its clients drained with GOAWAY when it stops,
//! its serving certificates checked and followed.
//!
//! 1. `kubegate_drains_its_clients_with_goaway_on_sigterm`.
//! 2. `check_names_unusable_certificates_with_their_position`.
//! 3. `a_new_serving_certificate_is_used_for_new_connections`.

use kubegate_e2e::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubegate_drains_its_clients_with_goaway_on_sigterm() {
    let mut bed = terminating(2, &[], |cfg| {
        cfg.shutdown.delay = secs(2);
        cfg.shutdown.grace = secs(20);
    });
    let (kg, pki, sims) = (&mut bed.kg, &bed.pki, &bed.sims);
    let mut idle = kg.connect(pki, true).await.unwrap();
    assert_eq!(idle.get("/version").await.unwrap().status, 200);
    let mut busy = kg.connect(pki, true).await.unwrap();
    // Answered after 8 s, while the GOAWAY comes at 2 s; the client waits well beyond the 8 s,
    // so a loaded machine's delays do not end the request first.
    busy.set_request_timeout(T);
    for s in sims.iter() {
        s.set_latency_ms(8_000);
    }
    let slow = tokio::spawn(async move {
        let r = busy.get(CONFIGMAPS).await;
        (r, busy)
    });
    wait_for("a request in flight", T, || {
        let total: f64 = ["replica-1", "replica-2"]
            .iter()
            .map(|b| {
                kg.metric(&format!(
                    "kubegate_backend_requests_in_flight{{backend=\"{b}\"}}"
                ))
            })
            .sum();
        (total == 1.0).then_some(())
    });
    kg.proc.signal(libc::SIGTERM);
    // After the delay the idle HTTP/2 client gets GOAWAY and its connection ends, while the
    // other request is still in flight (not merely when the process exits)...
    wait_for("the idle client's connection to end", T, || {
        idle.is_closed().then_some(())
    });
    assert!(
        !slow.is_finished(),
        "the idle connection ended only with the process"
    );
    // ...while the request in flight completes.
    let (r, busy) = slow.await.unwrap();
    assert_eq!(r.expect("the in-flight request completes").status, 200);
    wait_for("the busy client's connection to end", T, || {
        busy.is_closed().then_some(())
    });
    let status = kg.proc.wait_exit(T);
    assert!(status.success(), "{status:?}");
}

#[test]
fn check_names_unusable_certificates_with_their_position() {
    // The listener's key is another certificate's; the front-proxy key is a certificate.
    let text = |pki: &Pki| {
        let fp = pki.front_proxy();
        let (crt, _) = pki.serving("kubegate");
        let (_, other_key) = pki.serving("other");
        let backends = "  - address: 127.0.0.1:7001\n";
        terminate_yaml(pki, (&crt, &other_key), (&fp.cert, &fp.cert), backends, "")
    };
    assert_check_refuses(
        text,
        &[
            ("6:17", "does not belong to"),
            ("10:15", "no usable private key"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_serving_certificate_is_used_for_new_connections() {
    let bed = terminating(1, &[], |_| {});
    let (kg, pki) = (&bed.kg, &bed.pki);
    let tls = bed.config.listeners[0].tls.clone().unwrap();
    let (crt, key) = (tls.cert_file, tls.key_file);
    let mut before = kg.connect(pki, true).await.unwrap();
    let first = before.peer().to_vec();
    // Rotate: a new pair written in place (key first, as a careless rotation would: a
    // mismatched pair for a moment is refused and the running certificate stays).
    let (new_crt, new_key) = pki.serving("kubegate-rotated");
    std::fs::copy(&new_key, &key).unwrap();
    std::fs::copy(&new_crt, &crt).unwrap();
    let rotated = std::fs::read(&new_crt).unwrap();
    let rotated_der = rustls_pki_types::pem::PemObject::from_pem_slice(&rotated)
        .map(|c: rustls_pki_types::CertificateDer<'static>| c.to_vec())
        .unwrap();
    wait_for("a connection with the rotated certificate", T, || {
        let rt = tokio::runtime::Handle::current();
        let conn = tokio::task::block_in_place(|| rt.block_on(kg.connect(pki, true))).ok()?;
        (conn.peer() == rotated_der.as_slice()).then_some(())
    });
    assert_ne!(first, rotated_der);
    // The connection made before keeps working.
    assert_eq!(before.get("/version").await.unwrap().status, 200);
    assert!(kg.metric(r#"kubegate_certificate_reloads_total{result="success"}"#) >= 1.0);
    let failing = format!(
        "kubegate_certificate_reload_failing{{file=\"{}\"}}",
        crt.display()
    );
    assert_eq!(
        kg.metric(&failing),
        0.0,
        "the last load of the file succeeded"
    );

    // A key that does not match: refused, and the file's series says so until fixed.
    let (_, other_key) = pki.serving("kubegate-other");
    std::fs::copy(&other_key, &key).unwrap();
    wait_for("the failing load reported for the file", T, || {
        (kg.metric(&failing) == 1.0).then_some(())
    });
    std::fs::copy(&new_key, &key).unwrap();
    wait_for("the fixed pair loaded", T, || {
        (kg.metric(&failing) == 0.0).then_some(())
    });
}
