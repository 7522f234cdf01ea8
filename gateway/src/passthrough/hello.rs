//! The server name a passthrough client asks for, read from its TLS ClientHello without
//! answering it (rustls's `Acceptor` parses; kubegate never sends a ServerHello): the bytes
//! read go to the chosen backend first, and the TLS session stays between client and
//! apiserver. Only when the file names clusters: a one-cluster gateway reads nothing.
//!
//! A ClientHello may come in several TCP segments and several TLS records; reading stops at
//! the end of the first handshake message, [`MAX_HELLO`] bytes or [`HELLO_TIMEOUT`],
//! whichever comes first. An encrypted ClientHello (ECH) carries its real name inside: kubegate
//! sees the outer name only.

use rustls::server::Acceptor;
use std::io;
use std::time::Duration;
use tokio::net::TcpStream;

/// Largest ClientHello read. Go's and OpenSSL's are well under 2 KiB, post-quantum key
/// shares included; rustls refuses a handshake message over 64 KiB anyway.
pub const MAX_HELLO: usize = 16 * 1024;

/// What one read asks for.
const READ_AT_ONCE: usize = 4096;

/// Time a client has to send its whole ClientHello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A ClientHello read.
pub struct Hello {
    /// Its server name (SNI), lower case; `None` when it sent none.
    pub server_name: Option<String>,
    /// Every byte read, to be sent on to the backend before anything else.
    pub bytes: Vec<u8>,
}

/// Why no ClientHello could be read.
#[derive(Debug)]
pub enum HelloError {
    /// The client closed (or reset) the connection before sending anything: a TCP health
    /// check, not a client turned away.
    ClosedEarly,
    /// What came is not a TLS ClientHello, it is larger than [`MAX_HELLO`], or it did not
    /// all come within [`HELLO_TIMEOUT`].
    Unreadable(String),
}

/// Reads `client`'s ClientHello.
pub async fn read(client: &TcpStream) -> Result<Hello, HelloError> {
    match tokio::time::timeout(HELLO_TIMEOUT, read_hello(client)).await {
        Ok(read) => read,
        Err(_) => Err(HelloError::Unreadable(format!(
            "no whole ClientHello within {HELLO_TIMEOUT:?}"
        ))),
    }
}

async fn read_hello(client: &TcpStream) -> Result<Hello, HelloError> {
    let mut acceptor = Acceptor::default();
    // Read straight into what is kept: no buffer of its own in this future, which every
    // passthrough connection's task is sized for while it connects.
    let mut bytes = Vec::with_capacity(READ_AT_ONCE);
    loop {
        client
            .readable()
            .await
            .map_err(|e| HelloError::Unreadable(e.to_string()))?;
        let start = bytes.len();
        bytes.resize(start + (MAX_HELLO - start).min(READ_AT_ONCE), 0);
        let read = client.try_read(&mut bytes[start..]);
        bytes.truncate(start + read.as_ref().map_or(0, |n| *n));
        match read {
            Ok(0) if start == 0 => return Err(HelloError::ClosedEarly),
            Ok(0) => {
                return Err(HelloError::Unreadable(
                    "the client closed the connection inside its ClientHello".into(),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if start == 0 && e.kind() == io::ErrorKind::ConnectionReset => {
                return Err(HelloError::ClosedEarly)
            }
            Err(e) => return Err(HelloError::Unreadable(e.to_string())),
        }
        let mut fresh = &bytes[start..];
        while !fresh.is_empty() {
            match acceptor.read_tls(&mut fresh) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Err(HelloError::Unreadable(e.to_string())),
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let server_name = accepted
                    .client_hello()
                    .server_name()
                    .map(str::to_ascii_lowercase);
                return Ok(Hello { server_name, bytes });
            }
            Ok(None) if bytes.len() >= MAX_HELLO => {
                return Err(HelloError::Unreadable(format!(
                    "a ClientHello larger than {MAX_HELLO} bytes"
                )))
            }
            Ok(None) => {}
            Err((e, _)) => {
                return Err(HelloError::Unreadable(format!(
                    "not a TLS ClientHello: {e}"
                )))
            }
        }
    }
}
