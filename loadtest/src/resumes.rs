//! Watches kubegate continued on another replica by itself, invisible to their clients: read
//! from its `/metrics` (`kubegate_watch_resumes_total`) twice a second, so the plot can show
//! when they happened.

use crate::record::Recorder;
use crate::traffic::tokio_util_like::Stop;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Polls `admin` until `stop`, recording each increase of the resume counter.
pub async fn follow(admin: SocketAddr, rec: Arc<Recorder>, stop: Stop) {
    let mut seen = None;
    while !stop.stopped() {
        if let Some(now) = metric_sum(admin, "kubegate_watch_resumes_total").await {
            let before = *seen.get_or_insert(now);
            if now > before {
                rec.gateway_resumed(now - before);
            }
            seen = Some(now);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The sum over its labels of metric family `name` (or of the series `name` begins, such as
/// `kubegate_config_reloads_total{result="failure"`), from kubegate's `/metrics` at `admin`.
pub async fn metric_sum(admin: SocketAddr, name: &str) -> Option<u64> {
    let read = async {
        let mut s = TcpStream::connect(admin).await.ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        Some(text)
    };
    let text = tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .ok()??;
    Some(
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', '}', ',', ' ']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64,
    )
}
