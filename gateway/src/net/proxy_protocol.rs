//! Who a connection's client is: its peer, or — on a listener with `proxy_protocol`, from one of
//! the balancers it trusts — the client the balancer's PROXY header names. That address is the
//! client everywhere kubegate uses one (terminate mode's `X-Forwarded-For`, access log and
//! per-address shares of token reviews; passthrough's logs).
//!
//! Exactly the header is taken off the socket (v2 says its length; v1 is read to its `\r\n`),
//! so the data plane reads the client's own first byte: passthrough's ClientHello, terminate
//! mode's handshake. What a connection can make kubegate hold here is bounded: the header is at
//! most 4 KiB and must be whole within `proxy_protocol.timeout`.
//!
//! Refused, and closed: a header from a peer outside `trusted` (a client must not name itself
//! someone else); a trusted peer's connection without one when `required`; a malformed, too
//! long or too slow header. A connection from a peer outside `trusted` without a header is
//! served as its own: the listener can take balanced and direct clients at once. Which is which
//! is told by the first byte alone (a TLS connection starts with 0x16), peeked, not read.

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
    let why = match tokio::time::timeout(policy.timeout, arrive(stream, peer, policy)).await {
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

/// Reads the header, if `peer` sends one, and says who the client is.
async fn arrive(
    stream: &mut TcpStream,
    peer: SocketAddr,
    policy: &ProxyProtocol,
) -> Result<SocketAddr, Refused> {
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 0 {
        return Err(Refused::Closed);
    }
    let sends_one = proxy_header::may_start(first[0]);
    match (policy.trusts(peer.ip()), sends_one) {
        (false, true) => return Err(Refused::Untrusted),
        (false, false) => return Ok(peer),
        (true, false) if policy.required => return Err(Refused::Missing),
        (true, false) => return Ok(peer),
        (true, true) => {}
    }
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
