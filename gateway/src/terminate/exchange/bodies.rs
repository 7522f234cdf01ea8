//! Request bodies, read whole and held until the request is placed (a retry must be able to
//! send a body again), within three bounds and a deadline: one body's size
//! (`terminate.max_request_body_bytes`, 3 MiB as the apiserver's), what one client connection
//! may make kubegate hold over all its streams (`max_request_body_bytes_per_connection`), and
//! what all clients together may (`max_request_body_bytes_in_total`); the whole body within
//! `request_body_timeout`. A body that would go beyond a bound gets 413, one still arriving at
//! the deadline 408: the request is refused, its connection's other streams go on, and nobody
//! else's request is touched. What is charged is what is reserved, before it is reserved: a
//! buffer grows as bytes arrive and never from the `Content-Length` a client announces (150
//! connections announcing 3 MiB and sending 2 bytes once reserved 480 MB the bounds never
//! saw). The charge is given back when the request no longer needs its body ([`Held`]
//! dropped).

use crate::telemetry::RequestFailure;
use bytes::Bytes;
use http::header::{HeaderMap, CONTENT_LENGTH};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use kubegate_config::TerminateConfig;
use prometheus::IntGauge;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A body's bytes, charged to its connection and to everyone's count until dropped.
pub struct Held {
    connection: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
    gauge: IntGauge,
    bytes: u64,
}

/// Why a body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Over a bound, named for the answer.
    TooLarge(&'static str, u64),
    /// Still arriving at the deadline.
    Timeout(Duration),
    /// The client's stream broke.
    Broken,
}

impl Refused {
    /// How the refusal is counted.
    pub fn failure(self) -> RequestFailure {
        match self {
            Refused::TooLarge(..) => RequestFailure::BodyTooLarge,
            Refused::Timeout(_) => RequestFailure::BodyTimeout,
            Refused::Broken => RequestFailure::BadRequest,
        }
    }

    /// What the client is told.
    pub fn message(self) -> String {
        match self {
            Refused::TooLarge("request", limit) => {
                format!("the request body is larger than {limit} bytes")
            }
            Refused::TooLarge(bound, limit) => format!(
                "request bodies being held for this {bound} would exceed {limit} bytes; try again when fewer requests are in flight"
            ),
            Refused::Timeout(t) => format!(
                "the request body did not arrive within {}s",
                t.as_secs()
            ),
            Refused::Broken => "the request body broke off".to_string(),
        }
    }
}

/// The bounds a body is read within, and where its bytes are counted.
pub struct Bounds<'a> {
    /// Terminate mode's settings.
    pub config: &'a TerminateConfig,
    /// Bytes held for the client's connection.
    pub connection: &'a Arc<AtomicU64>,
    /// Bytes held for everyone.
    pub total: &'a Arc<AtomicU64>,
    /// `kubegate_request_body_bytes_held`.
    pub gauge: &'a IntGauge,
}

/// Reads `body` (the request's `headers` announce its length) whole within `bounds`.
pub async fn read(
    headers: &HeaderMap,
    body: Incoming,
    bounds: Bounds<'_>,
) -> Result<(Bytes, Held), Refused> {
    let c = bounds.config;
    let announced = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > c.max_request_body_bytes) {
        return Err(Refused::TooLarge("request", c.max_request_body_bytes));
    }
    let mut held = Held {
        connection: bounds.connection.clone(),
        total: bounds.total.clone(),
        gauge: bounds.gauge.clone(),
        bytes: 0,
    };
    let max = usize::try_from(c.max_request_body_bytes).unwrap_or(usize::MAX);
    let mut body = body;
    // One frame is kept as it came (most bodies are one); a second one starts a buffer that
    // grows as bytes arrive, never sized from the `Content-Length` the client announced.
    let mut first: Option<Bytes> = None;
    let mut gathered: Option<Vec<u8>> = None;
    let reading = async {
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(|_| Refused::Broken)?.into_data() else {
                continue;
            };
            match (&mut first, &mut gathered) {
                (None, None) => {
                    held.charge_to(data.len() as u64, c)?;
                    first = Some(data);
                }
                (Some(f), None) => {
                    let mut b = Vec::new();
                    gather(&mut b, f, &mut held, max, c)?;
                    gather(&mut b, &data, &mut held, max, c)?;
                    gathered = Some(b);
                    first = None;
                }
                (_, Some(b)) => gather(b, &data, &mut held, max, c)?,
            }
        }
        Ok::<(), Refused>(())
    };
    match tokio::time::timeout(c.request_body_timeout, reading).await {
        Ok(Ok(())) => {}
        Ok(Err(refused)) => return Err(refused),
        Err(_) => return Err(Refused::Timeout(c.request_body_timeout)),
    }
    let bytes = match (first, gathered) {
        // Keeps its capacity (charged until `held` goes): no copy to shrink it.
        (_, Some(b)) => Bytes::from(b),
        (Some(f), None) => f,
        (None, None) => Bytes::new(),
    };
    Ok((bytes, held))
}

/// Appends `data` to `buf`, growing it (to what has arrived, then doubling, within `max`:
/// a 3 MiB body in 16 KiB frames is copied about eight times) only as bytes arrive, and
/// charging its capacity to `held` before it is reserved: what the bounds count is what is
/// reserved. A reservation the allocator refuses is a body too large for the gateway, not
/// an abort.
fn gather(
    buf: &mut Vec<u8>,
    data: &[u8],
    held: &mut Held,
    max: usize,
    c: &TerminateConfig,
) -> Result<(), Refused> {
    let needed = buf.len() + data.len();
    if needed > max {
        return Err(Refused::TooLarge("request", c.max_request_body_bytes));
    }
    if needed > buf.capacity() {
        let grown = (buf.capacity() * 2).max(needed).min(max);
        held.charge_to(grown as u64, c)?;
        buf.try_reserve_exact(grown - buf.len())
            .map_err(|_| Refused::TooLarge("gateway", c.max_request_body_bytes_in_total))?;
    }
    buf.extend_from_slice(data);
    held.charge_to(buf.capacity() as u64, c)
}

impl Held {
    /// Charges up to `total` bytes (what the body now holds or has reserved) against every
    /// bound, or refuses the growth (charging nothing more).
    fn charge_to(&mut self, total: u64, c: &TerminateConfig) -> Result<(), Refused> {
        let Some(n) = total.checked_sub(self.bytes).filter(|n| *n > 0) else {
            return Ok(());
        };
        if total > c.max_request_body_bytes {
            return Err(Refused::TooLarge("request", c.max_request_body_bytes));
        }
        let charge = |counter: &AtomicU64, limit: u64| {
            counter
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                    (held + n <= limit).then_some(held + n)
                })
                .is_ok()
        };
        if !charge(&self.connection, c.max_request_body_bytes_per_connection) {
            return Err(Refused::TooLarge(
                "connection",
                c.max_request_body_bytes_per_connection,
            ));
        }
        if !charge(&self.total, c.max_request_body_bytes_in_total) {
            self.connection.fetch_sub(n, Ordering::AcqRel);
            return Err(Refused::TooLarge(
                "gateway",
                c.max_request_body_bytes_in_total,
            ));
        }
        self.bytes = total;
        self.gauge.add(n as i64);
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.connection.fetch_sub(self.bytes, Ordering::AcqRel);
        self.total.fetch_sub(self.bytes, Ordering::AcqRel);
        self.gauge.sub(self.bytes as i64);
    }
}
