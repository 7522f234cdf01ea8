//! Joined reads (`terminate.join_reads`) and shared watches (`feeds`): a read that asks exactly what a read already on its
//! way upstream asks (`key`: same sender, path, query and answer-deciding headers) waits for
//! that read's answer instead of being sent, and its client gets the same status, headers and
//! bytes. The apiserver's freshness rules decide which twin will do (`key::Freshness`): a read
//! with a `resourceVersion` or `continue` joins any twin in flight; a consistent read joins
//! only a twin sent after it arrived — while one is in flight, the consistent reads that
//! arrive form the next twin, sent once it has answered (or after [`TRAILING_WAIT`]), so that
//! each sees every write completed before it arrived. One key thus has at most one read in
//! flight and one waiting.
//!
//! The read sent (the lead) answers its own client as usual when nobody joined it. When some
//! did, it reads its answer whole — within `max_answer_bytes` for one answer and
//! `max_held_bytes` for all, counted from the first byte — and every client gets it; an answer
//! that does not fit, or one the others should not take (kubegate's own failure, 401, 429,
//! 5xx: another attempt may fare better), goes to its own client alone, and each read that
//! waited on it is entered again (it may lead the next twin). So is every waiting read when the
//! lead's client goes away before the answer came.
//!
//! Reads of one sender are joined by default: the key holds the identity as sent upstream, so
//! no answer reaches a client the apiserver did not authorize for it. Across senders
//! (`across_senders`), the key leaves the identity out (`key::keys`) and each read sent keeps its
//! sender: a read of the same sender joins it at once; a read of another sender joins it only
//! once a SubjectAccessReview allowed its own sender the same (`Entered::Unreviewed` asks for
//! one), and takes only an answer that does not depend on who asked (a 403 names its user: it
//! goes to the reads of the sender it was for). Watches are shared the same way (`feeds`).
//!
//! Watch-lists (`publish_sync`): a watch with `sendInitialEvents` (client-go's informers
//! start so since 1.35, in place of a LIST) joins an identical one on its way upstream
//! (`key::watch_list`: its key less each client's `timeoutSeconds`), by the freshness rules of
//! reads. The lead's client streams as before; its initial events, up to and including the
//! bookmark that ends them, are copied for the followers (counted as a joined read's answer,
//! within `max_answer_bytes` and `max_held_bytes`). Each follower gets those bytes, then
//! watches on by itself from the position the bookmark gave: the state at that position and
//! every change after it, which is what its own watch-list would have given it, from a state
//! at least as fresh as it asked.
//!
//! Only a lead that others joined before its answer came copies anything: a watch-list nobody
//! joined streams as any watch, and no read joins it once its answer is in. A lead whose
//! initial events do not fit, break off, or whose upstream watch ends first leaves its
//! followers to go on alone (entered again, as a read's).

pub mod feeds;
pub mod key;

use crate::state::Backend;
use crate::telemetry::{JoinMetrics, JoinMiss};
use crate::terminate::exchange::body::{ResponseBody, WatchBody};
use crate::terminate::exchange::charge::{Charged, SharedBytes};
use crate::terminate::exchange::status::unavailable;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Response, StatusCode, Version};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use key::{keep_crossing, Freshness, JoinKey, Joinable, SenderKey};
use kubegate_wire::framing::{Decoder, Framing};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Longest a consistent read's twin waits for the twin in flight before it is sent anyway (a
/// slow replica's LIST must not hold the reads behind it for its whole length).
#[cfg(not(test))]
pub const TRAILING_WAIT: Duration = Duration::from_secs(1);
/// In unit tests only the twin's answer ends the wait, however slowly the test runs.
#[cfg(test)]
pub const TRAILING_WAIT: Duration = Duration::from_secs(3600);

/// A read's answer, as it is waited on: `None` until it comes.
type Awaited = Option<Arc<SharedAnswer>>;

/// One cluster's reads in flight that others may join, by key.
pub struct Joins {
    flights: Mutex<HashMap<JoinKey, Twins>>,
    next_id: AtomicU64,
    /// Answer bytes held for joined reads, over every cluster.
    held: Arc<AtomicU64>,
}

/// The reads of one key: the one sent, and the consistent reads' next one, waiting.
#[derive(Default)]
struct Twins {
    sent: Option<Flight>,
    waiting: Option<Flight>,
}

/// A read others may join: where its answer will be.
#[derive(Clone)]
struct Flight {
    id: u64,
    answer: watch::Receiver<Awaited>,
    followers: Arc<AtomicUsize>,
    /// Who sends it, when its key leaves the identity out.
    sender: Option<SenderKey>,
    /// When it was sent upstream (the apiserver authorized it then); `None` while it waits to
    /// be sent, after every read that joins it arrived.
    sent_at: Option<Instant>,
}

/// How a read enters: whether a review allowed its sender what it asks, when it arrived, and
/// how old an authorization of its own sender's twin may be for it to join without one
/// (`access_review.ttl`).
#[derive(Debug, Clone, Copy)]
pub struct Entering {
    /// A SubjectAccessReview (or its remembered answer) allowed its sender what it asks.
    pub reviewed: bool,
    /// When it arrived.
    pub arrived: Instant,
    /// How long before its arrival the apiserver may have authorized the twin it joins.
    pub within: Duration,
}

/// What entering a read gave.
pub enum Entered {
    /// The read goes upstream; others may join it.
    Leads(Lead),
    /// The read waits on another's answer.
    Follows(Follow),
    /// The read could join a twin of another sender, but whether its own sender may read the
    /// same is not known: a review first (then it is entered again as reviewed).
    Unreviewed,
}

/// A read that joined another: its answer to come.
pub struct Follow {
    answer: watch::Receiver<Awaited>,
    /// Joined a read of its own sender (its key holds the identity, or the senders match).
    same_sender: bool,
}

/// A read others may join, until it answers them.
pub struct Lead {
    joins: Arc<Joins>,
    key: JoinKey,
    id: u64,
    answer: watch::Sender<Awaited>,
    followers: Arc<AtomicUsize>,
    /// The twin in flight when this consistent read's twin was made: sent after it answers.
    after: Option<watch::Receiver<Awaited>>,
    /// Published: its followers learned their answer (or that there is none).
    published: bool,
    /// Where an answer its client did not wait for is counted.
    abandoned: prometheus::IntCounter,
}

/// An answer shared by several reads: its head and whole body, its bytes counted until the
/// last client has been sent them.
pub struct SharedAnswer {
    /// The replica that answered.
    replica: Option<Arc<Backend>>,
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    /// Its bytes, counted until the last client has been sent them.
    body: Arc<SharedBytes>,
    /// For a watch-list's initial events (`sync`): the position they end at, from which each
    /// follower watches on by itself.
    resumes_from: Option<u64>,
}

/// The bounds on answers held.
pub struct Limits {
    /// One answer, at most.
    pub max_answer_bytes: u64,
    /// Every answer held, together.
    pub max_held_bytes: u64,
    /// The count of answer bytes held for reads its client connection led, whose share
    /// ([`CONNECTION_SHARE`] of `max_held_bytes`) they take: one connection cannot fill the
    /// bound for everyone.
    pub connection: Option<Arc<AtomicU64>>,
    /// How long a watch-list lead's client may read nothing before it is let go (its
    /// followers' copy goes on): `terminate.slow_watch_timeout`.
    pub slow_client: Duration,
}

/// The part of `join_reads.max_held_bytes` the answers of reads one client connection leads
/// may hold together: an eighth. An answer stays charged to its lead's connection until the
/// last of its followers has been sent it, so followers that read slowly keep that share
/// taken; what it costs the lead's connection is sharing only — its next read over the share
/// goes upstream and to its client as any read (`JoinMiss::OverHeld`), never refused.
pub const CONNECTION_SHARE: u64 = 8;

impl Joins {
    /// No read in flight; answers held counted in `held`.
    pub fn new(held: Arc<AtomicU64>) -> Joins {
        Joins {
            flights: Mutex::default(),
            next_id: AtomicU64::new(1),
            held,
        }
    }

    /// Enters `read`: it joins a twin the freshness rules allow, or leads one. A twin is
    /// joined without a review only when it is of the same sender and was sent at most
    /// `by.within` before the read arrived (or is still to be sent): the apiserver's own
    /// authorization of it is then as fresh as a review's. Otherwise it is joined only when
    /// `by.reviewed`, and without that the read is [`Entered::Unreviewed`].
    pub fn enter(
        self: &Arc<Self>,
        read: &Joinable,
        by: Entering,
        metrics: &JoinMetrics,
    ) -> Entered {
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        let twins = flights.entry(read.key.clone()).or_default();
        let joined = match read.freshness {
            Freshness::AnyTwin => twins.sent.as_ref().or(twins.waiting.as_ref()),
            // Not sent yet: sent after this read arrived.
            Freshness::SentAfterArrival => twins.waiting.as_ref(),
        };
        if let Some(flight) = joined {
            let same_sender = flight.sender == read.sender;
            let authorized_lately = flight
                .sent_at
                .is_none_or(|at| by.arrived.saturating_duration_since(at) <= by.within);
            if !(by.reviewed || same_sender && authorized_lately) {
                return Entered::Unreviewed;
            }
            flight.followers.fetch_add(1, Ordering::AcqRel);
            return Entered::Follows(Follow {
                answer: flight.answer.clone(),
                same_sender,
            });
        }
        let (tx, rx) = watch::channel(None);
        let mut flight = Flight {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            answer: rx,
            followers: Arc::default(),
            sender: read.sender.clone(),
            sent_at: None,
        };
        let lead = |after| Lead {
            joins: self.clone(),
            key: read.key.clone(),
            id: flight.id,
            answer: tx,
            followers: flight.followers.clone(),
            after,
            published: false,
            abandoned: metrics.missed_series(JoinMiss::Abandoned),
        };
        let entered = match &twins.sent {
            // A consistent read while its twin is in flight: the next twin, sent once that
            // one has answered.
            Some(sent) => {
                let lead = lead(Some(sent.answer.clone()));
                twins.waiting = Some(flight);
                lead
            }
            None => {
                let lead = lead(None);
                flight.sent_at = Some(Instant::now());
                twins.sent = Some(flight);
                lead
            }
        };
        Entered::Leads(entered)
    }

    /// Forgets flight `id` of `key`, sent or waiting: no read joins it any more.
    fn close(&self, key: &JoinKey, id: u64) {
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        let Some(twins) = flights.get_mut(key) else {
            return;
        };
        if twins.sent.as_ref().is_some_and(|f| f.id == id) {
            twins.sent = None;
        }
        if twins.waiting.as_ref().is_some_and(|f| f.id == id) {
            twins.waiting = None;
        }
        if twins.sent.is_none() && twins.waiting.is_none() {
            flights.remove(key);
        }
    }

    /// Flight `id` of `key` (waiting) is being sent: it takes the place of the one sent.
    fn sending(&self, key: &JoinKey, id: u64) {
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(twins) = flights.get_mut(key) {
            if twins.waiting.as_ref().is_some_and(|f| f.id == id) {
                twins.sent = twins.waiting.take();
                if let Some(sent) = twins.sent.as_mut() {
                    sent.sent_at = Some(Instant::now());
                }
            }
        }
    }
}

impl Follow {
    /// Whether it joined a read of its own sender.
    pub fn same_sender(&self) -> bool {
        self.same_sender
    }

    /// The answer of the read joined, or `None` when it will not be shared (the read is then
    /// entered again, or sent on its own): a read of another sender takes only an answer that
    /// does not depend on who asked.
    pub async fn answer(mut self) -> Option<Arc<SharedAnswer>> {
        let answered = self.answer.wait_for(Option::is_some).await;
        let answer = answered.ok().and_then(|a| a.clone())?;
        (self.same_sender || crosses_senders(answer.status)).then_some(answer)
    }
}

impl Lead {
    /// Waits for its turn: a consistent read's twin is sent once the twin in flight when it
    /// was made has answered, or after [`TRAILING_WAIT`].
    pub async fn turn(&mut self) {
        if let Some(mut before) = self.after.take() {
            let _ = tokio::time::timeout(TRAILING_WAIT, before.wait_for(Option::is_some)).await;
            self.joins.sending(&self.key, self.id);
        }
    }

    /// Answers its followers and its own client from `resp`, the upstream answer `replica`
    /// gave: the response its client gets, and whether others got it too.
    pub async fn publish(
        mut self,
        (resp, replica): (Response<ResponseBody>, Option<Arc<Backend>>),
        limits: &Limits,
        metrics: &JoinMetrics,
        cluster: &str,
    ) -> (Response<ResponseBody>, bool) {
        // No read joins once the answer is in: the count is final.
        self.joins.close(&self.key, self.id);
        self.published = true;
        let followers = self.followers.load(Ordering::Acquire);
        if followers == 0 {
            return (resp, false);
        }
        if !shared_status(resp.status()) {
            metrics.missed(JoinMiss::Status);
            return (resp, false);
        }
        let (parts, body) = resp.into_parts();
        let charged = Charged::new(
            &self.joins.held,
            limits.connection.clone(),
            &metrics.held_bytes,
        );
        let read = read_counted(body, limits, &charged).await;
        let answer = match read {
            Read::Whole(body) => Arc::new(SharedAnswer {
                replica,
                status: parts.status,
                version: parts.version,
                headers: parts.headers,
                body: Arc::new(SharedBytes::new(body, charged)),
                resumes_from: None,
            }),
            Read::TooMuch { why, read, rest } => {
                metrics.missed(why);
                let body = ResponseBody::prefixed(read, *rest);
                return (Response::from_parts(parts, body), false);
            }
            Read::Broke => {
                metrics.missed(JoinMiss::Broken);
                return (unavailable("the apiserver's answer broke off"), false);
            }
        };
        metrics.led(cluster);
        let _ = self.answer.send(Some(answer.clone()));
        (answer.response(), true)
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        if !self.published {
            // Its client went away before the answer came: those waiting go on without it.
            self.joins.close(&self.key, self.id);
            if self.followers.load(Ordering::Acquire) > 0 {
                self.abandoned.inc();
            }
        }
    }
}

impl SharedAnswer {
    /// A client's response: the head and bytes of the answer.
    pub fn response(self: &Arc<Self>) -> Response<ResponseBody> {
        let mut resp = Response::new(ResponseBody::shared(self.body.clone()));
        *resp.status_mut() = self.status;
        *resp.version_mut() = self.version;
        *resp.headers_mut() = self.headers.clone();
        resp
    }

    /// The response of a client of another sender than the one the answer was for: only the
    /// headers that describe the body (`key::keep_crossing`): the audit ID, priority level and
    /// warnings of the request that went upstream are its sender's (the other sender's own
    /// request, never sent, was audited and classified by no one).
    pub fn response_across(self: &Arc<Self>) -> Response<ResponseBody> {
        let mut resp = self.response();
        keep_crossing(resp.headers_mut());
        resp
    }

    /// Its body.
    pub fn body(&self) -> &Bytes {
        self.body.bytes()
    }

    /// For a watch-list's initial events: the position they end at.
    pub fn resumes_from(&self) -> Option<u64> {
        self.resumes_from
    }

    /// A follower's response to a watch-list: the initial events, then `rest` (its own watch
    /// from [`Self::resumes_from`]); for another sender than the lead's, only the headers
    /// that describe the body (as [`Self::response_across`]).
    pub fn resumed_response(
        self: &Arc<Self>,
        rest: ResponseBody,
        across: bool,
    ) -> Response<ResponseBody> {
        let body = ResponseBody::shared_then(self.body.clone(), rest);
        let mut resp = Response::new(body);
        *resp.status_mut() = self.status;
        *resp.version_mut() = self.version;
        *resp.headers_mut() = self.headers.clone();
        if across {
            keep_crossing(resp.headers_mut());
        }
        resp
    }

    /// The replica that answered.
    pub fn replica(&self) -> Option<&Arc<Backend>> {
        self.replica.as_ref()
    }
}

/// Whether an answer with `status` goes to every read that waited on it: the apiserver's
/// answers to the read itself (found, not found, forbidden, expired), not kubegate's own or a
/// replica's failure, which another attempt may not meet.
fn shared_status(status: StatusCode) -> bool {
    status.is_success()
        || status == StatusCode::FORBIDDEN
        || status == StatusCode::NOT_FOUND
        || status == StatusCode::GONE
}

/// Whether an answer with `status` goes to the reads of other senders that joined it too
/// (their senders allowed the same by a review): the object or list, not found, expired — not a
/// 403, which is its own sender's (and names it).
fn crosses_senders(status: StatusCode) -> bool {
    shared_status(status) && status != StatusCode::FORBIDDEN
}

/// An answer body read for sharing.
enum Read {
    /// All of it, counted in the held bytes.
    Whole(Bytes),
    /// More than the bounds allow: what was read (no longer counted) and the rest.
    TooMuch {
        why: JoinMiss,
        read: Bytes,
        /// Boxed: the rare way out keeps the common one small.
        rest: Box<ResponseBody>,
    },
    /// It broke off.
    Broke,
}

/// Reads `body` whole, counting each chunk in `charged` as it comes, within `limits`.
async fn read_counted(mut body: ResponseBody, limits: &Limits, charged: &Charged) -> Read {
    let mut buf = BytesMut::new();
    let give_back = |n: usize| charged.give_back(n as u64);
    while !body.is_end_stream() {
        let Some(frame) = body.frame().await else {
            break;
        };
        let data = match frame.map(|f| f.into_data()) {
            Ok(Ok(data)) => data,
            // Trailers: an apiserver sends none on a read.
            Ok(Err(_)) => continue,
            Err(_) => {
                give_back(buf.len());
                return Read::Broke;
            }
        };
        let n = data.len() as u64;
        let too_large = buf.len() as u64 + n > limits.max_answer_bytes;
        let counted = !too_large
            && charged.take(
                n,
                limits.max_held_bytes,
                limits.max_held_bytes / CONNECTION_SHARE,
            );
        if !counted {
            give_back(buf.len());
            buf.extend_from_slice(&data);
            let why = if too_large {
                JoinMiss::TooLarge
            } else {
                JoinMiss::OverHeld
            };
            return Read::TooMuch {
                why,
                read: buf.freeze(),
                rest: Box::new(body),
            };
        }
        buf.extend_from_slice(&data);
    }
    Read::Whole(buf.freeze())
}

/// Events waiting for the lead's client while they are copied.
const CLIENT_QUEUE: usize = 16;

impl Lead {
    /// Answers the watch-lists that joined this one from `resp`, its upstream answer (a watch
    /// kubegate follows, in `framing`) from `replica`: the response its client gets — its
    /// stream as before — and whether others share it. A 200 that others joined is copied
    /// for them up to the end of its initial events; any other answer is shared as a read's
    /// ([`Lead::publish`]); a 200 nobody joined goes to its client alone.
    pub async fn publish_sync(
        mut self,
        (resp, replica): (Response<ResponseBody>, Option<Arc<Backend>>),
        framing: Option<Framing>,
        limits: &Limits,
        metrics: &JoinMetrics,
        cluster: &str,
    ) -> (Response<ResponseBody>, bool) {
        if resp.status() != StatusCode::OK {
            return self
                .publish((resp, replica), limits, metrics, cluster)
                .await;
        }
        let (parts, body) = resp.into_parts();
        let followers = self.followers.load(Ordering::Acquire);
        let (events, framing) = match (body, framing) {
            (ResponseBody::Watch(events), Some(framing)) if followers > 0 => (events, framing),
            (body, _) => {
                // Nobody waits: no read joins it any more, and nothing is copied.
                self.joins.close(&self.key, self.id);
                self.published = true;
                return (Response::from_parts(parts, body), false);
            }
        };
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
        let copy = Copying {
            head: (parts.status, parts.version, parts.headers.clone()),
            replica,
            framing,
            charged: Charged::new(
                &self.joins.held,
                limits.connection.clone(),
                &metrics.held_bytes,
            ),
            limits: Limits {
                max_answer_bytes: limits.max_answer_bytes,
                max_held_bytes: limits.max_held_bytes,
                connection: limits.connection.clone(),
                slow_client: limits.slow_client,
            },
            metrics: metrics.clone(),
            cluster: cluster.to_string(),
        };
        tokio::spawn(copy.run(self, events.into_receiver(), tx));
        let body = ResponseBody::Watch(WatchBody::new(rx));
        (Response::from_parts(parts, body), true)
    }
}

/// What copying a lead's initial events needs besides the lead.
struct Copying {
    head: (StatusCode, http::Version, http::HeaderMap),
    replica: Option<Arc<Backend>>,
    framing: Framing,
    limits: Limits,
    metrics: JoinMetrics,
    cluster: String,
    /// Where answer bytes are counted (the lead's table's, and its connection's).
    charged: Charged,
}

impl Copying {
    /// Forwards `upstream`'s events to the lead's client (`client`), copying them until the
    /// initial events have ended, then answers the followers; goes on forwarding until either
    /// end goes away.
    async fn run(
        self,
        lead: Lead,
        mut upstream: mpsc::Receiver<Bytes>,
        client: mpsc::Sender<Bytes>,
    ) {
        let mut lead = Some(lead);
        let mut client = Some(client);
        let mut decoder = Decoder::new(self.framing);
        let mut copied = BytesMut::new();
        while let Some(bytes) = upstream.recv().await {
            if let Some(l) = lead.take() {
                lead = self.copy(l, &bytes, &mut decoder, &mut copied);
            }
            if let Some(c) = &client {
                // A lead's client that reads nothing is let go alone: the followers' copy
                // goes on.
                let sent = tokio::time::timeout(self.limits.slow_client, c.send(bytes)).await;
                if !matches!(sent, Ok(Ok(()))) {
                    client = None;
                }
            }
            if client.is_none() && lead.is_none() {
                break;
            }
        }
        if lead.is_some() {
            // The watch ended before its initial events did: the followers go on alone.
            self.give_back(copied.len());
            self.metrics.missed(JoinMiss::Broken);
            if let Some(mut l) = lead {
                l.published = true;
                l.joins.close(&l.key, l.id);
            }
        }
    }

    /// Copies one event of `lead`'s: the lead back while its initial events go on, `None` once
    /// it has answered its followers (or cannot).
    fn copy(
        &self,
        mut lead: Lead,
        bytes: &Bytes,
        decoder: &mut Decoder,
        copied: &mut BytesMut,
    ) -> Option<Lead> {
        let n = bytes.len() as u64;
        let too_large = copied.len() as u64 + n > self.limits.max_answer_bytes;
        let counted = !too_large
            && self.charged.take(
                n,
                self.limits.max_held_bytes,
                self.limits.max_held_bytes / CONNECTION_SHARE,
            );
        let mut end = None;
        decoder.push(bytes);
        let mut unreadable = false;
        loop {
            match decoder.next_event() {
                Ok(Some(event)) if event.initial_events_end => {
                    end = event.resource_version.and_then(|rv| rv.parse::<u64>().ok());
                    unreadable = end.is_none();
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    unreadable = true;
                    break;
                }
            }
        }
        let missed = if !counted {
            Some(if too_large {
                JoinMiss::TooLarge
            } else {
                JoinMiss::OverHeld
            })
        } else if unreadable {
            self.give_back(n as usize);
            Some(JoinMiss::Broken)
        } else {
            None
        };
        if let Some(why) = missed {
            self.give_back(copied.len());
            self.metrics.missed(why);
            lead.published = true;
            lead.joins.close(&lead.key, lead.id);
            return None;
        }
        copied.extend_from_slice(bytes);
        let Some(from) = end else {
            return Some(lead);
        };
        // No watch-list joins once the initial events are in: the count is final.
        lead.joins.close(&lead.key, lead.id);
        lead.published = true;
        let (status, version, headers) = self.head.clone();
        let answer = Arc::new(SharedAnswer {
            replica: self.replica.clone(),
            status,
            version,
            headers,
            body: Arc::new(SharedBytes::new(
                std::mem::take(copied).freeze(),
                self.charged.clone(),
            )),
            resumes_from: Some(from),
        });
        self.metrics.led(&self.cluster);
        let _ = lead.answer.send(Some(answer));
        None
    }

    /// Gives back `n` bytes counted for the copy.
    fn give_back(&self, n: usize) {
        self.charged.give_back(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Kind;
    use http::Uri;

    /// A read arriving now, not reviewed, that joins its own sender's twins sent within 10 s.
    pub(super) fn arriving() -> Entering {
        Entering {
            reviewed: false,
            arrived: Instant::now(),
            within: Duration::from_secs(10),
        }
    }

    /// A read arriving now whose sender a review allowed.
    fn reviewed() -> Entering {
        Entering {
            reviewed: true,
            ..arriving()
        }
    }

    pub(super) fn joins() -> (Arc<Joins>, JoinMetrics, Arc<AtomicU64>) {
        let held = Arc::new(AtomicU64::new(0));
        let metrics = JoinMetrics::new(&prometheus::Registry::new());
        (Arc::new(Joins::new(held.clone())), metrics, held)
    }

    fn read(query: &str) -> Joinable {
        let uri: Uri = format!("https://kube/api/v1/services{query}")
            .parse()
            .unwrap();
        key::joinable(
            Kind::Anonymous,
            &http::Method::GET,
            &uri,
            &HeaderMap::new(),
            b"",
            None,
        )
        .unwrap()
    }

    fn answer(status: u16, body: &'static str) -> (Response<ResponseBody>, Option<Arc<Backend>>) {
        let mut resp = Response::new(ResponseBody::full(body));
        *resp.status_mut() = StatusCode::from_u16(status).unwrap();
        resp.headers_mut()
            .insert("audit-id", http::HeaderValue::from_static("a-1"));
        (resp, None)
    }

    const ROOMY: Limits = Limits {
        max_answer_bytes: 1 << 20,
        max_held_bytes: 1 << 20,
        connection: None,
        slow_client: Duration::from_secs(60),
    };

    async fn body_of(resp: Response<ResponseBody>) -> Bytes {
        resp.into_body().collect().await.unwrap().to_bytes()
    }

    fn leads(e: Entered) -> Lead {
        match e {
            Entered::Leads(lead) => lead,
            _ => panic!("expected to lead"),
        }
    }

    fn follows(e: Entered) -> Follow {
        match e {
            Entered::Follows(f) => f,
            _ => panic!("expected to follow"),
        }
    }

    #[tokio::test]
    async fn twins_in_flight_get_the_same_answer_and_its_bytes_are_given_back() {
        let (joins, m, held) = joins();
        let r = read("?resourceVersion=0");
        let lead = leads(joins.enter(&r, arriving(), &m));
        let a = follows(joins.enter(&r, arriving(), &m));
        let b = follows(joins.enter(&r, arriving(), &m));
        // Another query is another read.
        drop(leads(joins.enter(
            &read("?resourceVersion=1"),
            arriving(),
            &m,
        )));
        let (resp, shared) = lead.publish(answer(200, "items"), &ROOMY, &m, "c").await;
        assert!(shared);
        assert_eq!(held.load(Ordering::Acquire), 5);
        let (a, b) = (a.answer().await.unwrap(), b.answer().await.unwrap());
        for r in [resp, a.response(), b.response()] {
            assert_eq!(r.status(), 200);
            assert_eq!(r.headers()["audit-id"], "a-1");
            assert_eq!(body_of(r).await, "items");
        }
        drop((a, b));
        assert_eq!(held.load(Ordering::Acquire), 0, "every client was sent it");
        // Answered: the next read leads again.
        drop(leads(joins.enter(&r, arriving(), &m)));
    }

    #[tokio::test]
    async fn a_consistent_read_joins_only_a_twin_sent_after_it_arrived() {
        let (joins, m, _) = joins();
        let r = read("");
        let first = leads(joins.enter(&r, arriving(), &m));
        // Arrived after `first` was sent: the next twin, which waits for `first`...
        let mut second = leads(joins.enter(&r, arriving(), &m));
        // ...and which later arrivals join.
        let third = follows(joins.enter(&r, arriving(), &m));
        let turn = tokio::spawn(async move {
            second.turn().await;
            second
        });
        tokio::task::yield_now().await;
        assert!(!turn.is_finished(), "it waits for the twin in flight");
        let (_, shared) = first.publish(answer(200, "old"), &ROOMY, &m, "c").await;
        assert!(!shared, "nobody joined the first");
        let second = tokio::time::timeout(Duration::from_secs(5), turn)
            .await
            .unwrap()
            .unwrap();
        // Sent now: a consistent read arriving now waits for the next one.
        let fourth = leads(joins.enter(&r, arriving(), &m));
        second.publish(answer(200, "new"), &ROOMY, &m, "c").await;
        assert_eq!(third.answer().await.unwrap().body(), "new");
        drop(fourth);
    }

    #[tokio::test]
    async fn an_answer_not_shared_leaves_each_waiting_read_to_go_again() {
        let (joins, m, held) = joins();
        let r = read("?resourceVersion=0");
        for (status, limits) in [
            (503, ROOMY),
            (401, ROOMY),
            (
                200,
                Limits {
                    max_answer_bytes: 3,
                    max_held_bytes: 100,
                    connection: None,
                    slow_client: Duration::from_secs(60),
                },
            ),
            (
                200,
                Limits {
                    max_answer_bytes: 100,
                    max_held_bytes: 3,
                    connection: None,
                    slow_client: Duration::from_secs(60),
                },
            ),
        ] {
            let lead = leads(joins.enter(&r, arriving(), &m));
            let waiting = follows(joins.enter(&r, arriving(), &m));
            let (resp, shared) = lead
                .publish(answer(status, "items"), &limits, &m, "c")
                .await;
            assert!(!shared);
            assert!(waiting.answer().await.is_none(), "{status}");
            // Its own client still gets all of it.
            assert_eq!(body_of(resp).await, "items");
            assert_eq!(held.load(Ordering::Acquire), 0);
        }
    }

    /// One connection's leads hold at most an eighth of the bound: beyond, its answer goes to
    /// its own client alone, and another connection's lead still shares.
    #[tokio::test]
    async fn a_connections_leads_hold_at_most_its_share_of_the_bytes() {
        let (joins, m, held) = joins();
        let r = read("?resourceVersion=0");
        let mine = Arc::new(AtomicU64::new(0));
        let limits = |connection: &Arc<AtomicU64>| Limits {
            max_answer_bytes: 1 << 20,
            // A share of 10 bytes each.
            max_held_bytes: 80,
            connection: Some(connection.clone()),
            slow_client: Duration::from_secs(60),
        };
        let lead = leads(joins.enter(&r, arriving(), &m));
        let waiting = follows(joins.enter(&r, arriving(), &m));
        let big = "x".repeat(20);
        let big: &'static str = Box::leak(big.into_boxed_str());
        let (resp, shared) = lead
            .publish(answer(200, big), &limits(&mine), &m, "c")
            .await;
        assert!(!shared, "over the connection's share");
        assert!(waiting.answer().await.is_none());
        assert_eq!(body_of(resp).await, big, "its own client gets it whole");
        assert_eq!(mine.load(Ordering::Acquire), 0);
        assert_eq!(held.load(Ordering::Acquire), 0);
        // Within its share, it shares; what it holds is counted until sent.
        let other = Arc::new(AtomicU64::new(0));
        let lead = leads(joins.enter(&r, arriving(), &m));
        let waiting = follows(joins.enter(&r, arriving(), &m));
        let (resp, shared) = lead
            .publish(answer(200, "small"), &limits(&other), &m, "c")
            .await;
        assert!(shared);
        assert_eq!(other.load(Ordering::Acquire), 5);
        let theirs = waiting.answer().await.unwrap();
        drop((resp, theirs));
        assert_eq!(
            other.load(Ordering::Acquire),
            0,
            "given back with the last copy"
        );
    }

    #[tokio::test]
    async fn a_lead_whose_client_went_away_lets_the_next_read_lead() {
        let (joins, m, _) = joins();
        let r = read("?resourceVersion=0");
        let lead = leads(joins.enter(&r, arriving(), &m));
        let waiting = follows(joins.enter(&r, arriving(), &m));
        drop(lead);
        assert!(waiting.answer().await.is_none());
        drop(leads(joins.enter(&r, arriving(), &m)));
        assert_eq!(m.missed_series(JoinMiss::Abandoned).get(), 1);
    }

    /// A read of `sender` (a bearer token), its key across senders.
    fn read_of(sender: &str) -> Joinable {
        let uri: Uri = "https://kube/api/v1/services?resourceVersion=0"
            .parse()
            .unwrap();
        let h = key::bearer(sender);
        let ids = kubegate_wire::identity::IdentityHeaders::default();
        key::joinable(
            Kind::BearerToken,
            &http::Method::GET,
            &uri,
            &h,
            b"",
            Some(&ids),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn another_sender_joins_only_once_reviewed_and_never_takes_a_403() {
        let (joins, m, _) = joins();
        let (a, a2, b) = (read_of("a"), read_of("a"), read_of("b"));
        let lead = leads(joins.enter(&a, arriving(), &m));
        // The same sender joins at once; another needs a review first.
        let same = follows(joins.enter(&a2, arriving(), &m));
        assert!(matches!(
            joins.enter(&b, arriving(), &m),
            Entered::Unreviewed
        ));
        let other = follows(joins.enter(&b, reviewed(), &m));
        let (resp, shared) = lead.publish(answer(403, "no"), &ROOMY, &m, "c").await;
        assert!(shared);
        assert_eq!(resp.status(), 403);
        assert_eq!(same.answer().await.unwrap().status, 403);
        assert!(other.answer().await.is_none(), "a 403 is its sender's own");

        // An answer that does not depend on who asked goes to both.
        let lead = leads(joins.enter(&a, arriving(), &m));
        let other = follows(joins.enter(&b, reviewed(), &m));
        assert!(!other.same_sender());
        let (mut resp, _) = answer(200, "items");
        resp.headers_mut().insert(
            "x-kubernetes-pf-flowschema-uid",
            http::HeaderValue::from_static("fs-of-a"),
        );
        lead.publish((resp, None), &ROOMY, &m, "c").await;
        let shared = other.answer().await.unwrap();
        assert_eq!(shared.body(), "items");
        let theirs = shared.response_across();
        assert!(theirs
            .headers()
            .get("x-kubernetes-pf-flowschema-uid")
            .is_none());
        // Nothing of the lead's request crosses: not its audit ID (the other sender's
        // request was never audited), only what describes the body.
        assert!(theirs.headers().get("audit-id").is_none());
        assert_eq!(
            theirs
                .headers()
                .keys()
                .map(|k| k.as_str())
                .collect::<Vec<_>>(),
            Vec::<&str>::new()
        );
        assert_eq!(shared.response().headers()["audit-id"], "a-1");

        // A read of another sender leads a read of its own when nobody is in flight, with no
        // review: the apiserver authorizes the read it sends.
        drop(leads(joins.enter(&b, arriving(), &m)));
    }

    /// The apiserver authorized a twin when it was sent: a read of the same sender arriving
    /// longer after that than its window (`access_review.ttl`) is reviewed before it joins.
    #[tokio::test]
    async fn a_twin_authorized_long_before_a_read_arrived_is_joined_only_after_a_review() {
        let (joins, m, _) = joins();
        let r = read("?resourceVersion=0");
        let lead = leads(joins.enter(&r, arriving(), &m));
        let late = Entering {
            arrived: Instant::now() + Duration::from_secs(11),
            ..arriving()
        };
        assert!(matches!(joins.enter(&r, late, &m), Entered::Unreviewed));
        let late_reviewed = Entering {
            reviewed: true,
            ..late
        };
        let follow = follows(joins.enter(&r, late_reviewed, &m));
        lead.publish(answer(200, "items"), &ROOMY, &m, "c").await;
        assert!(follow.answer().await.is_some());
        // A consistent read's twin is sent after every read that joins it arrived.
        let consistent = read("");
        let first = leads(joins.enter(&consistent, arriving(), &m));
        let twin = leads(joins.enter(&consistent, arriving(), &m));
        assert!(matches!(
            joins.enter(&consistent, late, &m),
            Entered::Follows(_)
        ));
        drop((first, twin));
    }
}

#[cfg(test)]
mod watch_list_tests {
    use super::tests::arriving;
    use super::*;
    use crate::state::Kind;
    use http::Uri;

    fn sync() -> key::Joinable {
        // Not older than 3: any twin in flight will do (a consistent one's follower waits
        // for a twin sent after it, as a read's).
        let uri: Uri = "https://kube/api/v1/services?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=3&allowWatchBookmarks=true"
            .parse()
            .unwrap();
        let h = HeaderMap::new();
        key::watch_list(&key::WatchHead {
            kind: Kind::Anonymous,
            method: &http::Method::GET,
            uri: &uri,
            client_query: uri.query(),
            headers: &h,
            across: None,
        })
        .unwrap()
    }

    fn added(name: &str, rv: u64) -> Bytes {
        Bytes::from(format!(
            "{{\"type\":\"ADDED\",\"object\":{{\"kind\":\"Service\",\"metadata\":{{\"name\":\"{name}\",\"resourceVersion\":\"{rv}\"}}}}}}\n"
        ))
    }

    fn end(rv: u64) -> Bytes {
        Bytes::from(format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"Service\",\"metadata\":{{\"resourceVersion\":\"{rv}\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}}}}}}\n"
        ))
    }

    /// A lead and one follower of a watch-list, and the lead's upstream answer: a stream fed
    /// by the sender returned.
    fn started(
        joins: &Arc<Joins>,
        m: &JoinMetrics,
    ) -> (Lead, Follow, mpsc::Sender<Bytes>, Response<ResponseBody>) {
        let Entered::Leads(lead) = joins.enter(&sync(), arriving(), m) else {
            panic!("the first leads");
        };
        let Entered::Follows(follow) = joins.enter(&sync(), arriving(), m) else {
            panic!("the second follows");
        };
        let (tx, rx) = mpsc::channel(16);
        let mut resp = Response::new(ResponseBody::Watch(WatchBody::new(rx)));
        resp.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        (lead, follow, tx, resp)
    }

    /// Bounds no test's answer reaches.
    fn roomy() -> Limits {
        Limits {
            max_answer_bytes: 1 << 20,
            max_held_bytes: 1 << 20,
            connection: None,
            slow_client: Duration::from_secs(60),
        }
    }

    async fn next(resp: &mut Response<ResponseBody>) -> Bytes {
        tokio::time::timeout(Duration::from_secs(10), resp.body_mut().frame())
            .await
            .expect("in time")
            .expect("more")
            .unwrap()
            .into_data()
            .unwrap()
    }

    #[tokio::test]
    async fn followers_get_the_initial_events_and_where_they_end_and_the_lead_streams_on() {
        let (joins, m, held) = super::tests::joins();
        let (lead, follow, up, resp) = started(&joins, &m);
        let limits = roomy();
        let (mut resp, shared) = lead
            .publish_sync((resp, None), Some(Framing::JsonLines), &limits, &m, "c")
            .await;
        assert!(shared);
        for e in [added("a", 5), added("b", 7), end(9), added("c", 10)] {
            up.send(e).await.unwrap();
        }
        for e in [added("a", 5), added("b", 7), end(9), added("c", 10)] {
            assert_eq!(
                next(&mut resp).await,
                e,
                "the lead's client hears every event"
            );
        }
        let answer = follow.answer().await.expect("shared");
        assert_eq!(answer.resumes_from(), Some(9));
        let initial = [added("a", 5), added("b", 7), end(9)].concat();
        assert_eq!(
            answer.body().as_ref(),
            &initial[..],
            "up to the end, not after"
        );
        assert_eq!(held.load(Ordering::Acquire), initial.len() as u64);
        let resumed = answer.resumed_response(ResponseBody::full("next"), false);
        drop(answer);
        let body = resumed.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, [&initial[..], b"next"].concat());
        assert_eq!(held.load(Ordering::Acquire), 0, "given back once sent");
        // Its initial events in: the next watch-list leads.
        assert!(matches!(
            joins.enter(&sync(), arriving(), &m),
            Entered::Leads(_)
        ));
    }

    #[tokio::test]
    async fn initial_events_over_the_bound_leave_the_followers_to_go_alone() {
        let (joins, m, held) = super::tests::joins();
        let (lead, follow, up, resp) = started(&joins, &m);
        let limits = Limits {
            max_answer_bytes: (added("a", 5).len() + 10) as u64,
            max_held_bytes: 1 << 20,
            connection: None,
            slow_client: Duration::from_secs(60),
        };
        let (mut resp, _) = lead
            .publish_sync((resp, None), Some(Framing::JsonLines), &limits, &m, "c")
            .await;
        for e in [added("a", 5), added("b", 7), end(9)] {
            up.send(e).await.unwrap();
        }
        for e in [added("a", 5), added("b", 7), end(9)] {
            assert_eq!(next(&mut resp).await, e, "its own client is not cut");
        }
        assert!(
            follow.answer().await.is_none(),
            "entered again, or sent alone"
        );
        assert_eq!(held.load(Ordering::Acquire), 0);
        assert_eq!(m.missed_series(JoinMiss::TooLarge).get(), 1);
    }

    #[tokio::test]
    async fn a_watch_that_ends_before_its_initial_events_do_shares_nothing() {
        let (joins, m, held) = super::tests::joins();
        let (lead, follow, up, resp) = started(&joins, &m);
        let limits = roomy();
        let (_resp, _) = lead
            .publish_sync((resp, None), Some(Framing::JsonLines), &limits, &m, "c")
            .await;
        up.send(added("a", 5)).await.unwrap();
        drop(up);
        assert!(follow.answer().await.is_none());
        assert_eq!(held.load(Ordering::Acquire), 0);
        assert_eq!(m.missed_series(JoinMiss::Broken).get(), 1);
    }
}
