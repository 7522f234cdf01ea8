//! PROXY protocol on a listener: the client a trusted balancer names is the client.
//!
//! 1. `behind_haproxy_sending_proxy_v2_the_apiserver_and_the_access_log_see_the_client`: HAProxy
//!    (`send-proxy-v2`) in front of a terminate listener; the replica's `X-Forwarded-For` and
//!    kubegate's access log name the client's address, not HAProxy's.
//! 2. `a_header_is_refused_from_others_required_of_a_balancer_and_read_exactly`: a passthrough
//!    listener refuses a header from an untrusted peer, a trusted peer's connection without one,
//!    a malformed one and a stalled one; a trusted peer's v1 or v2 header is taken off and the
//!    client's TLS goes through untouched.

use kubegate_config::{AccessLogFormat, ProxyProtocol};
use kubegate_e2e::*;
use kubegate_wire::proxy_header;
use rustls_pki_types::ServerName;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const T: Duration = Duration::from_secs(30);

/// The balancer's address, as kubegate sees it (HAProxy connects from it).
const BALANCER: &str = "127.0.0.3";

/// The client's address (it connects from it).
const CLIENT: &str = "127.0.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A TCP connection to `to` from local address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(ip(from), 0)).unwrap();
    tokio::time::timeout(T, socket.connect(to))
        .await
        .expect("connect in time")
        .unwrap()
}

/// Whether kubegate closes `tcp` (reads end, or reset) within the deadline.
async fn closed_by_kubegate(mut tcp: TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(T, tcp.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// HAProxy in TCP mode on a free port, sending every connection to `to` from [`BALANCER`]
/// with a PROXY v2 header.
fn haproxy_sending_proxy_v2(dir: &std::path::Path, to: SocketAddr) -> (Proc, SocketAddr) {
    let listen = SocketAddr::new(ip("127.0.0.1"), free_port());
    let cfg = format!(
        "global\n    maxconn 100\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nfrontend apiserver\n    bind {listen}\n    default_backend kubegate\nbackend kubegate\n    server kg {to} send-proxy-v2 source {BALANCER}\n"
    );
    (haproxy(dir, "haproxy", &cfg, listen), listen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_sending_proxy_v2_the_apiserver_and_the_access_log_see_the_client() {
    let bed = terminating(1, &[], |cfg| {
        cfg.listeners[0].proxy_protocol =
            Some(ProxyProtocol::from(vec![BALANCER.parse().unwrap()]));
        cfg.terminate.access_log.format = AccessLogFormat::Json;
    });
    let (kg, pki) = (&bed.kg, &bed.pki);
    let (_haproxy, front) = haproxy_sending_proxy_v2(bed.dir.path(), kg.listen);

    let mut conn = Conn::open_anonymous_from(ip(CLIENT), front, pki)
        .await
        .unwrap();
    let r = conn
        .get_with_token(CONFIGMAPS, "tok-ops", "proxied/1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // The audit log's source: the client, not the balancer.
    assert_eq!(r.header("x-kubegate-sim-forwarded-for"), Some(CLIENT));
    let line = wait_for("the access log line", T, || {
        kg.access_lines("proxied/1").into_iter().next()
    });
    let client = line["client"].as_str().unwrap();
    assert!(client.starts_with(&format!("{CLIENT}:")), "{line}");

    // Straight from the balancer's address without a header: refused (required by default).
    let direct = Conn::open_anonymous_from(ip(BALANCER), kg.listen, pki).await;
    assert!(
        direct.is_err(),
        "a trusted peer's connection without a header was served"
    );
    wait_for("the refusal counted", T, || {
        (kg.refused("proxy_header_missing") == 1.0).then_some(())
    });
    // From anywhere else, no header: served as its own.
    let mut own = Conn::open_anonymous_from(ip(CLIENT), kg.listen, pki)
        .await
        .unwrap();
    let r = own
        .get_with_token(CONFIGMAPS, "tok-ops", "direct/1")
        .await
        .unwrap();
    assert_eq!(r.header("x-kubegate-sim-forwarded-for"), Some(CLIENT));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_is_refused_from_others_required_of_a_balancer_and_read_exactly() {
    let bed = Cluster::new()
        .replicas(1)
        .configure(|c| {
            let p = ProxyProtocol::from(vec![BALANCER.parse().unwrap()]);
            c.listeners[0].proxy_protocol = Some(p);
        })
        .start();
    let (kg, pki) = (&bed.kg, &bed.pki);
    let header = |from: &str| {
        let client = SocketAddr::new(ip(from), 40000);
        proxy_header::v2(client, kg.listen, &[]).unwrap()
    };

    // A header from a peer that is not a balancer: refused.
    let mut tcp = connect_from(CLIENT, kg.listen).await;
    tcp.write_all(&header("192.0.2.7")).await.unwrap();
    assert!(closed_by_kubegate(tcp).await);
    wait_for("untrusted counted", T, || {
        (kg.refused("proxy_header_untrusted") == 1.0).then_some(())
    });

    // A balancer's connection without one: refused.
    let tcp = connect_from(BALANCER, kg.listen).await;
    let config = tls_client_config(pki, &[b"http/1.1"]);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config.clone()));
    let name = ServerName::try_from("kubernetes").unwrap();
    assert!(connector.connect(name.clone(), tcp).await.is_err());
    wait_for("missing counted", T, || {
        (kg.refused("proxy_header_missing") == 1.0).then_some(())
    });

    // A malformed header (version 3), and one that stops halfway: refused, the second once
    // `timeout` (5 s) passed.
    let mut bad = header("192.0.2.7");
    bad[12] = 0x31;
    let mut tcp = connect_from(BALANCER, kg.listen).await;
    tcp.write_all(&bad).await.unwrap();
    assert!(closed_by_kubegate(tcp).await);
    let mut tcp = connect_from(BALANCER, kg.listen).await;
    tcp.write_all(&header("192.0.2.7")[..20]).await.unwrap();
    assert!(closed_by_kubegate(tcp).await);
    wait_for("malformed and stalled counted", T, || {
        (kg.refused("proxy_header") == 2.0).then_some(())
    });

    // A balancer's v2 and v1 headers: taken off, the client's TLS goes through to the replica.
    let v1 = proxy_header::v1(SocketAddr::new(ip("192.0.2.8"), 40001), kg.listen);
    for sent in [header("192.0.2.7"), v1.into_bytes()] {
        let mut tcp = connect_from(BALANCER, kg.listen).await;
        tcp.write_all(&sent).await.unwrap();
        let tls = tokio::time::timeout(T, connector.connect(name.clone(), tcp))
            .await
            .expect("handshake in time")
            .expect("the replica's handshake through a PROXY header");
        let mut conn = Conn::over(tls, false).await.unwrap();
        assert_eq!(conn.get("/version").await.unwrap().status, 200);
    }
    // A peer that is not a balancer, without a header: served; with a scanner's bytes that
    // begin like a header but are none, passed on (no header refusal counted).
    let mut conn = Conn::open_anonymous_from(ip(CLIENT), kg.listen, pki)
        .await
        .unwrap();
    assert_eq!(conn.get("/version").await.unwrap().status, 200);
    let mut scanner = connect_from(CLIENT, kg.listen).await;
    scanner.write_all(b"\r\n\r\n").await.unwrap();
    scanner.shutdown().await.unwrap();
    // The replica behind answers with a TLS alert and closes.
    let mut answer = Vec::new();
    let ended = tokio::time::timeout(T, scanner.read_to_end(&mut answer)).await;
    assert!(ended.is_ok(), "the connection ended");
    assert_eq!(kg.refused("proxy_header_untrusted"), 1.0);
}
