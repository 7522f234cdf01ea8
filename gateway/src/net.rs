//! Network plumbing both data planes share: the accept loops (with the admission limit), who
//! each connection's client is (its peer, or the one a trusted balancer's PROXY header names),
//! and the one loop that places new work on a backend (pick → try → on a failure
//! that allows it, another; a failed connect ejects the backend).

mod accept;
mod connect;
pub mod hold;
mod proxy_protocol;

pub use accept::{bind, bind_admin, Acceptor, Serve};
pub use connect::{connect_failed, place, Attempt, Unplaced, PASSIVE_EJECTION};
pub use proxy_protocol::client_of;

/// The TLS alert a client whose server name reaches no cluster of its listener gets (RFC 6066
/// §3: fatal `unrecognized_name`, 112), in a TLS 1.2 record, as a server that never began the
/// handshake sends it: Go prints "remote error: tls: unrecognized name". Both planes send it
/// (passthrough never answers the ClientHello otherwise).
pub const UNRECOGNIZED_NAME: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];
