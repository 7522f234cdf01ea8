//! The access log (`terminate.access_log`): one line per terminate-mode request, written to
//! standard output (kubegate's own log goes to standard error), as JSON or as `key=value`
//! text, with who asked what of which replica and how it went.
//!
//! It cannot become the bottleneck: lines go to a writer thread through a bounded queue, and a
//! line that finds the queue full, or that exceeds `max_per_second`, is dropped and counted
//! (`kubegate_access_log_dropped_total`) instead of waiting. Off (the default), it costs one
//! branch per request.

use crate::telemetry::metrics::Metrics;
use kubegate_config::{AccessLogConfig, AccessLogFormat};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Lines waiting for the writer thread.
const QUEUE: usize = 4096;

/// One request, as the log line tells it.
#[derive(Debug, Default, Clone)]
pub struct Entry {
    /// When the request arrived.
    pub started: Option<SystemTime>,
    /// The client's address.
    pub client: String,
    /// `client_certificate`, `bearer_token` or `anonymous`.
    pub identity: &'static str,
    /// The certificate's user, if any.
    pub user: String,
    /// Its groups.
    pub groups: Vec<String>,
    /// The apiserver's verb.
    pub verb: &'static str,
    /// The API group (`""` for the core group; none for a non-resource path).
    pub api_group: Option<String>,
    /// The resource, its subresource.
    pub resource: String,
    /// The namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The path (no query: it may hold a field selector someone would rather not log).
    pub path: String,
    /// The replica that answered, `-` when kubegate answered itself.
    pub replica: String,
    /// The status code sent to the client.
    pub status: u16,
    /// Other replicas tried before the one that answered.
    pub retries: u32,
    /// Response body bytes sent to the client.
    pub bytes: u64,
    /// Until the response body ended (a watch: until it ended).
    pub duration: Duration,
    /// The client's `User-Agent`.
    pub user_agent: String,
    /// `h2` or `http/1.1`.
    pub protocol: &'static str,
}

/// Where lines go: the writer thread, and the rate limit.
struct Writer {
    lines: SyncSender<String>,
    /// The second (since the epoch) the count is for, and the count, packed: second << 32 |
    /// lines.
    window: AtomicU64,
}

fn writer() -> &'static Writer {
    static WRITER: OnceLock<Writer> = OnceLock::new();
    WRITER.get_or_init(|| {
        let (lines, rx) = sync_channel::<String>(QUEUE);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::new(stdout.lock());
                while let Ok(line) = rx.recv() {
                    let _ = out.write_all(line.as_bytes());
                    // Flush once the queue is empty: lines in bursts, each at most a moment
                    // late.
                    while let Ok(more) = rx.try_recv() {
                        let _ = out.write_all(more.as_bytes());
                    }
                    let _ = out.flush();
                }
            })
            .expect("the access log thread starts");
        Writer {
            lines,
            window: AtomicU64::new(0),
        }
    })
}

impl Writer {
    /// Whether one more line fits this second's budget.
    fn admit(&self, max_per_second: u32) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.window
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                let (second, count) = (w >> 32, w & 0xffff_ffff);
                if second != now & 0xffff_ffff {
                    Some(((now & 0xffff_ffff) << 32) | 1)
                } else if count < u64::from(max_per_second) {
                    Some(w + 1)
                } else {
                    None
                }
            })
            .is_ok()
    }
}

/// Writes `entry` if the log is on, within its budget; counts it as dropped otherwise.
pub fn record(config: &AccessLogConfig, metrics: &Metrics, entry: &Entry) {
    let line = match config.format {
        AccessLogFormat::Off => return,
        AccessLogFormat::Json => json(entry),
        AccessLogFormat::Text => text(entry),
    };
    let w = writer();
    if !w.admit(config.max_per_second) {
        metrics.terminate.access_log_dropped.inc();
        return;
    }
    match w.lines.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            metrics.terminate.access_log_dropped.inc()
        }
    }
}

fn time(t: Option<SystemTime>) -> String {
    t.map(|t| humantime::format_rfc3339_millis(t).to_string())
        .unwrap_or_default()
}

/// One JSON object and a newline.
pub fn json(e: &Entry) -> String {
    let mut v = serde_json::json!({
        "time": time(e.started),
        "client": e.client,
        "identity": e.identity,
        "verb": e.verb,
        "path": e.path,
        "replica": e.replica,
        "status": e.status,
        "retries": e.retries,
        "bytes": e.bytes,
        "duration_ms": (e.duration.as_secs_f64() * 1e6).round() / 1e3,
        "user_agent": e.user_agent,
        "protocol": e.protocol,
    });
    let o = v.as_object_mut().expect("an object");
    if !e.user.is_empty() {
        o.insert("user".into(), e.user.clone().into());
        o.insert("groups".into(), e.groups.clone().into());
    }
    for (key, value) in [
        ("resource", &e.resource),
        ("namespace", &e.namespace),
        ("name", &e.name),
    ] {
        if !value.is_empty() {
            o.insert(key.into(), value.clone().into());
        }
    }
    if let Some(g) = &e.api_group {
        o.insert("api_group".into(), g.clone().into());
    }
    let mut line = serde_json::to_string(&v).expect("serializable");
    line.push('\n');
    line
}

/// `key=value` pairs (logfmt) and a newline; values with spaces or quotes are quoted.
pub fn text(e: &Entry) -> String {
    let mut line = String::with_capacity(256);
    let mut pair = |k: &str, v: &str| {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(k);
        line.push('=');
        if v.is_empty() || v.contains([' ', '"', '=']) {
            line.push_str(&format!("{v:?}"));
        } else {
            line.push_str(v);
        }
    };
    pair("time", &time(e.started));
    pair("client", &e.client);
    pair("identity", e.identity);
    if !e.user.is_empty() {
        pair("user", &e.user);
        pair("groups", &e.groups.join(","));
    }
    pair("verb", e.verb);
    if let Some(g) = &e.api_group {
        pair("api_group", g);
    }
    for (k, v) in [
        ("resource", &e.resource),
        ("namespace", &e.namespace),
        ("name", &e.name),
    ] {
        if !v.is_empty() {
            pair(k, v);
        }
    }
    pair("path", &e.path);
    pair("replica", &e.replica);
    pair("status", &e.status.to_string());
    pair("retries", &e.retries.to_string());
    pair("bytes", &e.bytes.to_string());
    pair(
        "duration_ms",
        &format!("{:.3}", e.duration.as_secs_f64() * 1e3),
    );
    pair("user_agent", &e.user_agent);
    pair("protocol", e.protocol);
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            started: Some(UNIX_EPOCH + Duration::from_secs(1_764_547_200)),
            client: "10.0.0.5:43210".into(),
            identity: "client_certificate",
            user: "alice".into(),
            groups: vec!["dev".into(), "ops".into()],
            verb: "list",
            api_group: Some("".into()),
            resource: "pods".into(),
            namespace: "default".into(),
            path: "/api/v1/namespaces/default/pods".into(),
            replica: "cp-1".into(),
            status: 200,
            retries: 1,
            bytes: 1234,
            duration: Duration::from_micros(3250),
            user_agent: "kubectl/v1.35.2 (linux/amd64)".into(),
            protocol: "h2",
            ..Entry::default()
        }
    }

    #[test]
    fn a_line_in_each_format() {
        let j: serde_json::Value = serde_json::from_str(&json(&entry())).unwrap();
        assert_eq!(j["user"], "alice");
        assert_eq!(j["groups"], serde_json::json!(["dev", "ops"]));
        assert_eq!(j["resource"], "pods");
        assert_eq!(j["replica"], "cp-1");
        assert_eq!(j["retries"], 1);
        assert_eq!(j["duration_ms"], 3.25);
        assert_eq!(j["time"], "2025-12-01T00:00:00.000Z");
        assert!(j.get("name").is_none(), "empty fields are left out");
        let t = text(&entry());
        assert!(t.ends_with('\n'));
        assert!(t.contains(" user=alice groups=dev,ops verb=list "), "{t}");
        assert!(
            t.contains(r#"user_agent="kubectl/v1.35.2 (linux/amd64)""#),
            "{t}"
        );
        assert!(
            t.contains(r#"api_group="""#),
            "the core group is written: {t}"
        );
    }

    #[test]
    fn the_budget_admits_so_many_lines_a_second() {
        let w = Writer {
            lines: sync_channel(1).0,
            window: AtomicU64::new(0),
        };
        let admitted = (0..50).filter(|_| w.admit(10)).count();
        // All in one second, or across a second's turn (then up to twice).
        assert!((10..=20).contains(&admitted), "{admitted}");
    }
}
