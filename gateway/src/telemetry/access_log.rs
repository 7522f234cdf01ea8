//! The access log (`terminate.access_log`): one line per terminate-mode request, written to
//! standard output (kubegate's own log goes to standard error), as JSON or as `key=value`
//! text, with who asked what of which replica and how it went.
//!
//! It cannot become the bottleneck, nor a client's way to make kubegate hold memory:
//!
//! - the request path only fills an [`Entry`] of cheap parts (the URI and user agent as the
//!   request holds them, shared pointers to the sender and the replica) and hands it to a
//!   bounded queue without waiting and without waking anything;
//! - a writer thread takes what is queued every [`FLUSH_EVERY`], reads each request as the
//!   apiserver does (verb, resource, namespace, name), formats the lines into one buffer and
//!   writes the batch with one call;
//! - the queue holds at most [`QUEUE`] entries and [`QUEUE_BYTES`] bytes of everything they
//!   keep alive (target with its query, user agent, the sender's names); a line that finds the queue full, or that exceeds
//!   `max_per_second`, is dropped and counted (`kubegate_access_log_dropped_total`).
//!
//! Off (the default), it costs one branch per request. Measured (bench/README.md): with it on,
//! kubegate's CPU per HTTP/2 request rose 42 % when each line was formatted as a JSON value
//! on the request's task and the writer woken for it; with the design above, 15%.

use crate::telemetry::metrics::Metrics;
use http::header::HeaderValue;
use http::{Method, Uri};
use kubegate_config::{AccessLogConfig, AccessLogFormat};
use kubegate_pool::BackendInfo;
use kubegate_wire::classify::ReadTarget;
use kubegate_wire::identity::UserInfo;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Entries waiting for the writer thread.
pub const QUEUE: usize = 4096;
/// Bytes of path and user agent the waiting entries may carry together.
pub const QUEUE_BYTES: usize = 4 << 20;
/// How often the writer thread takes what is queued: a line is at most this late.
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// What an entry costs the queue beyond its path and user agent.
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();
/// What a header value costs beside its bytes.
const ENTRY_VALUE: usize = std::mem::size_of::<HeaderValue>();

/// One request, as the log line tells it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// When the request arrived.
    pub started: SystemTime,
    /// The client's address.
    pub client: SocketAddr,
    /// The request's method.
    pub method: Method,
    /// Its target as the client sent it (the line shows the path, not the query: it may hold a
    /// field selector someone would rather not log).
    pub uri: Uri,
    /// `client_certificate`, `bearer_token` or `anonymous`.
    pub identity: &'static str,
    /// The user and groups: a certificate's, or a reviewed token's.
    pub sender: Option<Arc<UserInfo>>,
    /// The replica that answered; none when kubegate answered itself.
    pub replica: Option<Arc<BackendInfo>>,
    /// The status code sent to the client.
    pub status: u16,
    /// Other replicas tried before the one that answered.
    pub retries: u32,
    /// Response body bytes sent to the client.
    pub bytes: u64,
    /// Until the response body ended (a watch: until it ended).
    pub duration: Duration,
    /// The client's `User-Agent`.
    pub user_agent: Option<HeaderValue>,
    /// kubectl's command and invocation (`Kubectl-Command`, `Kubectl-Session`), when sent.
    pub kubectl: Option<Box<[HeaderValue; 2]>>,
    /// `h2` or `http/1.1`.
    pub protocol: &'static str,
    /// `led` or `joined` when its answer was shared with identical reads.
    pub shared: Option<&'static str>,
    /// The apiserver's audit ID of the upstream request whose answer was shared.
    pub audit_id: Option<HeaderValue>,
}

impl Entry {
    /// What the entry costs the queue: every byte it keeps alive. Its target and user agent
    /// are its own copies (`served::entry`), so their lengths are what they hold; the
    /// sender's names are counted too, as a queued entry may be what keeps them.
    fn weight(&self) -> usize {
        // A `String`'s or `Vec`'s own size, beside its bytes.
        const HEADER: usize = 24;
        let sender = self.sender.as_ref().map_or(0, |u| {
            u.user.len()
                + u.groups.iter().map(|g| g.len() + HEADER).sum::<usize>()
                + u.uid.as_ref().map_or(0, String::len)
                + u.extra
                    .iter()
                    .map(|(k, vs)| {
                        // A map entry, its key, its list, each value.
                        2 * HEADER + k.len() + vs.iter().map(|v| v.len() + HEADER).sum::<usize>()
                    })
                    .sum::<usize>()
        });
        // An extension method (`Method` keeps it in an allocation of its own).
        let method = match self.method.as_str().len() {
            n if n > 15 => n,
            _ => 0,
        };
        ENTRY_BYTES
            + method
            + self.uri.path_and_query().map_or(0, |pq| pq.as_str().len())
            + self.user_agent.as_ref().map_or(0, |u| u.len())
            + self
                .kubectl
                .as_ref()
                .map_or(0, |k| 2 * ENTRY_VALUE + k[0].len() + k[1].len())
            + self.audit_id.as_ref().map_or(0, |a| a.len())
            + sender
    }
}

/// Where lines go: the writer thread, the queue's bytes, and the rate limit.
struct Writer {
    entries: SyncSender<(Entry, AccessLogFormat)>,
    /// Bytes the queued entries carry.
    queued: Arc<AtomicUsize>,
    /// The second (since the epoch) the count is for, and the count, packed: second << 32 |
    /// lines.
    window: AtomicU64,
}

fn writer() -> &'static Writer {
    static WRITER: OnceLock<Writer> = OnceLock::new();
    WRITER.get_or_init(|| {
        let (entries, rx) = sync_channel::<(Entry, AccessLogFormat)>(QUEUE);
        let queued = Arc::new(AtomicUsize::new(0));
        let taken = queued.clone();
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_batches(rx, &taken))
            .expect("the access log thread starts");
        Writer {
            entries,
            queued,
            window: AtomicU64::new(0),
        }
    })
}

/// The writer thread: every [`FLUSH_EVERY`], formats what is queued and writes it at once.
/// Sleeping rather than waiting on the queue means a request never has to wake it.
fn write_batches(rx: Receiver<(Entry, AccessLogFormat)>, queued: &AtomicUsize) {
    let stdout = std::io::stdout();
    let mut batch = String::with_capacity(64 * 1024);
    loop {
        std::thread::sleep(FLUSH_EVERY);
        let mut open = true;
        loop {
            let (entry, format) = match rx.try_recv() {
                Ok(e) => e,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            };
            queued.fetch_sub(entry.weight(), Ordering::AcqRel);
            match format {
                AccessLogFormat::Text => text(&entry, &mut batch),
                AccessLogFormat::Json | AccessLogFormat::Off => json(&entry, &mut batch),
            }
        }
        if !batch.is_empty() {
            let mut out = stdout.lock();
            let _ = out.write_all(batch.as_bytes());
            let _ = out.flush();
            batch.clear();
            if batch.capacity() > 1 << 20 {
                batch.shrink_to(64 * 1024);
            }
        }
        if !open {
            return;
        }
    }
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

    /// Queues `entry` if its bytes fit; `false` when the queue is full.
    fn queue(&self, entry: Entry, format: AccessLogFormat) -> bool {
        let weight = entry.weight();
        let fits = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q + weight <= QUEUE_BYTES).then_some(q + weight)
            })
            .is_ok();
        if !fits {
            return false;
        }
        match self.entries.try_send((entry, format)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(weight, Ordering::AcqRel);
                false
            }
        }
    }
}

/// Queues `entry` for the log if it is on, within its budget; counts it as dropped otherwise.
pub fn record(config: &AccessLogConfig, metrics: &Metrics, entry: Entry) {
    if config.format == AccessLogFormat::Off {
        return;
    }
    let w = writer();
    if !w.admit(config.max_per_second) || !w.queue(entry, config.format) {
        metrics.terminate.access_log_dropped.inc();
    }
}

/// What a line says of the request, read as the apiserver reads it.
struct Request<'a> {
    verb: &'static str,
    api_group: Option<&'a str>,
    resource: Option<&'a str>,
    subresource: Option<&'a str>,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
}

/// Reads `e`'s request, and hands it to `f`.
fn read<T>(e: &Entry, f: impl FnOnce(Request<'_>) -> T) -> T {
    match ReadTarget::of(&e.uri) {
        Ok(read) => {
            let info = read.info(&e.method);
            let t = info.target;
            f(Request {
                verb: info.class.verb.as_str(),
                api_group: t.api_group,
                resource: t.resource.filter(|r| !r.is_empty()),
                subresource: t.subresource,
                namespace: t.namespace.filter(|n| !n.is_empty()),
                name: t.name,
            })
        }
        Err(_) => f(Request {
            verb: "other",
            api_group: None,
            resource: None,
            subresource: None,
            namespace: None,
            name: None,
        }),
    }
}

fn time(t: SystemTime) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_millis(t)
}

fn user_agent(e: &Entry) -> std::borrow::Cow<'_, str> {
    e.user_agent.as_ref().map(client_text).unwrap_or_default()
}

/// A header value from the client as a log line shows it: at most 256 bytes, any byte that is
/// not UTF-8 replaced.
fn client_text(value: &HeaderValue) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(crate::telemetry::costs::bounded_bytes(value.as_bytes()))
}

/// The audit ID of a shared answer's upstream request, or `-`.
fn audit_id(e: &Entry) -> std::borrow::Cow<'_, str> {
    e.audit_id
        .as_ref()
        .map_or("-".into(), |a| String::from_utf8_lossy(a.as_bytes()))
}

/// One JSON object and a newline, appended to `out`.
pub fn json(e: &Entry, out: &mut String) {
    read(e, |r| {
        let _ = write!(
            out,
            "{{\"time\":\"{}\",\"client\":\"{}\"",
            time(e.started),
            e.client
        );
        field(out, "identity", e.identity);
        if let Some(s) = &e.sender {
            field(out, "user", &s.user);
            out.push_str(",\"groups\":[");
            for (i, g) in s.groups.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                quoted(out, g);
            }
            out.push(']');
        }
        field(out, "verb", r.verb);
        if let Some(g) = r.api_group {
            field(out, "api_group", g);
        }
        if let Some(resource) = r.resource {
            out.push_str(",\"resource\":");
            match r.subresource {
                Some(sub) => quoted(out, &format!("{resource}/{sub}")),
                None => quoted(out, resource),
            }
        }
        if let Some(ns) = r.namespace {
            field(out, "namespace", ns);
        }
        if let Some(name) = r.name {
            field(out, "name", name);
        }
        field(out, "path", e.uri.path());
        field(
            out,
            "replica",
            e.replica.as_ref().map_or("-", |b| b.name.as_str()),
        );
        let _ = write!(
            out,
            ",\"status\":{},\"retries\":{},\"bytes\":{},\"duration_ms\":{}",
            e.status,
            e.retries,
            e.bytes,
            (e.duration.as_secs_f64() * 1e6).round() / 1e3
        );
        field(out, "user_agent", &user_agent(e));
        if let Some([command, session]) = e.kubectl.as_deref() {
            field(out, "kubectl_command", &client_text(command));
            field(out, "kubectl_session", &client_text(session));
        }
        field(out, "protocol", e.protocol);
        if let Some(shared) = e.shared {
            field(out, "shared", shared);
            field(out, "audit_id", &audit_id(e));
        }
        out.push_str("}\n");
    })
}

/// `,"key":"value"` with the value escaped.
fn field(out: &mut String, key: &str, value: &str) {
    out.push_str(",\"");
    out.push_str(key);
    out.push_str("\":");
    quoted(out, value);
}

/// Whether `value` is printable ASCII with no quote or backslash: written as it is in either
/// format. Almost every value is (paths, names, user agents), and a byte scan is what the
/// writer thread's time went to before (bench/README.md).
fn plain(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// `value` as a JSON string.
fn quoted(out: &mut String, value: &str) {
    in_quotes(out, value, |out, c| match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        // Line separators too: some readers split lines on them.
        c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => out.push(c),
    });
}

/// `value` in double quotes, each character written by `escape` unless every one is
/// [`plain`] (the usual case, copied whole).
fn in_quotes(out: &mut String, value: &str, escape: impl Fn(&mut String, char)) {
    out.push('"');
    if plain(value) {
        out.push_str(value);
    } else {
        for c in value.chars() {
            escape(out, c);
        }
    }
    out.push('"');
}

/// `key=value` pairs (logfmt) and a newline, appended to `out`. A value is quoted (and
/// escaped) when it is empty or holds a space, a quote, `=`, a backslash, a control character
/// (a tab included) or any other character that could end or split a line for a reader
/// (U+0085, U+2028, U+2029): one request is always one line.
pub fn text(e: &Entry, out: &mut String) {
    read(e, |r| {
        let start = out.len();
        let mut pair = |k: &str, v: &str| {
            if out.len() > start {
                out.push(' ');
            }
            out.push_str(k);
            out.push('=');
            let plain = !v.is_empty()
                && !v
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '=' | '\\'));
            if plain {
                out.push_str(v);
            } else {
                push_escaped(out, v);
            }
        };
        pair("time", &time(e.started).to_string());
        pair("client", &e.client.to_string());
        pair("identity", e.identity);
        if let Some(s) = &e.sender {
            pair("user", &s.user);
            pair("groups", &s.groups.join(","));
        }
        pair("verb", r.verb);
        if let Some(g) = r.api_group {
            pair("api_group", g);
        }
        if let Some(resource) = r.resource {
            match r.subresource {
                Some(sub) => pair("resource", &format!("{resource}/{sub}")),
                None => pair("resource", resource),
            }
        }
        if let Some(ns) = r.namespace {
            pair("namespace", ns);
        }
        if let Some(name) = r.name {
            pair("name", name);
        }
        pair("path", e.uri.path());
        pair(
            "replica",
            e.replica.as_ref().map_or("-", |b| b.name.as_str()),
        );
        pair("status", &e.status.to_string());
        pair("retries", &e.retries.to_string());
        pair("bytes", &e.bytes.to_string());
        pair(
            "duration_ms",
            &format!("{:.3}", e.duration.as_secs_f64() * 1e3),
        );
        pair("user_agent", &user_agent(e));
        if let Some([command, session]) = e.kubectl.as_deref() {
            pair("kubectl_command", &client_text(command));
            pair("kubectl_session", &client_text(session));
        }
        pair("protocol", e.protocol);
        if let Some(shared) = e.shared {
            pair("shared", shared);
            pair("audit_id", &audit_id(e));
        }
        out.push('\n');
    })
}

/// `value` in double quotes with Rust's escapes, which cover every control character (`\t`,
/// `\u{85}`), and the line and paragraph separators spelled out as well.
fn push_escaped(out: &mut String, value: &str) {
    in_quotes(out, value, |out, c| match c {
        '\u{2028}' | '\u{2029}' => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.extend(c.escape_debug()),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubegate_pool::BackendSource;

    fn entry() -> Entry {
        Entry {
            started: UNIX_EPOCH + Duration::from_secs(1_764_547_200),
            client: "10.0.0.5:43210".parse().unwrap(),
            method: Method::GET,
            uri: "/api/v1/namespaces/default/pods?limit=5".parse().unwrap(),
            identity: "client_certificate",
            sender: Some(Arc::new(UserInfo {
                user: "alice".into(),
                groups: vec!["dev".into(), "ops".into()],
                uid: None,
                extra: Default::default(),
            })),
            replica: Some(Arc::new(BackendInfo {
                name: "cp-1".into(),
                probe_address: "127.0.0.1:6443".parse().unwrap(),
                addresses: vec!["127.0.0.1:6443".parse().unwrap()],
                source: BackendSource::Static,
            })),
            status: 200,
            retries: 1,
            bytes: 1234,
            duration: Duration::from_micros(3250),
            user_agent: Some(HeaderValue::from_static("kubectl/v1.35.2 (linux/amd64)")),
            kubectl: Some(Box::new([
                HeaderValue::from_static("kubectl get"),
                HeaderValue::from_static("67b540bf-d219-4868-abd8-b08c77fefeca"),
            ])),
            protocol: "h2",
            shared: None,
            audit_id: None,
        }
    }

    fn line(f: fn(&Entry, &mut String), e: &Entry) -> String {
        let mut out = String::new();
        f(e, &mut out);
        out
    }

    #[test]
    fn a_line_in_each_format() {
        let j: serde_json::Value = serde_json::from_str(&line(json, &entry())).unwrap();
        assert_eq!(j["user"], "alice");
        assert_eq!(j["groups"], serde_json::json!(["dev", "ops"]));
        assert_eq!(j["verb"], "list");
        assert_eq!(j["resource"], "pods");
        assert_eq!(j["namespace"], "default");
        assert_eq!(j["path"], "/api/v1/namespaces/default/pods");
        assert_eq!(j["replica"], "cp-1");
        assert_eq!(j["retries"], 1);
        assert_eq!(j["duration_ms"], 3.25);
        assert_eq!(j["time"], "2025-12-01T00:00:00.000Z");
        assert_eq!(j["api_group"], "");
        assert!(j.get("name").is_none(), "empty fields are left out");
        assert_eq!(j["kubectl_command"], "kubectl get");
        assert_eq!(j["kubectl_session"], "67b540bf-d219-4868-abd8-b08c77fefeca");
        let t = line(text, &entry());
        assert!(t.contains(r#" kubectl_command="kubectl get" "#), "{t}");
        assert!(
            t.contains(r#" kubectl_session=67b540bf-d219-4868-abd8-b08c77fefeca "#),
            "{t}"
        );
        let without = Entry {
            kubectl: None,
            ..entry()
        };
        let j: serde_json::Value = serde_json::from_str(&line(json, &without)).unwrap();
        assert!(j.get("kubectl_command").is_none(), "{j}");
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
        assert!(!t.contains("limit=5"), "no query: {t}");
        assert!(j.get("shared").is_none() && !t.contains("audit_id"), "{t}");
    }

    #[test]
    fn a_shared_answer_names_the_audited_request() {
        let mut e = entry();
        e.shared = Some("joined");
        e.audit_id = Some(HeaderValue::from_static(
            "5b0c7f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
        ));
        let j: serde_json::Value = serde_json::from_str(&line(json, &e)).unwrap();
        assert_eq!(j["shared"], "joined");
        assert_eq!(j["audit_id"], "5b0c7f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b");
        let t = line(text, &e);
        assert!(
            t.contains(" shared=joined audit_id=5b0c7f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b\n"),
            "{t}"
        );
    }

    #[test]
    fn every_line_is_one_line_whatever_the_client_sent() {
        let mut e = entry();
        // A user agent with a tab, a next-line and a line separator; a user with a newline;
        // a path with an encoded newline and quote.
        e.user_agent =
            Some(HeaderValue::from_bytes("a\tb \u{85} \u{2028} \"x\"".as_bytes()).unwrap());
        e.sender = Some(Arc::new(UserInfo {
            user: "mallory\nstatus=200".into(),
            groups: vec![],
            uid: None,
            extra: Default::default(),
        }));
        e.uri = "/api/v1/namespaces/d/pods/a%0Ab%22".parse().unwrap();
        for (name, f) in [("json", json as fn(&Entry, &mut String)), ("text", text)] {
            let l = line(f, &e);
            let body = &l[..l.len() - 1];
            for c in ['\n', '\r', '\t', '\u{85}', '\u{2028}', '\u{2029}'] {
                assert!(!body.contains(c), "{name}: {c:?} in {l:?}");
            }
        }
        let j: serde_json::Value = serde_json::from_str(&line(json, &e)).unwrap();
        assert_eq!(j["user"], "mallory\nstatus=200");
        assert_eq!(j["name"], "a\nb\"");
        let t = line(text, &e);
        assert!(t.contains(r#"user="mallory\nstatus=200""#), "{t}");
        assert!(!t.contains(" status=200 status"), "{t}");
    }

    #[test]
    fn a_long_user_agent_is_cut() {
        let mut e = entry();
        e.user_agent = Some(HeaderValue::from_str(&"x".repeat(48 * 1024)).unwrap());
        let j: serde_json::Value = serde_json::from_str(&line(json, &e)).unwrap();
        assert_eq!(
            j["user_agent"].as_str().unwrap().len(),
            crate::telemetry::costs::NAME_BYTES
        );
    }

    #[test]
    fn the_budget_admits_so_many_lines_a_second() {
        let w = Writer {
            entries: sync_channel(1).0,
            queued: Arc::default(),
            window: AtomicU64::new(0),
        };
        let admitted = (0..50).filter(|_| w.admit(10)).count();
        // All in one second, or across a second's turn (then up to twice).
        assert!((10..=20).contains(&admitted), "{admitted}");
    }

    /// Everything an entry keeps alive is weighed: a sender's extra (a bound token's pod and
    /// node names) and an extension method as long as a client makes it.
    #[test]
    fn an_entrys_weight_counts_its_senders_extra_and_a_long_method() {
        let plain = entry();
        let mut heavy = entry();
        heavy.method = Method::from_bytes("X".repeat(4096).as_bytes()).unwrap();
        assert!(heavy.weight() >= plain.weight() + 4096);
        let mut extra = entry();
        extra.sender = Some(Arc::new(UserInfo {
            user: "u".into(),
            groups: vec![],
            uid: None,
            extra: [("k".to_string(), vec!["v".repeat(8192)])].into(),
        }));
        assert!(extra.weight() >= plain.weight() + 8192);
    }

    #[test]
    fn the_queue_holds_so_many_bytes() {
        let (entries, _rx) = sync_channel(QUEUE);
        let w = Writer {
            entries,
            queued: Arc::default(),
            window: AtomicU64::new(0),
        };
        let mut big = entry();
        big.user_agent = Some(HeaderValue::from_str(&"x".repeat(60 * 1024)).unwrap());
        let queued = (0..QUEUE)
            .filter(|_| w.queue(big.clone(), AccessLogFormat::Json))
            .count();
        assert!(queued < QUEUE, "{queued}");
        assert!(queued * big.weight() <= QUEUE_BYTES);
        assert!(w.queued.load(Ordering::Acquire) <= QUEUE_BYTES);
    }
}
