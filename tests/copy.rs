//! The passthrough copy path, byte for byte: kubegate in front of a plain TCP backend (its
//! readiness is probed on a simulated apiserver through `health_address`).
//!
//! 1. `transfers_are_byte_exact_both_ways`: 0 B to 5 MiB, echoed back.
//! 2. `half_close_still_gets_the_response`
//! 3. `a_reset_is_passed_on_as_a_reset`: backend reset → client reset, client reset → backend.
//! 4. `bytes_are_counted_per_direction`
//! 5. `a_connect_that_hangs_times_out_and_the_next_backend_is_used`

use kubegate_e2e::*;
use std::io;

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A plain TCP backend behind kubegate; returns kubegate and the backend's listener.
async fn gateway_to(listener: &TcpListener, pki: &Pki, sim: &Sim) -> Kubegate {
    let addr = listener.local_addr().unwrap();
    let mut cfg = KubegateConfig::new(&[]);
    cfg.set_backends(&[("plain", addr)]);
    cfg.backends[0].health_address = Some(sim.addr);
    let kg = Kubegate::start(pki, &cfg);
    kg.wait_state("plain", "ready", Duration::from_secs(30));
    kg
}

/// kubegate relaying to a plain TCP backend; dropped in field order.
struct Relay {
    kg: Kubegate,
    backend: TcpListener,
    _probed: Sim,
    _dir: tempfile::TempDir,
}

/// A [`Relay`], its backend's readiness probed on a simulated apiserver.
async fn relay() -> Relay {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sim = Sim::start(&pki, "probe", SimOptions::default());
    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kg = gateway_to(&backend, &pki, &sim).await;
    Relay {
        kg,
        backend,
        _probed: sim,
        _dir: dir,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn echo_once(listener: &TcpListener) -> io::Result<()> {
    let (mut s, _) = listener.accept().await?;
    let (mut r, mut w) = s.split();
    tokio::io::copy(&mut r, &mut w).await?;
    w.shutdown().await
}

/// Sends `data` through kubegate to an echo on `backend` (sending and receiving at once, so
/// that large transfers do not stall on full buffers) and returns what came back; panics when
/// that takes longer than `limit`.
async fn echo_through(
    listen: std::net::SocketAddr,
    backend: &TcpListener,
    data: &[u8],
    limit: Duration,
) -> Vec<u8> {
    let echo = async { echo_once(backend).await.unwrap() };
    let client = async {
        let mut c = TcpStream::connect(listen).await.unwrap();
        let (mut r, mut w) = c.split();
        let send = async {
            w.write_all(data).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut back = Vec::new();
        let recv = async { r.read_to_end(&mut back).await.unwrap() };
        tokio::join!(send, recv);
        back
    };
    tokio::time::timeout(limit, async { tokio::join!(echo, client).1 })
        .await
        .expect("transfer finished")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_are_byte_exact_both_ways() {
    let Relay { kg, backend, .. } = &relay().await;
    for (i, size) in [0usize, 1, 1000, 65_536, 1 << 20, 5 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(size, i as u8);
        let back = echo_through(kg.listen, backend, &data, Duration::from_secs(30)).await;
        assert_eq!(back.len(), size, "size {size}");
        assert!(back == data, "size {size}: bytes differ");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_still_gets_the_response() {
    let Relay { kg, backend, .. } = &relay().await;
    let server = async {
        let (mut s, _) = backend.accept().await.unwrap();
        let mut request = Vec::new();
        // Answers only after the client's EOF arrived.
        s.read_to_end(&mut request).await.unwrap();
        s.write_all(format!("got {} bytes", request.len()).as_bytes())
            .await
            .unwrap();
        s.shutdown().await.unwrap();
    };
    let client = async {
        let mut c = TcpStream::connect(kg.listen).await.unwrap();
        c.write_all(b"request body").await.unwrap();
        c.shutdown().await.unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, "got 12 bytes");
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(server, client)
    })
    .await
    .expect("exchange finished");
}

fn reset(s: TcpStream) {
    let std = s.into_std().unwrap();
    socket2::SockRef::from(&std)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(std);
}

/// `who`'s next read (within 5 s) is a reset, not a clean end.
async fn reads_a_reset(socket: &mut TcpStream, who: &str) {
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buf))
        .await
        .unwrap();
    assert_eq!(
        r.as_ref().map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::ConnectionReset),
        "{who} saw {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_is_passed_on_as_a_reset() {
    let Relay { kg, backend, .. } = &relay().await;

    // The backend resets: the client reads a reset, not a clean end.
    let mut c = TcpStream::connect(kg.listen).await.unwrap();
    c.write_all(b"x").await.unwrap();
    let (mut s, _) = backend.accept().await.unwrap();
    let mut one = [0u8; 1];
    s.read_exact(&mut one).await.unwrap();
    reset(s);
    reads_a_reset(&mut c, "client").await;

    // The client resets: the backend reads a reset.
    let mut c = TcpStream::connect(kg.listen).await.unwrap();
    c.write_all(b"y").await.unwrap();
    let (mut s, _) = backend.accept().await.unwrap();
    s.read_exact(&mut one).await.unwrap();
    reset(c);
    reads_a_reset(&mut s, "backend").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_are_counted_per_direction() {
    let Relay { kg, backend, .. } = &relay().await;
    let (up, down) = (300_001usize, 1_234_567usize);
    let server = async {
        let (mut s, _) = backend.accept().await.unwrap();
        let mut got = vec![0u8; up];
        s.read_exact(&mut got).await.unwrap();
        s.write_all(&pattern(down, 7)).await.unwrap();
        s.shutdown().await.unwrap();
    };
    let client = async {
        let mut c = TcpStream::connect(kg.listen).await.unwrap();
        c.write_all(&pattern(up, 3)).await.unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).await.unwrap();
        assert_eq!(back.len(), down);
    };
    tokio::join!(server, client);
    let series =
        |d: &str| format!("kubegate_backend_bytes_total{{backend=\"plain\",direction=\"{d}\"}}");
    wait_for("byte counters to settle", Duration::from_secs(30), || {
        (kg.metric(&series("to_backend")) == up as f64
            && kg.metric(&series("to_client")) == down as f64)
            .then_some(())
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_hangs_times_out_and_the_next_backend_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sim = Sim::start(&pki, "probe", SimOptions::default());
    // A listener that never accepts, with a full accept queue: the kernel drops further SYNs, so
    // a connect to it hangs (as to a partitioned host) instead of being refused.
    let stuck = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    stuck
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    stuck.listen(0).unwrap();
    let stuck_addr = stuck.local_addr().unwrap().as_socket().unwrap();
    // With backlog 0 the queue holds one connection.
    let filler = std::net::TcpStream::connect(stuck_addr).unwrap();
    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut cfg = KubegateConfig::new(&[]);
    cfg.set_backends(&[
        ("stuck", stuck_addr),
        ("plain", backend.local_addr().unwrap()),
    ]);
    for b in &mut cfg.backends {
        b.health_address = Some(sim.addr);
    }
    cfg.balance = kubegate_config::BalancePolicy::RoundRobin;
    cfg.connect.timeout = ms(300);
    let kg = Kubegate::start(&pki, &cfg);
    kg.wait_state("stuck", "ready", Duration::from_secs(30));
    kg.wait_state("plain", "ready", Duration::from_secs(30));
    // Round robin sends one of the first two connections to the stuck backend first.
    for i in 0..2u8 {
        let back = echo_through(
            kg.listen,
            &backend,
            &pattern(100, i),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            back,
            pattern(100, i),
            "connection {i} was carried by the other backend"
        );
    }
    // Whether the second connection also tries the stuck backend depends on whether a probe
    // (which passes: its health address is a simulator) cleared the passive ejection in between.
    let timeouts =
        kg.metric(r#"kubegate_backend_connect_errors_total{backend="stuck",reason="timeout"}"#);
    assert!(timeouts >= 1.0, "no connect timed out");
    assert_eq!(
        kg.metric("kubegate_connect_retries_total"),
        timeouts,
        "every timed-out connect was retried on the other backend"
    );
    drop(filler);
}
