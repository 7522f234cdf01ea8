//! Who a connection's client is: its peer, or — on a listener with `proxy_protocol`, from one of
//! the balancers it trusts — the client the balancer's PROXY header names. That address is the
//! client everywhere kubegate uses one (terminate mode's `X-Forwarded-For`, access log, busiest
//! identities and per-address shares of token reviews; passthrough's logs).
//!
//! Exactly the header is taken off the socket (v2 says its length; v1 is read to its `\r\n`),
//! so the data plane reads the client's own first byte: passthrough's ClientHello, terminate
//! mode's handshake. What a connection can make kubegate hold here is bounded: the header is at
//! most 4 KiB and must be whole within `proxy_protocol.timeout`.
//!
//! Refused, and closed: a header from a peer outside `trusted` (a client must not name itself
//! someone else); a trusted peer's connection without one when `required`; a malformed, too
//! long or too slow header. A connection from a peer outside `trusted` without a header is
//! served as its own: the listener can take balanced and direct clients at once. Nothing is
//! read to tell which: a balancer's first byte (a TLS connection starts with 0x16), another
//! peer's first bytes, are peeked.

use crate::state::Gateway;
use crate::telemetry::Refusal;
use kubegate_config::ProxyProtocol;
use kubegate_wire::proxy_header::{self, Malformed, Progress};
use std::io;
use std::net::SocketAddr;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The client of `stream`, which a listener with `policy` accepted; `None` when the connection
/// is refused (counted) or closed.
pub async fn client_of(
    gw: &Gateway,
    stream: &mut TcpStream,
    policy: Option<&ProxyProtocol>,
) -> Option<SocketAddr> {
    let peer = stream.peer_addr().ok()?;
    let Some(policy) = policy else {
        return Some(peer);
    };
    let deadline = policy.timeout;
    let arrived = if policy.trusts(peer.ip()) {
        tokio::time::timeout(deadline, from_balancer(stream, peer, policy)).await
    } else {
        match tokio::time::timeout(deadline, from_elsewhere(stream, peer)).await {
            // Silent so far: the data plane's own deadline (handshake, ClientHello) decides.
            Err(_) => return Some(peer),
            answer => answer,
        }
    };
    let why = match arrived {
        Ok(Ok(client)) => return Some(client),
        Ok(Err(Refused::Closed)) => return None,
        Ok(Err(Refused::Untrusted)) => {
            tracing::debug!(peer = %peer, "a PROXY header from a peer outside proxy_protocol.trusted: closing");
            Refusal::ProxyHeaderUntrusted
        }
        Ok(Err(Refused::Missing)) => {
            tracing::debug!(peer = %peer, "no PROXY header from a trusted balancer (proxy_protocol.required): closing");
            Refusal::ProxyHeaderMissing
        }
        Ok(Err(Refused::Malformed(m))) => {
            tracing::debug!(peer = %peer, why = m.as_str(), "a malformed PROXY header: closing");
            Refusal::ProxyHeader
        }
        Err(_) => {
            tracing::debug!(peer = %peer, "a PROXY header not whole within proxy_protocol.timeout: closing");
            Refusal::ProxyHeader
        }
    };
    gw.metrics().net.refuse(why);
    None
}

/// Why a connection is not served.
enum Refused {
    /// It closed (or failed) before a header was whole.
    Closed,
    /// A header from a peer that may not send one.
    Untrusted,
    /// No header from a peer that must send one.
    Missing,
    /// Not a header kubegate reads.
    Malformed(Malformed),
}

impl From<io::Error> for Refused {
    fn from(_: io::Error) -> Refused {
        Refused::Closed
    }
}

/// A trusted balancer's connection: its header read off, and the client it names (the
/// balancer itself for a `LOCAL` header, or none where that is allowed).
async fn from_balancer(
    stream: &mut TcpStream,
    peer: SocketAddr,
    policy: &ProxyProtocol,
) -> Result<SocketAddr, Refused> {
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 0 {
        return Err(Refused::Closed);
    }
    if !proxy_header::may_start(first[0]) {
        return if policy.required {
            Err(Refused::Missing)
        } else {
            Ok(peer)
        };
    }
    // A v1 line is read a byte at a time (at most 107): reading further could take the
    // client's first bytes, and a peek cannot wait for more than it already has.
    let mut header = Vec::new();
    loop {
        match proxy_header::read(&header) {
            Ok(Progress::Needs(n)) => {
                let have = header.len();
                header.resize(n, 0);
                stream.read_exact(&mut header[have..]).await?;
            }
            Ok(Progress::Done(h)) => return Ok(h.addresses.map_or(peer, |a| a.source)),
            Err(m) => return Err(Refused::Malformed(m)),
        }
    }
}

/// A connection from a peer outside `trusted`: its own, unless its first bytes (what one peek
/// finds) are a whole PROXY signature. Nothing is read: its bytes go to the data plane, which
/// refuses what is not TLS as it always does (a scanner's `\r\n\r\n` or a plain `POST` is
/// no header, and not counted as one).
async fn from_elsewhere(stream: &mut TcpStream, peer: SocketAddr) -> Result<SocketAddr, Refused> {
    let mut first = [0u8; proxy_header::V2_SIGNATURE.len()];
    let n = stream.peek(&mut first).await?;
    if n == 0 {
        return Err(Refused::Closed);
    }
    if proxy_header::is_signature(&first[..n]) {
        return Err(Refused::Untrusted);
    }
    Ok(peer)
}
