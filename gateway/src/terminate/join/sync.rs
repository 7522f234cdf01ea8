//! Joined watch-list initial syncs: a watch with `sendInitialEvents` (client-go's informers
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

use super::{JoinMetrics, JoinMiss, Lead, Limits, SharedAnswer};
use crate::state::Backend;
use crate::terminate::request::body::{ResponseBody, WatchBody};
use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode};
use kubegate_wire::framing::{Decoder, Framing};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

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
        let copy = Copy {
            head: (parts.status, parts.version, parts.headers.clone()),
            replica,
            framing,
            limits: Limits {
                max_answer_bytes: limits.max_answer_bytes,
                max_held_bytes: limits.max_held_bytes,
            },
            metrics: metrics.clone(),
            cluster: cluster.to_string(),
            held: self.joins.held.clone(),
        };
        tokio::spawn(copy.run(self, events.into_receiver(), tx));
        let body = ResponseBody::Watch(WatchBody::new(rx));
        (Response::from_parts(parts, body), true)
    }
}

/// What copying a lead's initial events needs besides the lead.
struct Copy {
    head: (StatusCode, http::Version, http::HeaderMap),
    replica: Option<Arc<Backend>>,
    framing: Framing,
    limits: Limits,
    metrics: JoinMetrics,
    cluster: String,
    /// Where answer bytes are counted (the lead's table's).
    held: Arc<AtomicU64>,
}

impl Copy {
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
                if c.send(bytes).await.is_err() {
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
        let held = &self.held;
        let n = bytes.len() as u64;
        let too_large = copied.len() as u64 + n > self.limits.max_answer_bytes;
        let counted = !too_large
            && held
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                    (h + n <= self.limits.max_held_bytes).then_some(h + n)
                })
                .is_ok();
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
        self.metrics.held_bytes.add(n as i64);
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
            body: std::mem::take(copied).freeze(),
            resumes_from: Some(from),
            held: self.held.clone(),
            gauge: self.metrics.held_bytes.clone(),
        });
        self.metrics.led(&self.cluster);
        let _ = lead.answer.send(Some(answer));
        None
    }

    /// Gives back `n` bytes counted for the copy.
    fn give_back(&self, n: usize) {
        self.held.fetch_sub(n as u64, Ordering::AcqRel);
        self.metrics.held_bytes.sub(n as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Kind;
    use crate::terminate::join::{key, Entered, Joins};
    use http::{HeaderMap, Uri};
    use http_body_util::BodyExt as _;
    use std::time::Duration;

    fn sync() -> key::Joinable {
        // Not older than 3: any twin in flight will do (a consistent one's follower waits
        // for a twin sent after it, as a read's).
        let uri: Uri = "https://kube/api/v1/services?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=3&allowWatchBookmarks=true"
            .parse()
            .unwrap();
        let h = HeaderMap::new();
        key::watch_list(
            Kind::Anonymous,
            &http::Method::GET,
            &uri,
            uri.query(),
            &h,
            None,
        )
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
    ) -> (
        Lead,
        crate::terminate::join::Follow,
        mpsc::Sender<Bytes>,
        Response<ResponseBody>,
    ) {
        let Entered::Leads(lead) = joins.enter(&sync(), false, m) else {
            panic!("the first leads");
        };
        let Entered::Follows(follow) = joins.enter(&sync(), false, m) else {
            panic!("the second follows");
        };
        let (tx, rx) = mpsc::channel(16);
        let mut resp = Response::new(ResponseBody::Watch(WatchBody::new(rx)));
        resp.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        (lead, follow, tx, resp)
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
        let held = Arc::new(AtomicU64::new(0));
        let m = JoinMetrics::new(&prometheus::Registry::new());
        let joins = Arc::new(Joins::new(held.clone()));
        let (lead, follow, up, resp) = started(&joins, &m);
        let limits = Limits {
            max_answer_bytes: 1 << 20,
            max_held_bytes: 1 << 20,
        };
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
        assert!(matches!(joins.enter(&sync(), false, &m), Entered::Leads(_)));
    }

    #[tokio::test]
    async fn initial_events_over_the_bound_leave_the_followers_to_go_alone() {
        let held = Arc::new(AtomicU64::new(0));
        let m = JoinMetrics::new(&prometheus::Registry::new());
        let joins = Arc::new(Joins::new(held.clone()));
        let (lead, follow, up, resp) = started(&joins, &m);
        let limits = Limits {
            max_answer_bytes: (added("a", 5).len() + 10) as u64,
            max_held_bytes: 1 << 20,
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
        let held = Arc::new(AtomicU64::new(0));
        let m = JoinMetrics::new(&prometheus::Registry::new());
        let joins = Arc::new(Joins::new(held.clone()));
        let (lead, follow, up, resp) = started(&joins, &m);
        let limits = Limits {
            max_answer_bytes: 1 << 20,
            max_held_bytes: 1 << 20,
        };
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
