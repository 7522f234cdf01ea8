//! Terminate mode's per-backend state: its HTTP/2 connections, the requests in flight on it, and
//! how the pool's orders are carried out. A request holds its place here through terminate
//! mode's `InFlight`.
//!
//! - Requests share connections up to `upstream.max_streams_per_connection` streams each; a
//!   request that finds every connection full opens another (the apiserver allows 100 streams
//!   per connection by default).
//! - Three kinds of connection: with kubegate's front-proxy certificate (requests carrying
//!   `X-Remote-*`), and without any, one kind for bearer tokens and one for anonymous requests.
//!   An apiserver sends GOAWAY after every 401 and every anonymous request on HTTP/2
//!   (`UnauthenticatedHTTP2DOSMitigation`): kept apart, those goodbyes only cost the
//!   connections of their own kind.
//! - Drain: connections leave the pool (no new streams); each closes, with GOAWAY, once its
//!   streams are done. Close: every connection task is aborted, which ends every stream on it
//!   at once (a watch then ends cleanly, other requests see a reset), and upgraded connections
//!   end.

use bytes::Bytes;
use h2::client::SendRequest;
use prometheus::IntGauge;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::AbortHandle;

/// Which requests an upstream connection carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Requests carrying `X-Remote-*`, over kubegate's front-proxy certificate.
    WithIdentity = 0,
    /// Requests carrying a bearer token; no client certificate.
    BearerToken = 1,
    /// Requests carrying no credentials; no client certificate.
    Anonymous = 2,
}

/// How many kinds there are.
const KINDS: usize = 3;

/// Ends an upstream connection from kubegate's side: shuts its TCP socket down (a duplicate
/// of its descriptor), so that the task driving the connection sees it end, and every stream
/// on it with it.
pub struct Killer {
    socket: std::net::TcpStream,
    /// Finishes when the connection has ended by itself.
    task: AbortHandle,
}

impl Killer {
    /// `socket` is a duplicate of the connection's; `task` ends with the connection.
    pub fn new(socket: std::net::TcpStream, task: AbortHandle) -> Killer {
        Killer { socket, task }
    }

    fn kill(&self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        self.task.abort();
    }

    /// Ends the connection now unless it has ended already; says whether it was open.
    fn kill_if_open(&self) -> bool {
        let open = !self.ended();
        if open {
            self.kill();
        }
        open
    }

    fn ended(&self) -> bool {
        self.task.is_finished()
    }
}

/// One HTTP/2 connection to a backend.
pub struct H2Conn {
    sender: SendRequest<Bytes>,
    streams: AtomicU32,
    /// When its last stream ended (seconds on [`clock`]); read only while it has none.
    idle_since: AtomicU64,
    /// The connection refused a new stream (it received GOAWAY): it takes no more.
    refusing: AtomicBool,
    /// What identity it presents (a front-proxy certificate's fingerprint; 0: none).
    presents: u64,
    killer: Arc<Killer>,
}

impl H2Conn {
    /// A connection, ended by `killer`.
    pub fn new(sender: SendRequest<Bytes>, killer: Killer) -> H2Conn {
        H2Conn {
            sender,
            streams: AtomicU32::new(0),
            idle_since: AtomicU64::new(clock()),
            refusing: AtomicBool::new(false),
            presents: 0,
            killer: Arc::new(killer),
        }
    }

    /// The connection presents the identity of fingerprint `presents` (0: none).
    pub fn presenting(mut self, presents: u64) -> H2Conn {
        self.presents = presents;
        self
    }

    /// Whether new streams may use the connection.
    fn usable(&self) -> bool {
        !self.refusing.load(Ordering::Acquire) && !self.killer.ended()
    }
}

/// Connections taken out of use while streams may still run on them: what ends those still
/// open by a deadline.
pub struct Retired(Vec<Arc<Killer>>);

impl Retired {
    /// How many were taken out of use.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Ends those still open; returns how many were.
    pub fn close(&self) -> usize {
        self.0.iter().filter(|k| k.kill_if_open()).count()
    }
}

/// A stream reserved on a connection; releases its slot when dropped.
pub struct Stream {
    conn: Arc<H2Conn>,
}

impl Stream {
    /// The connection's sender.
    pub fn sender(&self) -> &SendRequest<Bytes> {
        &self.conn.sender
    }

    /// The connection refused this stream: no later request is given it.
    pub fn refused(&self) {
        self.conn.refusing.store(true, Ordering::Release);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.conn.streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.conn.idle_since.store(clock(), Ordering::Relaxed);
        }
    }
}

/// Seconds since the first call: a clock for idle times that costs no system call per read
/// beyond `Instant::now`.
fn clock() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs()
}

#[derive(Default)]
struct Conns {
    /// Connections new streams may use, by [`Kind`].
    open: [Vec<Arc<H2Conn>>; KINDS],
    /// Every connection of the kind ended on the backend's side (GOAWAY, close, reset) since
    /// the last one was opened: the process behind may be another one now.
    all_ended: [bool; KINDS],
    /// Connections taken out of use by a drain (each closes once its streams are done), until
    /// they end; a close ends them at once.
    retired: Vec<Arc<Killer>>,
}

/// The terminate-mode state of one backend.
pub struct Upstream {
    conns: Mutex<Conns>,
    /// Serialises opening connections, so that a burst of requests opens one, not many.
    dialing: [tokio::sync::Mutex<()>; KINDS],
    /// Requests in flight, long-running ones included: what a drain waits for.
    in_flight: AtomicUsize,
    /// Requests in flight that are not long-running: the load the balancer reads.
    busy: AtomicUsize,
    /// Response-header latency, exponentially weighted, in µs (0: none measured yet).
    latency_us: AtomicU64,
    /// Bumped by every close: upgraded connections (exec, attach, port-forward), which run on
    /// their own TCP connections, end when it changes.
    closes: tokio::sync::watch::Sender<u64>,
    /// Bumped by every drain: followed watches move to another backend when it changes.
    drains: tokio::sync::watch::Sender<u64>,
    /// Moves asked of this backend's followed watches (the share keeper): each permit moves
    /// one watch to another backend. Its waiters are woken one per permit, in order.
    moves: tokio::sync::Semaphore,
    /// Watches asked to move that have not left yet (each waits for a fresh position first):
    /// not counted as held by the share keeper, which would otherwise ask more to move.
    leaving: AtomicUsize,
    /// When its watch cache last said it lags its etcd ("Too large resource version"; seconds on
    /// [`clock`], plus one; 0: never).
    cache_behind_at: AtomicU64,
    gauges: arc_swap::ArcSwap<Gauges>,
}

/// A watch asked to move, leaving its backend; see [`Upstream::leaving`].
pub struct Leaving<'a>(&'a Upstream);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.leaving.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Per-backend gauges, resolved once per name.
pub struct Gauges {
    /// `kubegate_backend_requests_in_flight{backend}`.
    pub in_flight: IntGauge,
    /// `kubegate_backend_long_running_requests{backend}`.
    pub long_running: IntGauge,
    /// `kubegate_backend_upstream_connections{backend}`.
    pub connections: IntGauge,
}

impl Upstream {
    /// No connections yet.
    pub fn new(gauges: Gauges) -> Upstream {
        Upstream {
            conns: Mutex::default(),
            dialing: Default::default(),
            in_flight: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            latency_us: AtomicU64::new(0),
            cache_behind_at: AtomicU64::new(0),
            leaving: AtomicUsize::new(0),
            closes: tokio::sync::watch::Sender::new(0),
            drains: tokio::sync::watch::Sender::new(0),
            moves: tokio::sync::Semaphore::new(0),
            gauges: arc_swap::ArcSwap::from_pointee(gauges),
        }
    }

    fn conns(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gauges of a renamed backend.
    pub fn set_gauges(&self, gauges: Gauges) {
        self.gauges.store(Arc::new(gauges));
    }

    /// Requests in flight (long-running ones included).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Requests in flight that are not long-running, weighted by the backend's response latency
    /// (a slow replica looks busier), in µs of expected waiting.
    pub fn load(&self) -> u64 {
        let busy = self.busy.load(Ordering::Relaxed) as u64;
        let latency = self.latency_us.load(Ordering::Relaxed).max(1);
        (busy + 1).saturating_mul(latency)
    }

    /// Requests in flight that are not long-running.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Long-running requests in flight (watches, logs, exec, attach, port-forward).
    pub fn long_running(&self) -> usize {
        self.in_flight().saturating_sub(self.busy())
    }

    /// Long-running requests in flight that stay: those of watches asked to move and not yet
    /// gone are left out.
    pub fn long_running_staying(&self) -> usize {
        self.long_running()
            .saturating_sub(self.leaving.load(Ordering::Relaxed))
    }

    /// Counts a watch asked to move as leaving until the guard is dropped (it has moved).
    pub fn leaving(&self) -> Leaving<'_> {
        self.leaving.fetch_add(1, Ordering::Relaxed);
        Leaving(self)
    }

    /// Asks `n` of this backend's followed watches to move to another backend; what was
    /// asked before and not yet taken is replaced.
    pub fn ask_moves(&self, n: usize) {
        let waiting = self.moves.available_permits();
        if n > waiting {
            self.moves.add_permits(n - waiting);
        } else {
            self.moves.forget_permits(waiting - n);
        }
    }

    /// Its watch cache said a watch's position is beyond it ("Too large resource version"):
    /// the cache lags its etcd.
    pub fn cache_fell_behind(&self) {
        self.cache_behind_at.store(clock() + 1, Ordering::Relaxed);
    }

    /// Whether its watch cache said it lags within the last `d`: no place to move watches to.
    /// (A 410 does not count: it says the position is older than the cache, which a replica
    /// that restarted says of every old position, and the move freshens those first.)
    pub fn cache_fell_behind_within(&self, d: Duration) -> bool {
        let at = self.cache_behind_at.load(Ordering::Relaxed);
        at != 0 && clock() + 1 - at < d.as_secs()
    }

    /// Resolves when a watch waiting here is asked to move (the ask is used up).
    pub async fn move_asked(&self) {
        match self.moves.acquire().await {
            Ok(permit) => permit.forget(),
            // Never closed: wait for ever rather than move.
            Err(_) => std::future::pending().await,
        }
    }

    /// Records a response-header latency (EWMA, weight 1/8).
    pub fn observe_latency(&self, d: Duration) {
        let sample = d.as_micros().min(u64::MAX as u128) as u64;
        let _ = self
            .latency_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == 0 {
                    sample
                } else {
                    old - old / 8 + sample / 8
                })
            });
    }

    /// Reserves a stream on an open connection of `kind` with fewer than `max` streams that
    /// presents `presents` (a front-proxy certificate's fingerprint; 0: none). One that
    /// presents another (dialed as its certificate was being replaced) takes no new stream and
    /// closes once idle; those open at the replacement are retired ([`Upstream::retire`]).
    pub fn stream(&self, kind: Kind, max: u32, presents: u64) -> Option<Stream> {
        let mut conns = self.conns();
        let list = &mut conns.open[kind as usize];
        let before = list.len();
        list.retain(|c| c.usable());
        let removed = before - list.len();
        if removed > 0 && list.is_empty() {
            conns.all_ended[kind as usize] = true;
        }
        let list = &mut conns.open[kind as usize];
        let found = list
            .iter()
            .filter(|c| c.presents == presents)
            .find_map(|c| {
                c.streams
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                        (n < max).then_some(n + 1)
                    })
                    .ok()
                    .map(|_| Stream { conn: c.clone() })
            });
        drop(conns);
        if removed > 0 {
            self.gauges.load().connections.sub(removed as i64);
        }
        found
    }

    /// Closes connections that have carried no stream for `idle`, keeping at least one usable
    /// connection of each kind, and forgets drained connections that have ended; returns how
    /// many it closed. A stream is reserved under the
    /// same lock, so none can be given a connection this takes away.
    pub fn retire_idle(&self, idle: Duration) -> usize {
        let now = clock();
        let mut retired = 0;
        let mut conns = self.conns();
        // Drained connections that have ended since: their descriptors (the killers' duplicates)
        // go now, not at the backend's next drain.
        conns.retired.retain(|k| !k.ended());
        for list in &mut conns.open {
            let mut usable = list.iter().filter(|c| c.usable()).count();
            // From the newest: new streams go to the first connection with room, so the
            // newest are the ones a burst opened and the first to empty.
            for i in (0..list.len()).rev() {
                let c = &list[i];
                let idle_long = c.streams.load(Ordering::Acquire) == 0
                    && now.saturating_sub(c.idle_since.load(Ordering::Relaxed)) >= idle.as_secs();
                if !idle_long || (c.usable() && usable == 1) {
                    continue;
                }
                if c.usable() {
                    usable -= 1;
                }
                // Dropping the last handle on the connection ends it with GOAWAY (h2 closes a
                // connection no sender and no stream uses).
                list.remove(i);
                retired += 1;
            }
        }
        drop(conns);
        if retired > 0 {
            self.gauges.load().connections.sub(retired as i64);
        }
        retired
    }

    /// Serialises opening connections of `kind`.
    pub async fn dial_turn(&self, kind: Kind) -> tokio::sync::MutexGuard<'_, ()> {
        self.dialing[kind as usize].lock().await
    }

    /// Puts a new connection in use and reserves its first stream; says whether it replaces
    /// connections of its kind that all ended on the backend's side (a restart shows so).
    pub fn add(&self, kind: Kind, conn: H2Conn) -> (Stream, bool) {
        conn.streams.store(1, Ordering::Release);
        let conn = Arc::new(conn);
        let mut conns = self.conns();
        conns.open[kind as usize].push(conn.clone());
        let replaces_ended = std::mem::take(&mut conns.all_ended[kind as usize]);
        drop(conns);
        self.gauges.load().connections.inc();
        (Stream { conn }, replaces_ended)
    }

    /// Upstream connections open for new streams.
    pub fn connections(&self) -> usize {
        let conns = self.conns();
        conns.open.iter().map(Vec::len).sum()
    }

    /// Changes when the backend's work is closed: upgraded connections end then.
    pub fn closes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.closes.subscribe()
    }

    /// Changes when the backend starts draining: followed watches move then.
    pub fn drains(&self) -> tokio::sync::watch::Receiver<u64> {
        self.drains.subscribe()
    }

    /// No new streams: connections close, with GOAWAY, once their streams are done.
    pub fn drain(&self) {
        self.retire_all();
        self.drains.send_modify(|n| *n += 1);
    }

    /// Every open connection takes no new stream (the replica is now reached at another of
    /// its addresses); unlike a drain, watches are not told to move.
    pub fn retire_all(&self) {
        let mut conns = self.conns();
        let conns = &mut *conns;
        let mut taken = 0;
        for list in &mut conns.open {
            taken += list.len();
            conns
                .retired
                .extend(list.drain(..).map(|c| c.killer.clone()));
        }
        conns.retired.retain(|k| !k.ended());
        self.gauges.load().connections.sub(taken as i64);
    }

    /// Connections of `kind` that present another identity than `current` (a front-proxy
    /// certificate's fingerprint; 0: none) take no new stream — what they present was
    /// replaced: each closes, with GOAWAY, once its streams are done. The caller ends those
    /// still open by a deadline.
    pub fn retire(&self, kind: Kind, current: u64) -> Retired {
        let mut conns = self.conns();
        let conns = &mut *conns;
        let list = &mut conns.open[kind as usize];
        let (stale, kept): (Vec<_>, Vec<_>) = list.drain(..).partition(|c| c.presents != current);
        *list = kept;
        let killers: Vec<Arc<Killer>> = stale.iter().map(|c| c.killer.clone()).collect();
        conns.retired.extend(killers.iter().cloned());
        conns.retired.retain(|k| !k.ended());
        self.gauges.load().connections.sub(killers.len() as i64);
        Retired(killers)
    }

    /// Ends everything open on the backend now; returns the requests that were in flight.
    pub fn close(&self) -> usize {
        let in_flight = self.in_flight();
        let (open, retired) = {
            let mut conns = self.conns();
            (
                std::mem::take(&mut conns.open),
                std::mem::take(&mut conns.retired),
            )
        };
        let mut taken = 0;
        for c in open.iter().flatten() {
            c.killer.kill();
            taken += 1;
        }
        for k in &retired {
            k.kill();
        }
        self.gauges.load().connections.sub(taken);
        self.closes.send_modify(|n| *n += 1);
        in_flight
    }

    /// A request starts: returns the gauges it counts in and the drain count now.
    pub fn request_started(&self, long_running: bool) -> (Arc<Gauges>, u64) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let gauges = self.gauges.load_full();
        gauges.in_flight.inc();
        if long_running {
            gauges.long_running.inc();
        } else {
            self.busy.fetch_add(1, Ordering::Relaxed);
        }
        (gauges, *self.drains.borrow())
    }

    /// A request that started with `gauges` ended; returns whether it was the last in flight.
    pub fn request_ended(&self, gauges: &Gauges, long_running: bool) -> bool {
        gauges.in_flight.dec();
        if long_running {
            gauges.long_running.dec();
        } else {
            self.busy.fetch_sub(1, Ordering::Relaxed);
        }
        self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauges() -> Gauges {
        let g = |n: &str| IntGauge::new(n, n).unwrap();
        Gauges {
            in_flight: g("in_flight"),
            long_running: g("long_running"),
            connections: g("connections"),
        }
    }

    /// A real HTTP/2 connection over loopback TCP to a server that accepts and drops streams;
    /// returns it and the task driving it (which ends when the connection does).
    async fn connection() -> (H2Conn, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut server = h2::server::handshake(tcp).await.unwrap();
            while let Some(Ok(_)) = server.accept().await {}
        });
        let std = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap()
            .into_std()
            .unwrap();
        let dup = std.try_clone().unwrap();
        let tcp = tokio::net::TcpStream::from_std(std).unwrap();
        let (sender, conn) = h2::client::handshake(tcp).await.unwrap();
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let killer = Killer::new(dup, task.abort_handle());
        (H2Conn::new(sender, killer), task)
    }

    #[tokio::test]
    async fn idle_connections_beyond_one_per_kind_are_closed() {
        let upstream = Upstream::new(gauges());
        let (first, _) = connection().await;
        let (second, second_task) = connection().await;
        drop(upstream.add(Kind::WithIdentity, first));
        drop(upstream.add(Kind::WithIdentity, second));
        assert_eq!(upstream.connections(), 2);
        // Not idle long enough yet.
        assert_eq!(upstream.retire_idle(Duration::from_secs(3600)), 0);
        assert_eq!(upstream.connections(), 2);
        // One goes, one stays for the next request.
        assert_eq!(upstream.retire_idle(Duration::ZERO), 1);
        assert_eq!(upstream.connections(), 1);
        assert_eq!(upstream.retire_idle(Duration::ZERO), 0);
        assert_eq!(upstream.gauges.load().connections.get(), 1);
        assert!(upstream.stream(Kind::WithIdentity, 100, 0).is_some());
        // The retired one ended: its last handle went, so h2 closed it.
        tokio::time::timeout(Duration::from_secs(30), second_task)
            .await
            .expect("the idle connection ended")
            .unwrap();
    }

    #[tokio::test]
    async fn retired_connections_take_no_stream_and_close_by_their_deadline() {
        let upstream = Upstream::new(gauges());
        let (old, old_task) = connection().await;
        let (anonymous, _) = connection().await;
        let watch = upstream.add(Kind::WithIdentity, old).0;
        drop(upstream.add(Kind::Anonymous, anonymous));
        let retired = upstream.retire(Kind::WithIdentity, 7);
        assert_eq!(retired.len(), 1);
        assert!(
            upstream.stream(Kind::WithIdentity, 100, 0).is_none(),
            "no new stream"
        );
        assert!(
            upstream.stream(Kind::Anonymous, 100, 0).is_some(),
            "other kinds stay"
        );
        // A stream still runs on it until the deadline closes it.
        assert!(!old_task.is_finished());
        assert_eq!(retired.close(), 1);
        tokio::time::timeout(Duration::from_secs(30), old_task)
            .await
            .expect("the retired connection ended")
            .unwrap_or(());
        assert_eq!(retired.close(), 0, "closed once");
        drop(watch);
    }

    #[tokio::test]
    async fn a_connection_carrying_a_stream_is_kept() {
        let upstream = Upstream::new(gauges());
        let (first, _) = connection().await;
        let (second, _) = connection().await;
        let held = upstream.add(Kind::WithIdentity, first);
        let also_held = upstream.add(Kind::WithIdentity, second);
        assert_eq!(upstream.retire_idle(Duration::ZERO), 0);
        drop(held);
        assert_eq!(upstream.retire_idle(Duration::ZERO), 1);
        // The last usable connection of its kind stays even when idle.
        drop(also_held);
        assert_eq!(upstream.retire_idle(Duration::ZERO), 0);
        assert_eq!(upstream.connections(), 1);
    }
}
