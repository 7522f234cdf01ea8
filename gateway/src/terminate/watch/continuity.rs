//! Watch continuity: a watch whose replica goes away — it drains, shuts down, crashes, freezes,
//! its connection breaks — continues on another replica from the last position the client
//! received, in the same response: no event lost, none repeated, order kept.
//!
//! A task per watch reads the upstream stream event by event (`framing`), forwards whole events
//! to the client, and keeps the position (`position`). When the upstream stream ends or breaks
//! for a reason that is not the client's (it left) or the watch's own (its time is up, an
//! ERROR event such as 410 Expired, which reaches the client as the apiserver sent it), the
//! same watch is asked of another replica from that position. A watch moves at once when its
//! replica starts draining, rather than at the drain deadline. Resumes are bounded per watch;
//! a watch that cannot resume ends cleanly, as an apiserver ending it would.
//!
//! Watches also move live, one at a time as the share keeper (`share`) asks a replica
//! holding more than its share to give some up: the same resume, from a watch that can
//! continue from a position, onto the replica the balancer picks (the one holding fewest).
//!
//! A 410 that comes before any event is one replica's answer, not the store's: each
//! replica's watch cache begins when the replica started (or keeps a shorter window), so a
//! replica restarted after the position cannot serve it while one up longer can. So is a
//! "Too large resource version" before any event: that replica's cache lags its etcd, and
//! another's may have reached the position. Either answer is held back and the watch asked of
//! the replicas that have not said it; the client gets it only when none can serve the
//! position.
//!
//! A position can be too old for where the watch goes: a replica that came back after the
//! client's last event or bookmark begins its cache after it (a quiet watch hears a bookmark
//! once a minute). When the replica the watch leaves still answers (a drain, a move), the watch
//! is first asked of it again for a few seconds: the apiserver sends a bookmark 2 s before a
//! watch's deadline, at its cache's current resourceVersion, so the watch leaves with a fresh
//! position (`freshen`; `kubegate_watch_resumes_total{cause}` is unchanged, the freshened
//! positions are counted apart). When it does not (it crashed, froze), the watch is asked
//! first of replicas ready since before its position, while there is one (`Avoid::at`).
//!
//! A watch's time is kept across replicas: it ends when the client's `timeoutSeconds` says,
//! or, without one, after `terminate.min_request_timeout` times a random factor in [1, 2), as
//! the apiserver's `--min-request-timeout` ends it. The time left is what each replica is
//! asked for, and kubegate ends the client's stream at the deadline itself, so a client's
//! watches end and rotate across replicas as they would on the apiserver.

use crate::net::Unplaced;
use crate::state::{Backend, Gateway, Generation, Pool, Stream};
use crate::telemetry::{Freshened, WatchBreak, WatchEnd};
use crate::terminate::exchange::body::{ResponseBody, WatchBody};
use crate::terminate::exchange::h2client::ResponseStream;
use crate::terminate::exchange::in_flight::InFlight;
use crate::terminate::upstream::dispatch::{self, dispatch, Answer};
use crate::terminate::upstream::outgoing::Outgoing;
use crate::terminate::upstream::signals::{self, ExtensionApis, Origin, Said};
use crate::terminate::upstream::upstreams::Upstreams;
use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use kubegate_wire::classify::RequestClass;
use kubegate_wire::framing::{self, Decoder, Framing, Kind};
use kubegate_wire::position::{self, resumed_query, Asked, Deliver, Progress};
use kubegate_wire::status;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Resumes one watch may make within [`RESUME_WINDOW`].
const MAX_RESUMES: usize = 10;
/// See [`MAX_RESUMES`].
const RESUME_WINDOW: Duration = Duration::from_secs(60);
/// How long kubegate keeps asking for a broken watch again (with growing pauses, at most
/// [`MAX_PAUSE`] apart) before it ends the client's stream. The client sees no event meanwhile,
/// as with an apiserver whose etcd is away (its watch cache keeps open watches open): every
/// replica failing `/readyz` at once (etcd down) is outlived without a break.
const REOPEN_PATIENCE: Duration = Duration::from_secs(60);
/// The longest pause between two attempts to reopen a watch.
const MAX_PAUSE: Duration = Duration::from_millis(1600);
/// Events waiting for a slow client.
const QUEUE: usize = 16;
/// How long a freshening watch is asked for: the cacher sends a bookmark 2 s before a
/// watch's deadline, so it hears one about a second in.
const FRESHEN_FOR: Duration = Duration::from_secs(3);
/// A watch leaving a replica that still answers, which hears something more often than this,
/// stays on its stream up to this long for its next event rather than ask for a bookmark: a
/// busy watch leaves with a fresh position and costs the replica no request.
const LINGER: Duration = Duration::from_secs(3);

/// What a client asked of its watch, and when the watch ends (`None`: the client's
/// `timeoutSeconds` cannot be read, and the apiserver answers that).
pub struct Watch {
    /// The client's query, read.
    pub asked: Asked,
    /// When the watch ends.
    pub ends: Option<Instant>,
    /// How long its client may read nothing while an event waits before the watch is cut,
    /// alone (`terminate.slow_watch_timeout`): what it holds upstream is given back.
    pub slow_client: Duration,
}

/// How long a watch asked as `asked` lasts: its `timeoutSeconds`, else the apiserver's
/// `--min-request-timeout` (`min`) times a random factor in [1, 2); `None` when its
/// `timeoutSeconds` is there but unreadable (it goes upstream as written).
pub fn lifetime(asked: &Asked, min: Duration) -> Option<Duration> {
    if asked.timeout_unreadable {
        return None;
    }
    Some(
        asked
            .timeout
            .unwrap_or_else(|| min.mul_f64(1.0 + fastrand::f64())),
    )
}

/// The upstream stream being read, and what it holds on its replica.
struct Upstream {
    body: ResponseStream,
    backend: Arc<Backend>,
    held: (InFlight, Stream),
    /// The stream cut into events; kept with it, since an event can span frames and the
    /// stream can be read on after a pause (a watch lingering on a replica it leaves).
    decoder: Decoder,
    framing: Framing,
    /// Its ERROR events are the replica's own (`signals::Origin`): only then does one that
    /// says its cache cannot serve the position send the watch elsewhere.
    own: bool,
}

impl Upstream {
    fn new(
        body: ResponseStream,
        backend: Arc<Backend>,
        held: (InFlight, Stream),
        (framing, origin, extensions): (Framing, &Origin, &ExtensionApis),
    ) -> Upstream {
        Upstream {
            own: origin.answered_by_apiserver(extensions),
            body,
            backend,
            held,
            decoder: Decoder::new(framing),
            framing,
        }
    }

    /// Why the replica cannot serve the watch's position, if its first ERROR `event` says
    /// so: its cache begins after it (410 `Expired`, or `Gone` from older replicas), or has
    /// not reached it (`signals::Said::CacheBehind`).
    fn refuses_position(&self, event: &framing::Event) -> Option<WatchBreak> {
        if !self.own || !matches!(event.code, Some(410 | 504)) {
            return None;
        }
        let status = status::of_event(self.framing, &event.bytes)?;
        match (status.code, status.reason.as_str()) {
            (410, "Expired" | "Gone") => Some(WatchBreak::Expired),
            _ if signals::said_in_status(&status) == Some(Said::CacheBehind) => {
                Some(WatchBreak::CacheBehind)
            }
            _ => None,
        }
    }
}

/// A watch kubegate follows: what was asked, of which cluster, and how its events are framed.
pub struct Followed {
    /// The gateway.
    pub gw: Arc<Gateway>,
    /// The watch's generation: the settings it is resumed under.
    pub generation: Arc<Generation>,
    /// The watch's cluster.
    pub upstreams: Arc<Upstreams>,
    /// The request as it goes upstream.
    pub outgoing: Outgoing,
    /// What the request is.
    pub class: RequestClass,
    /// What the client asked of the watch, and when it ends.
    pub watch: Watch,
    /// How its events are framed.
    pub framing: Framing,
}

/// Takes over a watch whose first answer `resp` came back `200` in a framing kubegate
/// follows, and answers the client with one response that lasts across replicas until the
/// watch ends.
pub fn follow(
    followed: Followed,
    resp: Response<ResponseStream>,
    held: (InFlight, Stream),
) -> Response<ResponseBody> {
    let (parts, body) = resp.into_parts();
    let backend = held.0.backend().clone();
    let (tx, rx) = mpsc::channel(QUEUE);
    followed.gw.metrics().terminate.watches_open.inc();
    let upstream = Upstream::new(
        body,
        backend,
        held,
        (
            followed.framing,
            followed.outgoing.origin(),
            &followed.upstreams.extensions,
        ),
    );
    tokio::spawn(async move {
        let ended = run(&followed, upstream, tx).await;
        let m = &followed.gw.metrics().terminate;
        m.watches_open.dec();
        m.watch_ended(ended);
        tracing::debug!(reason = ended.as_str(), "watch ended");
    });
    Response::from_parts(parts, ResponseBody::Watch(WatchBody::new(rx)))
}

/// Reads `upstream` into `tx`, and asks another replica when it breaks, until the watch ends:
/// why it ended.
async fn run(followed: &Followed, mut upstream: Upstream, tx: mpsc::Sender<Bytes>) -> WatchEnd {
    let Followed {
        gw,
        upstreams,
        outgoing,
        watch,
        ..
    } = followed;
    let asked = &watch.asked;
    let mut progress = Progress::new(asked);
    // When the position last moved: what a replica that came back since may not reach.
    let mut heard = Heard::new();
    let mut resumes: VecDeque<Instant> = VecDeque::new();
    // The replicas that said they cannot serve the current position (410, too large), and
    // the first such answer.
    let mut refused_at: Vec<SocketAddr> = Vec::new();
    let mut refused: Option<(Bytes, WatchBreak)> = None;
    let time_left = || {
        watch
            .ends
            .map(|e| e.saturating_duration_since(Instant::now()))
    };
    loop {
        let broke = match pump(
            &mut upstream,
            watch,
            &mut progress,
            &mut heard,
            Until::Stopped,
            &tx,
        )
        .await
        {
            Ok(Stopped::Broke(b)) => {
                // The position may have moved on: what replicas said of the old one no longer
                // holds.
                refused_at.clear();
                refused = None;
                b
            }
            Ok(Stopped::Refused(answer, cause)) => {
                if matches!(cause, WatchBreak::CacheBehind) {
                    upstream.backend.planes().terminate.cache_fell_behind();
                }
                refused_at.push(upstream.backend.address);
                refused.get_or_insert((answer, cause));
                cause
            }
            Err(ended) => return ended,
        };
        let leaving = upstream.backend.clone();
        // Until it is open elsewhere, a moving watch is not counted where it was.
        let _moving =
            matches!(broke, WatchBreak::Moved).then(|| leaving.planes().terminate.leaving());
        // The replica left still answers, and one the watch may go to came back after the
        // position: a watch that hears something often waits here for its next event.
        if matches!(broke, WatchBreak::Drained | WatchBreak::Moved)
            && progress.resumable(asked)
            && heard.often()
        {
            if let Some(back) = returned_since(upstreams.pool(), &leaving, heard.last) {
                let until = Until::PositionAfter(back, Instant::now() + LINGER);
                let before = heard.last;
                if let Err(ended) =
                    pump(&mut upstream, watch, &mut progress, &mut heard, until, &tx).await
                {
                    return ended;
                }
                if heard.last > back {
                    gw.metrics().terminate.watch_freshened(Freshened::NextEvent);
                } else if heard.last > before {
                    tracing::debug!("a lingering watch heard something, not yet past every return");
                }
            }
        }
        let left = time_left();
        if left.is_some_and(|l| l < Duration::from_secs(1)) {
            return WatchEnd::Timeout;
        }
        let resume_from = |progress: &Progress| match progress.resume_from(asked) {
            Ok(from) => Ok(from),
            Err(position::NotResumable::NoPosition) => Err(WatchEnd::NoPosition),
            Err(position::NotResumable::InitialEvents) => Err(WatchEnd::InitialEvents),
        };
        let mut from = match resume_from(&progress) {
            Ok(from) => from,
            Err(ended) => return ended,
        };
        while resumes.front().is_some_and(|t| t.elapsed() > RESUME_WINDOW) {
            resumes.pop_front();
        }
        if resumes.len() >= MAX_RESUMES {
            return WatchEnd::Budget;
        }
        let broken = upstream.backend.address;
        let name = upstream.backend.info().name.clone();
        // What was held on the replica is let go before another is asked.
        drop(upstream);
        // The replica left still answers, and one the watch may go to came back after the
        // position: the position is brought up to date here first.
        if matches!(broke, WatchBreak::Drained | WatchBreak::Moved)
            && from.is_some()
            && returned_since(upstreams.pool(), &leaving, heard.last).is_some()
        {
            let fresh = freshen(
                followed,
                &leaving,
                from.as_deref().unwrap_or_default(),
                (&mut progress, &mut heard),
                &tx,
            )
            .await;
            match fresh {
                Ok(true) => {
                    gw.metrics().terminate.watch_freshened(Freshened::Bookmark);
                    from = match resume_from(&progress) {
                        Ok(from) => from,
                        Err(ended) => return ended,
                    };
                }
                Ok(false) => {}
                Err(ended) => return ended,
            }
        }
        // Asked again with the watch's time left at each attempt.
        let again = || {
            outgoing.with_query(&resumed_query(
                outgoing.client_query(),
                from.as_deref(),
                time_left(),
            ))
        };
        let patience = left.map_or(REOPEN_PATIENCE, |l| l.min(REOPEN_PATIENCE));
        let avoid = Avoid {
            broken,
            refused_at: &refused_at,
            position_at: heard.last,
        };
        upstream = match reopen(followed, again, avoid, &tx, patience).await {
            Ok(u) => u,
            Err(WatchEnd::NoBackend | WatchEnd::Expired) if refused.is_some() => {
                // No replica left that has not refused this position: the client gets the
                // first answer, as the apiserver gave it (on a 410 it relists).
                let Some((answer, cause)) = refused.take() else {
                    return WatchEnd::Expired;
                };
                let _ = tx.send(answer).await;
                return match cause {
                    WatchBreak::Expired => WatchEnd::Expired,
                    _ => WatchEnd::Error,
                };
            }
            Err(WatchEnd::NoBackend) if left.is_some_and(|l| l <= REOPEN_PATIENCE) => {
                // The client's own timeout came first: the watch ends as the apiserver
                // would end it then.
                return WatchEnd::Timeout;
            }
            Err(ended) => return ended,
        };
        progress.resumed(&from);
        resumes.push_back(Instant::now());
        gw.metrics().terminate.watch_resumed(broke);
        tracing::info!(
            from_backend = %name,
            to_backend = %upstream.backend.info().name,
            resource_version = from.as_deref().unwrap_or(""),
            cause = broke.as_str(),
            "watch resumed on another backend"
        );
    }
}

/// Why the upstream stream stopped while the watch goes on.
enum Stopped {
    /// It ended or broke, or its replica drains.
    Broke(WatchBreak),
    /// Its first event said this replica cannot serve the position (410, or too large): held
    /// here, not sent; `cause` says which.
    Refused(Bytes, WatchBreak),
}

/// How long [`pump`] forwards.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// Until the stream stops, its replica drains or the watch is asked to move.
    Stopped,
    /// Until the first bookmark (or the stream stops): a freshening watch.
    Bookmark,
    /// Until the position moves after this time (Unix ms), or this instant, on a stream
    /// already followed: a watch lingering on a replica it leaves.
    PositionAfter(u64, Instant),
}

/// Forwards events until the upstream stream stops (`Ok`, with why) or the watch is over;
/// `heard` follows when the position moves.
async fn pump(
    upstream: &mut Upstream,
    watch: &Watch,
    progress: &mut Progress,
    heard: &mut Heard,
    until: Until,
    tx: &mpsc::Sender<Bytes>,
) -> Result<Stopped, WatchEnd> {
    let asked = &watch.asked;
    // A lingering watch's stream was heard from before: an ERROR on it is the watch's own.
    let mut heard_before = matches!(until, Until::PositionAfter(..));
    // Registered once with the backend's moves, for the stream's life: a move asked while
    // the watch has no position to resume from waits until it has one.
    let backend = upstream.backend.clone();
    let moved = backend.planes().terminate.move_asked();
    tokio::pin!(moved);
    // Each signal's future is made once and polled at every wakeup, rather than made and
    // dropped per event: that registered and unregistered a waiter with the backend's drain
    // notifier (shared by all its watches) for every event relayed.
    let mut drains = upstream.held.0.drains();
    let drained = drains.changed();
    tokio::pin!(drained);
    let mut drains_gone = false;
    let client_gone = tx.closed();
    tokio::pin!(client_gone);
    let over = async {
        match watch.ends {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(over);
    let lingered = async {
        match until {
            Until::PositionAfter(_, by) => tokio::time::sleep_until(by.into()).await,
            _ => std::future::pending().await,
        }
    };
    tokio::pin!(lingered);
    let following = until == Until::Stopped;
    loop {
        let movable = following && progress.resumable(asked);
        tokio::select! {
            biased;
            () = &mut client_gone => return Err(WatchEnd::Client),
            // The replica was asked for the same time and ends the stream itself about now;
            // the client's stream ends here whatever the replica does.
            () = &mut over => return Err(WatchEnd::Timeout),
            changed = &mut drained, if following && !drains_gone => match changed {
                Ok(()) => return Ok(Stopped::Broke(WatchBreak::Drained)),
                // The backend is gone with its sender: nothing to follow any more.
                Err(_) => drains_gone = true,
            },
            () = &mut moved, if movable => return Ok(Stopped::Broke(WatchBreak::Moved)),
            () = &mut lingered => return Ok(Stopped::Broke(WatchBreak::Ended)),
            frame = upstream.body.frame() => match frame {
                None => return Ok(Stopped::Broke(WatchBreak::Ended)),
                Some(Err(e)) => {
                    tracing::debug!(backend = %upstream.backend.info().name, error = %e, "upstream watch broke");
                    return Ok(Stopped::Broke(WatchBreak::Failed));
                }
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    upstream.held.0.carried(data.len());
                    upstream.decoder.push(&data);
                    loop {
                        let event = match upstream.decoder.next_event() {
                            Ok(Some(e)) => e,
                            Ok(None) => break,
                            Err(e) => {
                                tracing::warn!(backend = %upstream.backend.info().name, error = ?e, "watch stream is not a sequence of events");
                                return Err(WatchEnd::Malformed);
                            }
                        };
                        if !std::mem::replace(&mut heard_before, true) && event.kind == Kind::Error {
                            if let Some(cause) = upstream.refuses_position(&event) {
                                tracing::debug!(backend = %upstream.backend.info().name, cause = cause.as_str(), "a replica's watch cache cannot serve the watch's position");
                                return Ok(Stopped::Refused(event.bytes, cause));
                            }
                        }
                        let deliver = progress.observe(asked, &event);
                        if event.kind != Kind::Error && event.resource_version.is_some() {
                            heard.moved();
                        }
                        let bytes = match deliver {
                            Deliver::Drop => None,
                            Deliver::AsIs => Some(event.bytes.clone()),
                            Deliver::WithoutTableHeader => Some(framing::without_table_header(&event)),
                        };
                        if let Some(bytes) = bytes {
                            match tokio::time::timeout(watch.slow_client, tx.send(bytes)).await {
                                Ok(Ok(())) => {}
                                Ok(Err(_)) => return Err(WatchEnd::Client),
                                Err(_) => return Err(WatchEnd::SlowClient),
                            }
                        }
                        match until {
                            Until::Bookmark if event.kind == Kind::Bookmark => {
                                return Ok(Stopped::Broke(WatchBreak::Ended));
                            }
                            Until::PositionAfter(after, _) if heard.last > after => {
                                return Ok(Stopped::Broke(WatchBreak::Ended));
                            }
                            _ => {}
                        }
                        if event.kind == Kind::Error {
                            return Err(if progress.error == Some(410) { WatchEnd::Expired } else { WatchEnd::Error });
                        }
                    }
                }
            }
        }
    }
}

/// How a replica's answer frames its events (a resumed watch must keep the client's).
fn framing_of<B>(resp: &Response<B>) -> Option<Framing> {
    Framing::of_headers(resp.headers())
}

/// When a watch's position last moved (an event or a bookmark), and how long before that it
/// moved (Unix ms): how often the watch hears something.
#[derive(Clone, Copy)]
struct Heard {
    last: u64,
    gap: Option<u64>,
}

impl Heard {
    /// A watch opened now.
    fn new() -> Heard {
        Heard {
            last: unix_ms(),
            gap: None,
        }
    }

    /// Its position moved now.
    fn moved(&mut self) {
        let now = unix_ms();
        self.gap = Some(now.saturating_sub(self.last));
        self.last = now;
    }

    /// It hears something more often than [`LINGER`]: its next event is worth waiting for.
    fn often(&self) -> bool {
        self.gap.is_some_and(|g| g < LINGER.as_millis() as u64)
    }
}

/// Now, in Unix milliseconds (as a backend's state `since`).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// When the last ready replica other than `leaving` that became ready after the position
/// moved last (`position_at`) did so (Unix ms): its cache may begin after the position.
fn returned_since(pool: &Pool, leaving: &Backend, position_at: u64) -> Option<u64> {
    pool.routing()
        .ready
        .iter()
        .filter(|b| b.address != leaving.address)
        .map(|b| b.since_unix_ms())
        .filter(|&since| since > position_at)
        .max()
}

/// Asks the watch of `leaving` again from `from` for [`FRESHEN_FOR`], forwarding what comes,
/// until its first bookmark: `Ok(true)` when the position moved on. Whatever fails here
/// leaves the position as it was; only the watch's own end is an error.
async fn freshen(
    followed: &Followed,
    leaving: &Arc<Backend>,
    from: &str,
    (progress, heard): (&mut Progress, &mut Heard),
    tx: &mpsc::Sender<Bytes>,
) -> Result<bool, WatchEnd> {
    let Followed {
        outgoing, framing, ..
    } = followed;
    let again = outgoing.with_query(&resumed_query(
        outgoing.client_query(),
        Some(from),
        Some(FRESHEN_FOR),
    ));
    let Some(Answer::Streaming {
        resp,
        in_flight,
        stream,
    }) = dispatch::attempt_on(
        (&followed.gw, &followed.generation),
        &followed.upstreams,
        leaving,
        &again,
        followed.class,
    )
    .await
    else {
        return Ok(false);
    };
    if resp.status() != http::StatusCode::OK || framing_of(&resp) != Some(*framing) {
        return Ok(false);
    }
    let mut upstream = Upstream::new(
        resp.into_body(),
        leaving.clone(),
        (in_flight, stream),
        (
            *framing,
            followed.outgoing.origin(),
            &followed.upstreams.extensions,
        ),
    );
    let before = heard.last;
    match pump(
        &mut upstream,
        &followed.watch,
        progress,
        heard,
        Until::Bookmark,
        tx,
    )
    .await?
    {
        Stopped::Broke(_) => Ok(heard.last > before),
        Stopped::Refused(..) => Ok(false),
    }
}

/// The replicas a watch is not asked of again: the one it broke on (for a first few tries)
/// and those whose caches said they cannot serve its position (for this position); and, at
/// the first try, those ready only since after `position_at` (Unix ms), whose caches begin
/// after the position, while a replica up longer is there to ask.
struct Avoid<'a> {
    broken: SocketAddr,
    refused_at: &'a [SocketAddr],
    position_at: u64,
}

impl Avoid<'_> {
    /// The replicas not to ask at try `attempt`.
    fn at(&self, pool: &Pool, attempt: u32) -> Vec<SocketAddr> {
        let mut avoid = self.refused_at.to_vec();
        if attempt < 2 {
            avoid.push(self.broken);
        }
        if attempt == 0 {
            // A replica whose cache began after the position would answer 410 (or, a custom
            // resource's, 429 while it initializes): one up longer is asked first.
            let routing = pool.routing();
            let (younger, covering): (Vec<&Arc<Backend>>, Vec<&Arc<Backend>>) = routing
                .ready
                .iter()
                .filter(|b| !avoid.contains(&b.address))
                .partition(|b| b.since_unix_ms() > self.position_at);
            if !covering.is_empty() {
                avoid.extend(younger.iter().map(|b| b.address));
            }
        }
        avoid
    }
}

/// Asks `again()` of a replica other than `avoid.broken` (that one too, after two misses:
/// it may be the only one left) and never of those in `avoid.refused_at`, with growing
/// pauses, until one answers with a watch stream or `patience` runs out. `Expired`: every
/// ready replica's cache said it cannot serve the position.
async fn reopen(
    followed: &Followed,
    again: impl Fn() -> Outgoing,
    avoid: Avoid<'_>,
    tx: &mpsc::Sender<Bytes>,
    patience: Duration,
) -> Result<Upstream, WatchEnd> {
    let Followed {
        gw,
        generation,
        upstreams,
        class,
        framing,
        ..
    } = followed;
    let (class, framing) = (*class, *framing);
    let deadline = Instant::now() + patience;
    for attempt in 0u32.. {
        if attempt > 0 {
            let pause = Duration::from_millis(100 << attempt.min(4)).min(MAX_PAUSE);
            if Instant::now() + pause >= deadline {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = tx.closed() => return Err(WatchEnd::Client),
            }
        }
        let again = again();
        // Prefer another replica up since before the position; after two misses, any whose
        // cache may reach the position.
        let mut tried = avoid.at(upstreams.pool(), attempt);
        let at = (&**gw, &**generation);
        match dispatch(at, upstreams, &again, class, &mut tried, Instant::now()).await {
            Ok((
                _,
                Answer::Streaming {
                    resp,
                    in_flight,
                    stream,
                },
            )) if resp.status() == http::StatusCode::OK => {
                if framing_of(&resp) != Some(framing) {
                    return Err(WatchEnd::Malformed);
                }
                let backend = in_flight.backend().clone();
                return Ok(Upstream::new(
                    resp.into_body(),
                    backend,
                    (in_flight, stream),
                    (framing, again.origin(), &upstreams.extensions),
                ));
            }
            Ok((_, Answer::Streaming { resp, .. })) => {
                tracing::debug!(status = %resp.status(), "a replica refused to resume a watch");
            }
            Ok((_, Answer::Whole(resp))) => {
                tracing::debug!(status = %resp.status(), "a replica refused to resume a watch");
            }
            Err(Unplaced::NoBackend) if !avoid.refused_at.is_empty() && attempt >= 2 => {
                // Every replica left has said its cache cannot serve the position.
                return Err(WatchEnd::Expired);
            }
            Err(_) => {}
        }
    }
    Err(WatchEnd::NoBackend)
}
