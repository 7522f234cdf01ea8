//! Slow and malformed clients against a real kubegate in terminate mode: cut at their deadlines
//! and limits, or answered with clear errors, and kubegate alive after them
//! (`kubegate_e2e::attack`).
//!
//! 1. `slow_handshakes_and_heads_are_cut_and_the_connection_limit_holds` (slowloris).
//! 2. `oversized_and_invalid_requests_get_clear_errors`.

use kubegate_e2e::attack::{assert_alive, attacked, counter, is_200};
use kubegate_e2e::h2raw::{self, flag, kind, RawH2};
use kubegate_e2e::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const T: Duration = Duration::from_secs(30);
const PODS: &str = "/api/v1/namespaces/default/pods";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_handshakes_and_heads_are_cut_and_the_connection_limit_holds() {
    let s = attacked();
    let before = counter(
        &s.kg,
        "kubegate_client_limit_closes_total{reason=\"connections\"}",
    );
    // 200 connections that never start their TLS handshake, against a limit of 150.
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(tokio::net::TcpStream::connect(s.kg.listen).await.unwrap());
    }
    // Each ends: 50 or more at once (over the limit), the rest at the handshake timeout (5 s).
    let started = Instant::now();
    let mut ends = Vec::new();
    for mut c in idle {
        ends.push(tokio::spawn(async move {
            let mut b = [0u8; 1];
            let _ = tokio::time::timeout(T, c.read(&mut b)).await;
            Instant::now()
        }));
    }
    let mut at_once = 0;
    let mut last = Duration::ZERO;
    for e in ends {
        let at = e.await.unwrap().duration_since(started);
        if at < Duration::from_secs(3) {
            at_once += 1;
        }
        last = last.max(at);
    }
    let turned_away = counter(
        &s.kg,
        "kubegate_client_limit_closes_total{reason=\"connections\"}",
    ) - before;
    println!("slowloris TLS: {at_once} closed at once, {turned_away} over the limit, the last closed after {last:?}");
    assert!(
        turned_away >= 50.0,
        "{turned_away} turned away over the limit"
    );
    assert!(at_once >= 50, "{at_once} closed at once");
    assert!(
        last < Duration::from_secs(20),
        "idle handshakes held {last:?}"
    );

    // HTTP/1.1 heads that never end: cut at header_read_timeout (2 s).
    let mut tls = tls_connect(s.kg.listen, tls_client_config(&s.pki, &[b"http/1.1"]))
        .await
        .unwrap();
    tls.write_all(b"GET /api HTTP/1.1\r\nHost: kubernetes\r\nX-Slow: ")
        .await
        .unwrap();
    let t = Instant::now();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(T, tls.read_to_end(&mut rest)).await;
    println!("slowloris head: closed after {:?}", t.elapsed());
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "a slow head held {:?}",
        t.elapsed()
    );

    // Once they are gone, a client is served.
    let mut conn = Conn::open(s.kg.listen, &s.pki, true).await.unwrap();
    assert_eq!(conn.get(PODS).await.unwrap().status, 200);
    assert_alive(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_invalid_requests_get_clear_errors() {
    let s = attacked();
    let big = "a".repeat(100 * 1024);
    // HTTP/1.1: a head over terminate.max_header_list_bytes is a 431.
    let mut h1 = Conn::open(s.kg.listen, &s.pki, false).await.unwrap();
    let r = h1.send("GET", PODS, &[("X-Big", big.as_str())], None).await;
    match r {
        Ok(r) => assert_eq!(r.status, 431, "an oversized HTTP/1.1 head"),
        Err(e) => panic!("no answer to an oversized head: {e}"),
    }
    // HTTP/2: the stream is refused or answered 431; the connection goes on serving.
    let mut raw = RawH2::connect(s.kg.listen, &s.pki).await.unwrap();
    let block = h2raw::request_block(PODS, &[("x-big", big.as_bytes())]);
    let (first, rest) = block.split_at(16_000);
    raw.frame(kind::HEADERS, flag::END_STREAM, 1, first)
        .await
        .unwrap();
    let chunks: Vec<&[u8]> = rest.chunks(16_000).collect();
    for (i, c) in chunks.iter().enumerate() {
        let flags = if i + 1 == chunks.len() {
            flag::END_HEADERS
        } else {
            0
        };
        raw.frame(kind::CONTINUATION, flags, 1, c).await.unwrap();
    }
    raw.get(3, PODS).await.unwrap();
    let (mut stream1, mut stream3) = (None, None);
    let deadline = Instant::now() + T;
    while (stream1.is_none() || stream3.is_none()) && Instant::now() < deadline {
        match raw.read(T).await.unwrap() {
            Some(f)
                if f.stream == 1
                    && stream1.is_none()
                    && (f.kind == kind::HEADERS || f.kind == kind::RST_STREAM) =>
            {
                stream1 = Some(f)
            }
            Some(f) if f.stream == 3 && f.kind == kind::HEADERS => stream3 = Some(f),
            Some(f) if f.kind == kind::GOAWAY => panic!("the connection was closed: {f:?}"),
            Some(_) => {}
            None => panic!("the connection was closed"),
        }
    }
    let stream1 = stream1.expect("an answer to the oversized head");
    assert!(
        !is_200(&stream1),
        "the oversized head was served: {stream1:?}"
    );
    let stream3 = stream3.expect("the next request is served");
    assert!(
        is_200(&stream3),
        "status 200 on the same connection: {stream3:?}"
    );

    // A body over terminate.max_request_body_bytes (3 MiB) is a 413 with a Status.
    let mut h2 = Conn::open(s.kg.listen, &s.pki, true).await.unwrap();
    let body = "x".repeat(4 << 20);
    let r = h2.send("POST", CONFIGMAPS, &[], Some(&body)).await.unwrap();
    assert_eq!(r.status, 413);
    assert!(r.text().contains("RequestEntityTooLarge"), "{}", r.text());

    // Garbage: after the TLS handshake in HTTP/1.1 a 400; an invalid HTTP/2 preface closes.
    let mut tls = tls_connect(s.kg.listen, tls_client_config(&s.pki, &[b"http/1.1"]))
        .await
        .unwrap();
    tls.write_all(b"\x00\x01garbage\xff\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(T, tls.read_to_end(&mut answer)).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let mut tls = tls_connect(s.kg.listen, tls_client_config(&s.pki, &[b"h2"]))
        .await
        .unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\n\r\n garbage instead of a preface")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(T, tls.read_to_end(&mut answer)).await;
    assert!(
        closed.is_ok(),
        "an invalid preface left the connection open"
    );
    // Garbage instead of a TLS ClientHello: the handshake fails and is counted.
    let mut tcp = tokio::net::TcpStream::connect(s.kg.listen).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(T, tcp.read_to_end(&mut answer)).await;
    assert!(closed.is_ok(), "plain HTTP left the connection open");
    wait_for("the failed handshake counted", T, || {
        (counter(
            &s.kg,
            "kubegate_tls_handshake_failures_total{reason=\"error\"}",
        ) >= 1.0)
            .then_some(())
    });
    assert_alive(&s);
}
