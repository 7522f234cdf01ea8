//! Loopback ports: a free one, waiting until something listens, one plain HTTP/1.1 exchange
//! (a fault port, an admin endpoint, etcd's `/health`).

use crate::wait::wait_until;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Ports handed out lie below Linux's ephemeral range (32768–60999 by default): a port the
/// kernel picks for `bind(0)` is one it may give the next outgoing connection, which then holds
/// it when the process meant to listen there starts (a replica that never listened, in a test
/// under heavy traffic). Each process starts at its own place in the range and walks it.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PORTS.end - PORTS.start);
    let start = {
        let seed = std::process::id().wrapping_mul(2_654_435_761)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
        seed % span
    };
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::AcqRel, Ordering::Acquire);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::AcqRel) % span;
        let port = PORTS.start + offset as u16;
        if TcpListener::bind((loopback(), port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind((loopback(), 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The loopback address the test bed listens on: `127.0.0.1`, or `::1` when
/// `KUBEGATE_LOOPBACK=::1` (the demo and load tests over IPv6).
pub fn loopback() -> IpAddr {
    match std::env::var("KUBEGATE_LOOPBACK").as_deref() {
        Ok("::1") => IpAddr::V6(Ipv6Addr::LOCALHOST),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

/// The test bed's loopback address with a port that was free a moment ago.
pub fn free_addr() -> SocketAddr {
    SocketAddr::new(loopback(), free_port())
}

/// Waits until something accepts TCP on `addr`.
pub fn wait_listening(addr: SocketAddr, limit: Duration) -> anyhow::Result<()> {
    wait_until(&format!("something to listen on {addr}"), limit, || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()
    })?;
    Ok(())
}

/// One plain HTTP/1.1 exchange, returning the raw response: empty when the server closed the
/// connection without one (a TLS endpoint may close before the request is even written), or
/// when nothing listens.
pub fn plain_http(addr: impl ToSocketAddrs, method: &str, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    exchange(&mut s, &format!("{method} {path}"), "", "")
}

/// One `POST path` with a JSON `body` (etcd's JSON gateway), as [`plain_http`].
pub fn plain_post_json(addr: impl ToSocketAddrs, path: &str, body: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let json = "Content-Type: application/json\r\n";
    exchange(&mut s, &format!("POST {path}"), json, body)
}

/// One `POST path` with `headers` (each line ending `\r\n`) and `body`, waiting up to 30 s
/// for the answer (a call that does something, as the admin endpoint's `/shed`), as
/// [`plain_http`].
pub fn plain_post(addr: impl ToSocketAddrs, path: &str, headers: &str, body: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    exchange(&mut s, &format!("POST {path}"), headers, body)
}

/// Writes `request_line` with `headers` and `body`, and reads the answer until the server
/// closes (or the socket's read timeout, 5 s unless set).
fn exchange(s: &mut TcpStream, request_line: &str, headers: &str, body: &str) -> String {
    if s.read_timeout().ok().flatten().is_none() {
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    }
    let request = format!(
        "{request_line} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}
