//! Plain HTTP/1.1 GETs of the loopback endpoints the runner reads itself: the replicas' fault
//! ports and kubegate's admin endpoints.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one read may take: a busy machine answers within it, a stuck endpoint is skipped.
const LIMIT: Duration = Duration::from_secs(2);

/// `GET path` of `addr`: whether it answered 200, and its body; `None` if it did not answer
/// within 2 s.
pub async fn get(addr: SocketAddr, path: &str) -> Option<(bool, String)> {
    let read = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nHost: loopback\r\nConnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).await.ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        Some((head.starts_with("HTTP/1.1 200"), body.to_string()))
    };
    tokio::time::timeout(LIMIT, read).await.ok()?
}

/// `GET path` of `addr` answered 200 with JSON: the JSON.
pub async fn get_json(addr: SocketAddr, path: &str) -> Option<serde_json::Value> {
    match get(addr, path).await? {
        (true, body) => serde_json::from_str(&body).ok(),
        (false, _) => None,
    }
}
