//! Shared watches (`terminate.shared_watches`): identical watches of one sender fed from one
//! upstream watch. A watch from a resourceVersion (`key::feedable`: an informer's, after its
//! list) whose key matches a feed kubegate holds is not sent: it gets the feed's events after
//! its position — from the feed's window of recent events, then live — with its own
//! `timeoutSeconds` and bookmarks. The feed itself is a watch kubegate follows across replicas
//! (`watch::continuity`), opened by the first such watch from that one's position.
//!
//! Each client has a task of its own between the feed and its stream: a client that falls
//! more than `max_lag_events` behind is cut alone (its stream ends cleanly, and it watches
//! again from its last position — from the window, if it is still there), as the apiserver's
//! cacher ends a watcher too slow for it; it never slows the feed or the others.
//!
//! A herd's informers list from different replicas, whose watch caches stand at different
//! positions (each moves with every change the replica has seen, a lease's renewal too), so
//! identical watches start from a few different positions. A feed serves every position at or
//! after its own: a watch older than every feed of its key opens another, up to
//! [`MAX_FEEDS_PER_KEY`], and the newest feed that can serve a watch feeds it (so that, as
//! watches end and are asked again from newer positions, the older feeds empty and end).
//! Beyond that bound, a watch whose position is older than the windows gets a watch of its
//! own, as does every watch while the feed it waits on is being opened and fails to open.
//!
//! A feed ends when its upstream watch ends (its time is up, an ERROR, a position no replica
//! can serve): each client's stream ends cleanly with it, and the clients watch again from
//! their positions, which a new feed serves. A feed nobody has read for [`LINGER`] ends too,
//! and one whose last client left while [`MAX_LINGERING`] others linger ends at once.

use crate::telemetry::JoinMetrics;
use crate::terminate::exchange::body::{ResponseBody, WatchBody};
use crate::terminate::join::key::{keep_crossing, JoinKey, SenderKey};
use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use kubegate_wire::framing::{Decoder, Framing, Kind};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, watch};

/// How long a feed nobody reads stays open, for clients that come back (a watch ended by its
/// `timeoutSeconds` is asked again at once).
pub const LINGER: Duration = Duration::from_secs(10);
/// Feeds of one cluster that stay open with no client, at most: beyond, a feed ends when its
/// last client leaves, so that watches opened and closed at once cannot make kubegate hold
/// upstream watches no client reads.
pub const MAX_LINGERING: usize = 64;
/// Feeds of one key open at once, at most: a watch older than each of them gets a watch of
/// its own beyond this (a herd's positions are the replicas' few cache positions; a client
/// asking ever older positions must not open upstream watches without bound).
pub const MAX_FEEDS_PER_KEY: usize = 4;
/// Events waiting in one client's stream.
const CLIENT_QUEUE: usize = 16;
/// How often a client whose stream is full is checked for falling too far behind.
const LAG_CHECK: Duration = Duration::from_millis(50);

/// One cluster's shared watches, by key (a few per key, from different positions).
pub struct Feeds {
    feeds: Mutex<HashMap<JoinKey, Vec<Slot>>>,
    next_id: AtomicU64,
    /// Event bytes every cluster's windows keep.
    held: Arc<AtomicU64>,
    /// Feeds open with no client now (at most [`MAX_LINGERING`]).
    lingering: AtomicUsize,
}

/// A key's feed, open or being opened.
struct Slot {
    id: u64,
    /// The position its upstream watch is asked from: it serves watches at or after it.
    from: u64,
    state: watch::Receiver<Opening>,
    /// Who opened it, when its key leaves the identity out.
    sender: Option<SenderKey>,
}

/// A feed's opening, as those waiting on it see it.
#[derive(Clone)]
enum Opening {
    /// Its upstream watch is on its way.
    Pending,
    /// It is open.
    Open(Arc<Feed>),
    /// It did not open, or it ended.
    Closed,
}

/// What entering a watch gave.
pub enum Entered {
    /// A feed for it is open, or opened meanwhile: its client's response, or `None` when the
    /// feed cannot serve its position (it gets a watch of its own).
    Fed(Option<Box<Response<ResponseBody>>>),
    /// No feed: this watch opens one.
    Opens(Opener),
    /// A feed is there, but whether this watch's sender may watch the same now is not known
    /// (another sender opened it, or its own sender longer ago than `SentBy::within`): a
    /// review first (then it is entered again as reviewed).
    Unreviewed,
}

/// Who sends a watch entered: its sender (when its key leaves the identity out), whether a
/// review allowed that sender what the watch asks, when the watch arrived, and how long before
/// that the apiserver may have authorized a feed of its own sender for it to be fed without a
/// review (`access_review.ttl`).
#[derive(Debug, Clone, Copy)]
pub struct SentBy<'a> {
    /// The sender, or `None` when the key holds the identity.
    pub sender: Option<&'a SenderKey>,
    /// A SubjectAccessReview allowed it.
    pub reviewed: bool,
    /// When it arrived.
    pub arrived: Instant,
    /// How long before its arrival a feed of its own sender may have opened.
    pub within: Duration,
}

/// The watch that opens a feed, until it has.
pub struct Opener {
    feeds: Arc<Feeds>,
    key: JoinKey,
    id: u64,
    state: watch::Sender<Opening>,
}

/// One upstream watch feeding many clients.
pub struct Feed {
    feeds: Weak<Feeds>,
    key: JoinKey,
    id: u64,
    /// The upstream answer's status and headers, each client's too.
    head: (StatusCode, HeaderMap),
    /// When its upstream watch was answered: the apiserver authorized its opener then.
    opened_at: Instant,
    /// Recent events, the position before the oldest, and the channel live events go out on.
    window: Mutex<Window>,
    clients: AtomicUsize,
    /// Its last client left.
    emptied: tokio::sync::Notify,
    limits: FeedLimits,
}

/// The bounds of one feed.
#[derive(Debug, Clone, Copy)]
pub struct FeedLimits {
    /// Events kept for clients that join later.
    pub window_events: usize,
    /// Bytes of those events.
    pub window_bytes: usize,
    /// Events a client may fall behind before it is cut.
    pub max_lag_events: usize,
    /// Event bytes every feed together holds (windows, and channels for clients behind):
    /// beyond, a window keeps only its newest event, and no new feed opens.
    pub held_bytes_in_total: u64,
}

/// The events a feed keeps.
struct Window {
    /// The position of the oldest event kept's predecessor: a client at or after it can be
    /// served from here.
    from: u64,
    events: VecDeque<Arc<Fed>>,
    bytes: usize,
    /// Where live events go out; `None` once the feed has ended (its clients' streams end).
    live: Option<broadcast::Sender<Arc<Fed>>>,
    /// Where its events' bytes are counted, with every feed's.
    held: Arc<AtomicU64>,
    gauge: prometheus::IntGauge,
}

/// One event of a feed.
struct Fed {
    bytes: Bytes,
    kind: Kind,
    /// Its resourceVersion (the position before it, for an event without one).
    position: u64,
    /// When the feed received it.
    at: Instant,
    /// Its bytes, counted with every event the feeds hold until the last copy goes: in a
    /// window, or still in a feed's channel for a client behind.
    _charge: Charge,
}

/// Bytes counted in a total and its gauge while this lives.
struct Charge {
    n: u64,
    held: Arc<AtomicU64>,
    gauge: prometheus::IntGauge,
}

impl Charge {
    fn new(n: usize, held: &Arc<AtomicU64>, gauge: &prometheus::IntGauge) -> Charge {
        let n = n as u64;
        held.fetch_add(n, Ordering::AcqRel);
        gauge.add(n as i64);
        Charge {
            n,
            held: held.clone(),
            gauge: gauge.clone(),
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.held.fetch_sub(self.n, Ordering::AcqRel);
        self.gauge.sub(self.n as i64);
    }
}

/// A client of a feed: where it starts, whether it hears bookmarks, when its watch ends, and
/// what ends it early.
pub struct Client {
    /// Its `resourceVersion`.
    pub from: u64,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// When its watch ends.
    pub ends: Option<Instant>,
    /// Completes when the client's credentials are refused (its bearer token answered 401):
    /// its stream ends then, and its next watch is the apiserver's to authorize.
    pub revoked: Option<Revoked>,
}

/// Makes the future that completes when a fed client's credentials are refused.
pub type Revoked = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

impl Feeds {
    /// No feed yet; windows' bytes counted in `held`, with every other cluster's.
    pub fn new(held: Arc<AtomicU64>) -> Feeds {
        Feeds {
            feeds: Mutex::default(),
            next_id: AtomicU64::new(0),
            held,
            lingering: AtomicUsize::new(0),
        }
    }

    /// Enters a watch of `key` for `client`: fed from the newest of the key's feeds that can
    /// serve its position, or the one to open a feed from it with `limits` (none while the
    /// feeds hold `held_bytes_in_total`, or the key has [`MAX_FEEDS_PER_KEY`]: a watch of its
    /// own). Waits while that feed is being opened. A feed another sender opened feeds it only
    /// when `by.reviewed`; otherwise it is [`Entered::Unreviewed`].
    pub async fn enter(
        self: &Arc<Self>,
        (key, limits): (&JoinKey, &FeedLimits),
        by: SentBy<'_>,
        client: &Client,
        metrics: &JoinMetrics,
    ) -> Entered {
        let (mut state, across) = {
            let mut feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
            let slots = feeds.get(key).map_or(&[][..], Vec::as_slice);
            let serving = slots
                .iter()
                .filter(|s| s.from <= client.from)
                .max_by_key(|s| s.from);
            match serving {
                Some(slot) if slot.sender.as_ref() != by.sender && !by.reviewed => {
                    return Entered::Unreviewed;
                }
                Some(slot) => (slot.state.clone(), slot.sender.as_ref() != by.sender),
                // The feeds hold all they may: no new one (its channel would hold more).
                None if self.held.load(Ordering::Acquire) >= limits.held_bytes_in_total => {
                    return Entered::Fed(None);
                }
                None if slots.len() >= MAX_FEEDS_PER_KEY => return Entered::Fed(None),
                None => {
                    let (tx, rx) = watch::channel(Opening::Pending);
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let sender = by.sender.cloned();
                    feeds.entry(key.clone()).or_default().push(Slot {
                        id,
                        from: client.from,
                        state: rx,
                        sender,
                    });
                    return Entered::Opens(Opener {
                        feeds: self.clone(),
                        key: key.clone(),
                        id,
                        state: tx,
                    });
                }
            }
        };
        let opened = state
            .wait_for(|s| !matches!(s, Opening::Pending))
            .await
            .map(|s| s.clone());
        match opened {
            // The apiserver authorized the feed's opener of the same sender too long before
            // this watch arrived: a review first.
            Ok(Opening::Open(feed))
                if !across
                    && !by.reviewed
                    && by.arrived.saturating_duration_since(feed.opened_at) > by.within =>
            {
                Entered::Unreviewed
            }
            Ok(Opening::Open(feed)) => {
                let mut resp = feed.subscribe(client, metrics);
                if let Some(resp) = resp.as_mut().filter(|_| across) {
                    keep_crossing(resp.headers_mut());
                }
                Entered::Fed(resp.map(Box::new))
            }
            _ => Entered::Fed(None),
        }
    }

    /// Forgets feed `id` of `key` (it ended, or did not open).
    fn close(&self, key: &JoinKey, id: u64) {
        let mut feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slots) = feeds.get_mut(key) {
            slots.retain(|s| s.id != id);
            if slots.is_empty() {
                feeds.remove(key);
            }
        }
    }
}

impl Opener {
    /// Opens the feed from the answer to its upstream watch, asked from `from` with bookmarks:
    /// `resp`, a watch kubegate follows (`ResponseBody::Watch`) in `framing`. Its own client
    /// (`client`) is its first; its response is what that client gets — `resp` itself when
    /// the watch did not open (a 410, a 403: the client gets the apiserver's answer, and those
    /// waiting get watches of their own).
    pub fn open(
        self,
        resp: Response<ResponseBody>,
        framing: Option<Framing>,
        (from, limits): (u64, FeedLimits),
        client: &Client,
        metrics: &JoinMetrics,
    ) -> Response<ResponseBody> {
        let (parts, body) = resp.into_parts();
        let (events, framing) = match (parts.status, body, framing) {
            (StatusCode::OK, ResponseBody::Watch(events), Some(framing)) => (events, framing),
            (_, body, _) => return Response::from_parts(parts, body),
        };
        let feed = Arc::new(Feed {
            feeds: Arc::downgrade(&self.feeds),
            key: self.key.clone(),
            id: self.id,
            head: (parts.status, parts.headers.clone()),
            opened_at: Instant::now(),
            window: Mutex::new(Window {
                from,
                events: VecDeque::new(),
                bytes: 0,
                live: Some(broadcast::channel(limits.max_lag_events).0),
                held: self.feeds.held.clone(),
                gauge: metrics.watch_held_bytes.clone(),
            }),
            clients: AtomicUsize::new(0),
            emptied: tokio::sync::Notify::new(),
            limits,
        });
        let first = feed.subscribe(client, metrics);
        metrics.watch_feeds.inc();
        let (fed, m) = (feed.clone(), metrics.clone());
        tokio::spawn(async move {
            fed.run(events, framing).await;
            m.watch_feeds.dec();
        });
        let _ = self.state.send(Opening::Open(feed));
        // The first client is always served: the window starts at its own position.
        first.unwrap_or_else(|| Response::from_parts(parts, ResponseBody::empty()))
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        if matches!(*self.state.borrow(), Opening::Pending) {
            // It did not open (or its client went away first): those waiting go on alone.
            let _ = self.state.send(Opening::Closed);
            self.feeds.close(&self.key, self.id);
        }
    }
}

impl Feed {
    /// Reads the upstream watch's events into the window and to every client, until it ends
    /// or nobody has read it for [`LINGER`].
    async fn run(self: Arc<Self>, events: WatchBody, framing: Framing) {
        let mut events = events.into_receiver();
        let mut decoder = Decoder::new(framing);
        // Since when it has had no client, while it counts among the cluster's lingering feeds.
        let mut idle_since: Option<Instant> = None;
        let mut linger = tokio::time::interval(LINGER / 4);
        let feeds = self.feeds.upgrade();
        let release = |idle_since: &mut Option<Instant>| {
            if idle_since.take().is_some() {
                if let Some(f) = &feeds {
                    f.lingering.fetch_sub(1, Ordering::AcqRel);
                }
            }
        };
        loop {
            let bytes = tokio::select! {
                next = events.recv() => match next {
                    Some(bytes) => bytes,
                    None => break,
                },
                _ = self.emptied.notified() => {
                    if self.clients.load(Ordering::Acquire) == 0 && idle_since.is_none() {
                        let Some(f) = &feeds else { break };
                        if f.lingering.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
                            f.lingering.fetch_sub(1, Ordering::AcqRel);
                            break;
                        }
                        idle_since = Some(Instant::now());
                    }
                    continue;
                }
                _ = linger.tick() => {
                    if self.clients.load(Ordering::Acquire) > 0 {
                        release(&mut idle_since);
                    } else if idle_since.is_some_and(|t| t.elapsed() >= LINGER) {
                        break;
                    }
                    continue;
                }
            };
            // Continuity forwards one whole event at a time.
            decoder.push(&bytes);
            let Ok(Some(event)) = decoder.next_event() else {
                tracing::debug!("a shared watch's event could not be read: the feed ends");
                break;
            };
            let ended = event.kind == Kind::Error;
            let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
            let last = window.events.back().map_or(window.from, |e| e.position);
            let position = event
                .resource_version
                .as_deref()
                .and_then(|rv| rv.parse::<u64>().ok())
                .unwrap_or(last);
            let fed = Arc::new(Fed {
                _charge: Charge::new(bytes.len(), &window.held, &window.gauge),
                bytes,
                kind: event.kind,
                position,
                at: Instant::now(),
            });
            window.keep(fed.clone(), &self.limits);
            // Under the window's lock: a client subscribing now gets it from the window or
            // from the channel, never both, never neither.
            if let Some(live) = &window.live {
                let _ = live.send(fed);
            }
            drop(window);
            if ended {
                break;
            }
        }
        // The clients' streams end as the channel closes behind them; dropping the upstream
        // watch's events (the receiver) ends it.
        self.window.lock().unwrap_or_else(|e| e.into_inner()).live = None;
        release(&mut idle_since);
        if let Some(feeds) = feeds {
            feeds.close(&self.key, self.id);
        }
    }

    /// Feeds `client` from here: its response, or `None` when its position is before the
    /// window (or the feed has ended).
    fn subscribe(
        self: &Arc<Self>,
        client: &Client,
        metrics: &JoinMetrics,
    ) -> Option<Response<ResponseBody>> {
        let (backlog, live) = {
            let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
            let live = window.live.as_ref()?;
            if client.from < window.from {
                return None;
            }
            let backlog: Vec<Arc<Fed>> = window
                .events
                .iter()
                .filter(|e| e.position > client.from || e.kind == Kind::Error)
                .cloned()
                .collect();
            (backlog, live.subscribe())
        };
        self.clients.fetch_add(1, Ordering::AcqRel);
        metrics.fed_watches.inc();
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
        let (feed, m) = (self.clone(), metrics.clone());
        let (from, bookmarks, ends) = (client.from, client.bookmarks, client.ends);
        let max_lag = self.limits.max_lag_events;
        let revoked = client.revoked.as_ref().map(|r| r());
        tokio::spawn(async move {
            let feeding = feed_client(backlog, live, tx, (from, bookmarks, ends, max_lag), &m);
            match revoked {
                Some(revoked) => {
                    tokio::select! {
                        () = feeding => {}
                        () = revoked => m.fed_watch_revoked(),
                    }
                }
                None => feeding.await,
            }
            if feed.clients.fetch_sub(1, Ordering::AcqRel) == 1 {
                feed.emptied.notify_one();
            }
            m.fed_watches.dec();
        });
        let mut resp = Response::new(ResponseBody::Watch(WatchBody::new(rx)));
        *resp.status_mut() = self.head.0;
        *resp.headers_mut() = self.head.1.clone();
        Some(resp)
    }
}

impl Window {
    /// Keeps `fed`, forgetting the oldest events beyond `limits`: its own, and what every
    /// feed holds together.
    fn keep(&mut self, fed: Arc<Fed>, limits: &FeedLimits) {
        self.bytes += fed.bytes.len();
        self.events.push_back(fed);
        while self.events.len() > limits.window_events
            || (self.events.len() > 1
                && (self.bytes > limits.window_bytes
                    || self.held.load(Ordering::Acquire) > limits.held_bytes_in_total))
        {
            let Some(old) = self.events.pop_front() else {
                break;
            };
            self.bytes -= old.bytes.len();
            self.from = old.position;
        }
    }
}

/// One client's stream: `backlog`, then `live` events, until its watch's end, the feed's, or
/// the client falling too far behind.
async fn feed_client(
    backlog: Vec<Arc<Fed>>,
    mut live: broadcast::Receiver<Arc<Fed>>,
    tx: mpsc::Sender<Bytes>,
    (from, bookmarks, ends, max_lag): (u64, bool, Option<Instant>, usize),
    metrics: &JoinMetrics,
) {
    // A client can be ahead of the feed (it listed after the feed's first client): what it
    // already has is not sent again.
    let deliver = |fed: &Fed| {
        (fed.position > from || fed.kind == Kind::Error)
            && (bookmarks || fed.kind != Kind::Bookmark)
    };
    let until = ends.map(tokio::time::Instant::from_std);
    let timeout = async {
        match until {
            Some(t) => tokio::time::sleep_until(t).await,
            None => std::future::pending().await,
        }
    };
    let stream = async {
        for fed in backlog.iter().filter(|f| deliver(f)) {
            if tx.send(fed.bytes.clone()).await.is_err() {
                return;
            }
        }
        loop {
            let fed = match live.recv().await {
                Ok(fed) => fed,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Too slow for the feed: cut alone, as the apiserver's cacher cuts it.
                    metrics.fed_watch_cut();
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if !deliver(&fed) {
                continue;
            }
            // A client not reading holds this task here: it is cut once the feed is
            // `max_lag_events` ahead of it, not only when it next reads.
            let permit = loop {
                tokio::select! {
                    permit = tx.reserve() => break permit,
                    _ = tokio::time::sleep(LAG_CHECK) => {
                        if live.len() >= max_lag {
                            metrics.fed_watch_cut();
                            return;
                        }
                    }
                }
            };
            let Ok(permit) = permit else {
                return;
            };
            metrics.observe_fed_lag(fed.at.elapsed());
            permit.send(fed.bytes.clone());
            if fed.kind == Kind::Error {
                return;
            }
        }
    };
    tokio::select! {
        _ = stream => {}
        _ = timeout => {}
        // The client went away: noticed now, not at the next event (a quiet watch may not
        // hear one for minutes).
        _ = tx.closed() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Kind as ConnectionKind;
    use http::{Method, Uri};
    use http_body_util::BodyExt;

    /// An upstream JSON watch's answer, and where its events are sent (`capacity` at once).
    fn json_watch(capacity: usize) -> (mpsc::Sender<Bytes>, Response<ResponseBody>) {
        let (tx, rx) = mpsc::channel(capacity);
        let mut upstream = Response::new(ResponseBody::Watch(WatchBody::new(rx)));
        upstream
            .headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        (tx, upstream)
    }

    fn key() -> JoinKey {
        key_n(0)
    }

    /// The key of a watch of Services with label `n`.
    fn key_n(n: usize) -> JoinKey {
        let uri: Uri = format!("https://kube/api/v1/services?watch=1&labelSelector=n%3D{n}")
            .parse()
            .unwrap();
        crate::terminate::join::key::key_of(
            ConnectionKind::Anonymous,
            &Method::GET,
            &uri,
            &HeaderMap::new(),
        )
    }

    fn change(rv: u64) -> Bytes {
        Bytes::from(format!(
            "{{\"type\":\"MODIFIED\",\"object\":{{\"kind\":\"Service\",\"metadata\":{{\"name\":\"s\",\"resourceVersion\":\"{rv}\"}}}}}}\n"
        ))
    }

    fn bookmark(rv: u64) -> Bytes {
        Bytes::from(format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"Service\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}}}}}}\n"
        ))
    }

    const LIMITS: FeedLimits = FeedLimits {
        window_events: 4,
        window_bytes: 1 << 20,
        max_lag_events: 8,
        held_bytes_in_total: 1 << 30,
    };

    fn client(from: u64, bookmarks: bool) -> Client {
        Client {
            from,
            bookmarks,
            ends: None,
            revoked: None,
        }
    }

    /// A watch of the sender whose identity is in the key, arriving now, fed without a review
    /// from a feed that opened in the last 10 s.
    fn sent_by() -> SentBy<'static> {
        SentBy {
            sender: None,
            reviewed: false,
            arrived: Instant::now(),
            within: Duration::from_secs(10),
        }
    }

    /// A feed of `key()` opened from `first`'s position by `first`; its upstream events'
    /// sender.
    async fn opened(
        feeds: &Arc<Feeds>,
        first: &Client,
        m: &JoinMetrics,
    ) -> (mpsc::Sender<Bytes>, Response<ResponseBody>) {
        opened_with(feeds, first, m, LIMITS).await
    }

    async fn opened_with(
        feeds: &Arc<Feeds>,
        first: &Client,
        m: &JoinMetrics,
        limits: FeedLimits,
    ) -> (mpsc::Sender<Bytes>, Response<ResponseBody>) {
        opened_as(feeds, &key(), first, m, limits).await
    }

    async fn opened_as(
        feeds: &Arc<Feeds>,
        key: &JoinKey,
        first: &Client,
        m: &JoinMetrics,
        limits: FeedLimits,
    ) -> (mpsc::Sender<Bytes>, Response<ResponseBody>) {
        let Entered::Opens(opener) = feeds.enter((key, &limits), sent_by(), first, m).await else {
            panic!("the first watch opens the feed");
        };
        let (tx, upstream) = json_watch(64);
        let resp = opener.open(
            upstream,
            Some(Framing::JsonLines),
            (first.from, limits),
            first,
            m,
        );
        (tx, resp)
    }

    async fn fed(
        feeds: &Arc<Feeds>,
        c: &Client,
        m: &JoinMetrics,
    ) -> Option<Response<ResponseBody>> {
        match feeds.enter((&key(), &LIMITS), sent_by(), c, m).await {
            Entered::Fed(resp) => resp.map(|r| *r),
            _ => panic!("a feed is open"),
        }
    }

    /// The next `n` events of `resp`'s stream.
    async fn next(resp: &mut Response<ResponseBody>, n: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        while out.len() < n {
            let frame = tokio::time::timeout(Duration::from_secs(10), resp.body_mut().frame())
                .await
                .expect("an event in time")
                .expect("the stream goes on")
                .unwrap();
            out.push(frame.into_data().unwrap());
        }
        out
    }

    /// Waits (10 s at most) for `done`.
    async fn wait_until(done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "not in time");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn ended(resp: &mut Response<ResponseBody>) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(10), resp.body_mut().frame()).await,
            Ok(None)
        )
    }

    /// Feeds of a cluster, none yet, and their metrics.
    fn feeds() -> (Arc<Feeds>, JoinMetrics) {
        (
            Arc::new(Feeds::new(Arc::default())),
            JoinMetrics::new(&prometheus::Registry::new()),
        )
    }

    #[tokio::test]
    async fn clients_get_the_events_after_their_position_from_the_window_then_live() {
        let (feeds, m) = feeds();
        let first = client(10, false);
        let (up, mut a) = opened(&feeds, &first, &m).await;
        up.send(change(11)).await.unwrap();
        up.send(bookmark(12)).await.unwrap();
        up.send(change(13)).await.unwrap();
        assert_eq!(
            next(&mut a, 2).await,
            [change(11), change(13)],
            "no bookmark it did not ask for"
        );
        // Joining at 11, with bookmarks: 12 and 13 from the window, then 14 live.
        let mut b = fed(&feeds, &client(11, true), &m).await.unwrap();
        up.send(change(14)).await.unwrap();
        assert_eq!(
            next(&mut b, 3).await,
            [bookmark(12), change(13), change(14)]
        );
        assert_eq!(next(&mut a, 1).await, [change(14)]);
        assert_eq!(m.fed_watches.get(), 2);
        // The window keeps 4 events: 11 is gone, so a client at 10 gets a watch of its own.
        up.send(change(15)).await.unwrap();
        next(&mut a, 1).await;
        next(&mut b, 1).await;
        assert!(fed(&feeds, &client(10, false), &m).await.is_none());
        assert!(fed(&feeds, &client(11, false), &m).await.is_some());
        // The upstream watch ends: so does every client's stream, and the feed.
        drop(up);
        assert!(ended(&mut a).await && ended(&mut b).await);
        wait_until(|| m.watch_feeds.get() == 0).await;
        assert!(matches!(
            feeds.enter((&key(), &LIMITS), sent_by(), &first, &m).await,
            Entered::Opens(_)
        ));
    }

    #[tokio::test]
    async fn a_watch_older_than_every_feed_opens_another_up_to_the_bound() {
        let (feeds, m) = feeds();
        // Informers that listed from replicas at different positions.
        let (newer, mut at_20) = opened(&feeds, &client(20, false), &m).await;
        let (older, mut at_10) = opened(&feeds, &client(10, false), &m).await;
        // A watch at 25 is fed by the newest feed that serves it, one at 15 by the older.
        let mut at_25 = fed(&feeds, &client(25, false), &m).await.unwrap();
        let mut at_15 = fed(&feeds, &client(15, false), &m).await.unwrap();
        newer.send(change(26)).await.unwrap();
        older.send(change(16)).await.unwrap();
        assert_eq!(next(&mut at_25, 1).await, [change(26)]);
        assert_eq!(next(&mut at_20, 1).await, [change(26)]);
        assert_eq!(next(&mut at_15, 1).await, [change(16)]);
        assert_eq!(next(&mut at_10, 1).await, [change(16)]);
        // Older still: two more feeds (being opened), then no more.
        let mut openers = Vec::new();
        for from in [5, 3] {
            match feeds
                .enter((&key(), &LIMITS), sent_by(), &client(from, false), &m)
                .await
            {
                Entered::Opens(opener) => openers.push(opener),
                _ => panic!("a watch older than every feed opens one"),
            }
        }
        assert!(fed(&feeds, &client(1, false), &m).await.is_none());
        // A feed ends: room for another.
        drop(older);
        assert!(ended(&mut at_10).await && ended(&mut at_15).await);
        wait_until(|| {
            feeds.feeds.lock().unwrap().get(&key()).map(Vec::len) == Some(MAX_FEEDS_PER_KEY - 1)
        })
        .await;
        assert!(matches!(
            feeds
                .enter((&key(), &LIMITS), sent_by(), &client(1, false), &m)
                .await,
            Entered::Opens(_)
        ));
    }

    #[tokio::test]
    async fn a_feed_of_another_sender_feeds_a_watch_only_once_reviewed() {
        let (feeds, m) = feeds();
        let sender = |token: &str| {
            let uri: Uri = "https://kube/api/v1/services?watch=1&resourceVersion=10"
                .parse()
                .unwrap();
            let h = crate::terminate::join::key::bearer(token);
            let ids = kubegate_wire::identity::IdentityHeaders::default();
            let q = uri.query().map(str::to_string);
            let fed =
                crate::terminate::join::key::feedable(&crate::terminate::join::key::WatchHead {
                    kind: ConnectionKind::BearerToken,
                    method: &Method::GET,
                    uri: &uri,
                    client_query: q.as_deref(),
                    headers: &h,
                    across: Some(&ids),
                })
                .unwrap();
            (fed.key, fed.sender.unwrap())
        };
        let ((key_a, a), (key_b, b)) = (sender("a"), sender("b"));
        assert_eq!(key_a, key_b, "the key leaves the sender out");
        let by = |sender, reviewed| SentBy {
            sender: Some(sender),
            reviewed,
            ..sent_by()
        };
        let first = client(10, false);
        let Entered::Opens(opener) = feeds
            .enter((&key_a, &LIMITS), by(&a, false), &first, &m)
            .await
        else {
            panic!("the first watch opens the feed");
        };
        let (_up, upstream) = json_watch(8);
        let _own = opener.open(upstream, Some(Framing::JsonLines), (10, LIMITS), &first, &m);
        let c = client(10, false);
        assert!(matches!(
            feeds.enter((&key_b, &LIMITS), by(&b, false), &c, &m).await,
            Entered::Unreviewed
        ));
        assert!(matches!(
            feeds.enter((&key_b, &LIMITS), by(&b, true), &c, &m).await,
            Entered::Fed(Some(_))
        ));
        // Its own sender needs no review, while the feed's authorization is fresh.
        assert!(matches!(
            feeds.enter((&key_a, &LIMITS), by(&a, false), &c, &m).await,
            Entered::Fed(Some(_))
        ));
        // Later than `within` after the feed opened, its own sender is reviewed too.
        let late = SentBy {
            arrived: Instant::now() + Duration::from_secs(11),
            ..by(&a, false)
        };
        assert!(matches!(
            feeds.enter((&key_a, &LIMITS), late, &c, &m).await,
            Entered::Unreviewed
        ));
        let late_reviewed = SentBy {
            reviewed: true,
            ..late
        };
        let Entered::Fed(Some(resp)) = feeds.enter((&key_a, &LIMITS), late_reviewed, &c, &m).await
        else {
            panic!("a reviewed watch is fed");
        };
        assert_eq!(resp.headers()["content-type"], "application/json");
    }

    #[tokio::test]
    async fn a_fed_client_whose_credentials_are_refused_leaves_the_feed_at_once() {
        let (feeds, m) = feeds();
        let (up, mut first) = opened(&feeds, &client(10, false), &m).await;
        let (refuse, refused) = tokio::sync::watch::channel(false);
        let revoked: Revoked = Arc::new(move || {
            let mut refused = refused.clone();
            Box::pin(async move {
                let _ = refused.wait_for(|r| *r).await;
            })
        });
        let mut twin = Client {
            revoked: Some(revoked),
            ..client(10, false)
        };
        twin.bookmarks = false;
        let mut fed_twin = fed(&feeds, &twin, &m).await.unwrap();
        up.send(change(11)).await.unwrap();
        assert_eq!(next(&mut fed_twin, 1).await, [change(11)]);
        refuse.send(true).unwrap();
        let end = tokio::time::timeout(Duration::from_secs(10), fed_twin.body_mut().frame())
            .await
            .expect("the stream ends in time");
        assert!(end.is_none(), "its stream ends cleanly");
        assert_eq!(m.fed_watches_revoked.get(), 1);
        // The others go on.
        up.send(change(12)).await.unwrap();
        assert_eq!(next(&mut first, 2).await, [change(11), change(12)]);
    }

    #[tokio::test]
    async fn a_client_ahead_of_the_feed_hears_only_what_follows_its_position() {
        let (feeds, m) = feeds();
        let (up, mut a) = opened(&feeds, &client(10, false), &m).await;
        // It listed at 12: 11 and 12 are in its list already.
        let mut ahead = fed(&feeds, &client(12, false), &m).await.unwrap();
        for rv in 11..=13 {
            up.send(change(rv)).await.unwrap();
        }
        assert_eq!(next(&mut a, 3).await.len(), 3);
        assert_eq!(next(&mut ahead, 1).await, [change(13)]);
    }

    #[tokio::test]
    async fn a_client_too_slow_for_the_feed_is_cut_alone() {
        let (feeds, m) = feeds();
        let (up, mut reader) = opened(&feeds, &client(10, false), &m).await;
        let slow = fed(&feeds, &client(10, false), &m).await.unwrap();
        // `slow` reads nothing: its stream holds 16, the channel 8 more, then it is cut.
        for rv in 11..=60 {
            up.send(change(rv)).await.unwrap();
            assert_eq!(next(&mut reader, 1).await, [change(rv)]);
        }
        wait_until(|| m.fed_watches.get() == 1).await;
        drop(slow);
        up.send(change(61)).await.unwrap();
        assert_eq!(next(&mut reader, 1).await, [change(61)], "the others go on");
    }

    #[tokio::test]
    async fn a_watch_that_does_not_open_leaves_those_waiting_to_go_alone() {
        let (feeds, m) = feeds();
        let first = client(10, false);
        let Entered::Opens(opener) = feeds.enter((&key(), &LIMITS), sent_by(), &first, &m).await
        else {
            panic!("the first watch opens the feed");
        };
        let waiting = {
            let feeds = feeds.clone();
            let m = m.clone();
            tokio::spawn(async move { fed(&feeds, &client(10, false), &m).await.is_none() })
        };
        // One thread: the spawned watch runs to its wait on the opening before this goes on.
        tokio::task::yield_now().await;
        let mut gone = Response::new(ResponseBody::full("expired"));
        *gone.status_mut() = StatusCode::GONE;
        let resp = opener.open(gone, None, (10, LIMITS), &first, &m);
        assert_eq!(
            resp.status(),
            StatusCode::GONE,
            "its client gets the apiserver's answer"
        );
        assert!(waiting.await.unwrap(), "the waiting watch goes alone");
        assert!(matches!(
            feeds.enter((&key(), &LIMITS), sent_by(), &first, &m).await,
            Entered::Opens(_)
        ));
    }

    #[tokio::test]
    async fn the_feeds_together_hold_at_most_their_total() {
        let held = Arc::new(AtomicU64::new(0));
        let feeds = Arc::new(Feeds::new(held.clone()));
        let m = JoinMetrics::new(&prometheus::Registry::new());
        let one = change(11).len() as u64;
        let limits = FeedLimits {
            held_bytes_in_total: 2 * one,
            ..LIMITS
        };
        let (up, mut a) = opened_with(&feeds, &client(10, false), &m, limits).await;
        for rv in 11..=14 {
            up.send(change(rv)).await.unwrap();
        }
        assert_eq!(
            next(&mut a, 4).await.len(),
            4,
            "its clients hear every event"
        );
        let now = held.load(Ordering::Acquire);
        assert!((one..=2 * one).contains(&now), "{now}");
        // Once the feeds hold all they may (here, as much as they hold now), a watch of another
        // kind gets a watch of its own: a new feed's channel would hold more.
        let full = FeedLimits {
            held_bytes_in_total: now,
            ..limits
        };
        assert!(matches!(
            feeds
                .enter((&key_n(1), &full), sent_by(), &client(10, false), &m)
                .await,
            Entered::Fed(None)
        ));
        assert_eq!(
            m.watch_held_bytes.get() as u64,
            held.load(Ordering::Acquire)
        );
        // The oldest are gone: a client from before them gets a watch of its own.
        assert!(fed(&feeds, &client(11, false), &m).await.is_none());
        assert!(fed(&feeds, &client(13, false), &m).await.is_some());
        drop(up);
        assert!(ended(&mut a).await);
        wait_until(|| held.load(Ordering::Acquire) == 0 && m.watch_held_bytes.get() == 0).await;
    }

    #[tokio::test]
    async fn feeds_nobody_reads_linger_only_up_to_their_bound() {
        let (feeds, m) = feeds();
        let mut upstreams = Vec::new();
        for n in 0..=MAX_LINGERING {
            let (up, client) = opened_as(&feeds, &key_n(n), &client(10, false), &m, LIMITS).await;
            // Its only client goes away at once.
            drop(client);
            upstreams.push(up);
        }
        // The first MAX_LINGERING stay for their clients' return; the one beyond ends, and its
        // upstream watch with it.
        let last = upstreams.pop().unwrap();
        tokio::time::timeout(Duration::from_secs(10), last.closed())
            .await
            .expect("the feed beyond the bound ends");
        wait_until(|| m.watch_feeds.get() == MAX_LINGERING as i64).await;
        assert!(upstreams.iter().all(|up| !up.is_closed()));
        // A client back for a lingering feed is fed from it.
        assert!(matches!(
            feeds
                .enter((&key_n(0), &LIMITS), sent_by(), &client(10, false), &m)
                .await,
            Entered::Fed(Some(_))
        ));
    }
}
