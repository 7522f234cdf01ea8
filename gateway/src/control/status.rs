//! `kubegate status`: the admin endpoint's `/debug/backends` as a table.

use crate::control::admin::BackendView;
use anyhow::{bail, Context};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;

/// Fetches `/debug/backends` from `admin` and prints it.
pub fn print(admin: SocketAddr) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let body = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), get(admin, "/debug/backends"))
            .await
            .context("admin endpoint did not answer within 5s")?
    })?;
    let rows: Vec<BackendView> =
        serde_json::from_slice(&body).context("unexpected /debug/backends answer")?;
    print!("{}", table(&rows));
    Ok(())
}

async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot reach the admin endpoint at {addr}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<bytes::Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    if !resp.status().is_success() {
        bail!("{path}: HTTP {}", resp.status());
    }
    Ok(resp.into_body().collect().await?.to_bytes())
}

/// Renders rows as an aligned text table.
pub fn table(rows: &[BackendView]) -> String {
    let header = [
        "NAME", "ADDRESS", "SOURCE", "STATE", "SINCE", "CONNS", "PROBE", "LATENCY", "DETAIL",
    ];
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                r.address.clone(),
                r.source.clone(),
                r.state.clone(),
                r.since.clone(),
                r.active_connections.to_string(),
                r.last_probe_result.clone().unwrap_or_else(|| "-".into()),
                r.last_probe_latency_ms
                    .map(|ms| format!("{ms:.1}ms"))
                    .unwrap_or_else(|| "-".into()),
                r.last_probe_detail.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let mut line = |row: &[&str]| {
        let parts: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &cells {
        line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}
