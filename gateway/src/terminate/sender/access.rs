//! Whether a sender may read what another sender's request asks, before kubegate answers it
//! from that request (`join_reads.across_senders`, `shared_watches.across_senders`): a
//! SubjectAccessReview (`access_review`) for the sender and the request's attributes, sent as
//! kubegate, remembered for `access_review.ttl` by a SHA-256 of both.
//!
//! A review only ever lets a request share; without one a request goes upstream on its own,
//! as without sharing, and the apiserver authorizes it. So what cannot be had in time — every
//! one of `max_in_flight` reviews under way, the apiserver slow or failing — costs an upstream
//! request, never an answer: a flood of senders or attributes cannot make kubegate answer
//! anyone, only make it share less. One review per sender and attributes at a time, however
//! many requests wait on it.

use crate::telemetry::{AccessReviewResult, JoinMetrics};
use crate::terminate::sender::attributes::Attributes;
use crate::terminate::sender::failure::ReviewFailure;
use crate::terminate::sender::remembered::Remembered;
use kubegate_config::AccessReviewConfig;
use kubegate_wire::identity::UserInfo;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A warning about failed reviews is logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A sender and what it asks, as remembered: a SHA-256 of both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AccessKey([u8; 32]);

impl AccessKey {
    /// The key of `user` asking `attributes`: every field, length-prefixed.
    pub fn of(user: &UserInfo, attributes: &Attributes) -> AccessKey {
        let mut out = Vec::with_capacity(256);
        let mut part = |s: &str| {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        part(&user.user);
        part(&user.groups.len().to_string());
        for g in &user.groups {
            part(g);
        }
        match &user.uid {
            Some(uid) => {
                part("uid");
                part(uid);
            }
            None => part("no uid"),
        }
        part(&user.extra.len().to_string());
        for (k, values) in &user.extra {
            part(k);
            part(&values.len().to_string());
            for v in values {
                part(v);
            }
        }
        attributes.write_to(&mut out);
        let digest = ring::digest::digest(&ring::digest::SHA256, &out);
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        AccessKey(key)
    }
}

/// What kubegate knows of a sender's access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The apiserver allowed it.
    Allowed,
    /// The apiserver did not allow it.
    Denied,
    /// No answer in time: the request goes on its own.
    Unknown,
}

/// One review (a SubjectAccessReview): `Ok(true)` allowed.
pub type Reviewing = Pin<Box<dyn Future<Output = Result<bool, ReviewFailure>> + Send>>;

/// One cluster's access decisions, and the reviews under way.
#[derive(Default)]
pub struct AccessReviews {
    tables: Mutex<Tables>,
    /// Reviews under way for this cluster (`max_in_flight`).
    in_flight: AtomicU32,
    warned: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Tables {
    allowed: Remembered<AccessKey, ()>,
    denied: Remembered<AccessKey, ()>,
    pending: HashMap<AccessKey, watch::Receiver<Option<Access>>>,
    /// Counts lookups: the recency each entry keeps.
    clock: u64,
}

impl Tables {
    fn known(&mut self, key: &AccessKey, config: &AccessReviewConfig) -> Option<Access> {
        let now = Instant::now();
        self.clock += 1;
        let clock = self.clock;
        if self.allowed.get(key, config.ttl, now, clock).is_some() {
            return Some(Access::Allowed);
        }
        if self
            .denied
            .get(key, config.negative_ttl, now, clock)
            .is_some()
        {
            return Some(Access::Denied);
        }
        None
    }
}

impl AccessReviews {
    /// Whether the sender of `key` may do what it asks: at once when remembered, otherwise
    /// after a review (`review` sends it) within `config.timeout`; `Unknown` when none could
    /// be had (every review slot busy, no answer in time, the review failed).
    pub async fn access(
        self: &Arc<Self>,
        metrics: &JoinMetrics,
        key: AccessKey,
        config: &AccessReviewConfig,
        review: impl FnOnce() -> Reviewing,
    ) -> Access {
        let mut rx = {
            let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(known) = t.known(&key, config) {
                return known;
            }
            match t.pending.get(&key) {
                Some(rx) => rx.clone(),
                None => {
                    let max = config.max_in_flight;
                    let took = self
                        .in_flight
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                            (n < max).then_some(n + 1)
                        })
                        .is_ok();
                    if !took {
                        metrics.access_reviewed(AccessReviewResult::Skipped);
                        return Access::Unknown;
                    }
                    let (tx, rx) = watch::channel(None);
                    t.pending.insert(key, rx.clone());
                    self.begin(metrics, key, config, tx, review());
                    rx
                }
            }
        };
        let answered = tokio::time::timeout(config.timeout, rx.wait_for(Option::is_some)).await;
        match answered {
            Ok(Ok(access)) => access.unwrap_or(Access::Unknown),
            _ => Access::Unknown,
        }
    }

    /// Runs `reviewing` in a task of its own (it outlives a request that stops waiting),
    /// holding one of the in-flight slots until it answers.
    fn begin(
        self: &Arc<Self>,
        metrics: &JoinMetrics,
        key: AccessKey,
        config: &AccessReviewConfig,
        tx: watch::Sender<Option<Access>>,
        reviewing: Reviewing,
    ) {
        let reviews = self.clone();
        let metrics = metrics.clone();
        let config = *config;
        tokio::spawn(async move {
            let access = match reviewing.await {
                Ok(true) => {
                    metrics.access_reviewed(AccessReviewResult::Allowed);
                    Access::Allowed
                }
                Ok(false) => {
                    metrics.access_reviewed(AccessReviewResult::Denied);
                    Access::Denied
                }
                Err(failure) => {
                    metrics.access_reviewed(AccessReviewResult::Failed);
                    reviews.warn(&failure);
                    Access::Unknown
                }
            };
            let entries = reviews.remember(key, access, &config);
            metrics.access_review_cache_entries.set(entries as i64);
            reviews.in_flight.fetch_sub(1, Ordering::AcqRel);
            let _ = tx.send(Some(access));
        });
    }

    /// Records what the review of `key` found (nothing for `Unknown`: asked again next
    /// time); returns how many decisions are remembered.
    fn remember(&self, key: AccessKey, access: Access, config: &AccessReviewConfig) -> usize {
        let now = Instant::now();
        let max = config.max_entries as usize;
        let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        t.pending.remove(&key);
        t.clock += 1;
        let clock = t.clock;
        match access {
            Access::Allowed => {
                t.denied.remove(&key);
                t.allowed.insert(key, (), now, clock, max, config.ttl);
            }
            Access::Denied => {
                t.allowed.remove(&key);
                t.denied
                    .insert(key, (), now, clock, max, config.negative_ttl);
            }
            Access::Unknown => {}
        }
        t.allowed.len() + t.denied.len()
    }

    /// Logs a failed review, at most once a minute as a warning when it will not succeed by
    /// being asked again (a missing RBAC binding fails them all).
    fn warn(&self, failure: &ReviewFailure) {
        let why = match failure {
            ReviewFailure::Transient(why) => {
                tracing::debug!(error = %why, "SubjectAccessReview failed for now");
                return;
            }
            ReviewFailure::Refused(why) => why,
        };
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            tracing::debug!(error = %why, "SubjectAccessReview failed");
            return;
        }
        *warned = Some(Instant::now());
        tracing::warn!(error = %why, "SubjectAccessReview failed: reads and watches of different senders are not shared (docs/configuration.md, \"Sharing across senders\")");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubegate_wire::classify::ReadTarget;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            user: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            uid: None,
            extra: Default::default(),
        }
    }

    fn attributes(target: &str) -> Attributes {
        let uri: http::Uri = format!("https://k{target}").parse().unwrap();
        let read = ReadTarget::of(&uri).unwrap();
        Attributes::of(&read.info(&http::Method::GET), read.path(), &read.query())
    }

    #[test]
    fn every_part_of_the_sender_and_of_what_it_asks_keeps_keys_apart() {
        let pods = attributes("/api/v1/pods");
        let base = AccessKey::of(&user("a", &["g"]), &pods);
        assert_eq!(base, AccessKey::of(&user("a", &["g"]), &pods));
        let mut with_uid = user("a", &["g"]);
        with_uid.uid = Some("1".into());
        let mut with_extra = user("a", &["g"]);
        with_extra.extra.insert(
            "authentication.kubernetes.io/node-name".into(),
            vec!["n".into()],
        );
        let others = [
            AccessKey::of(&user("b", &["g"]), &pods),
            AccessKey::of(&user("a", &["h"]), &pods),
            AccessKey::of(&user("a", &["g", "h"]), &pods),
            AccessKey::of(&user("a", &[]), &pods),
            // A name and a group that run into each other are not one sender.
            AccessKey::of(&user("ag", &[]), &pods),
            AccessKey::of(&with_uid, &pods),
            AccessKey::of(&with_extra, &pods),
            AccessKey::of(
                &user("a", &["g"]),
                &attributes("/api/v1/pods?labelSelector=x"),
            ),
            AccessKey::of(&user("a", &["g"]), &attributes("/api/v1/namespaces/g/pods")),
        ];
        for (i, k) in others.iter().enumerate() {
            assert_ne!(*k, base, "case {i}");
        }
    }

    fn config(max_in_flight: u32) -> AccessReviewConfig {
        AccessReviewConfig {
            max_in_flight,
            timeout: Duration::from_secs(3600),
            ..AccessReviewConfig::default()
        }
    }

    fn key(n: &str) -> AccessKey {
        AccessKey::of(&user(n, &[]), &attributes("/api/v1/pods"))
    }

    /// A review that answers what `rx` is sent, counting itself in `sent`.
    fn review_from(
        rx: tokio::sync::oneshot::Receiver<Result<bool, ReviewFailure>>,
        sent: &Arc<std::sync::atomic::AtomicUsize>,
    ) -> impl FnOnce() -> Reviewing {
        let sent = sent.clone();
        move || {
            sent.fetch_add(1, Ordering::AcqRel);
            Box::pin(async move { rx.await.unwrap() })
        }
    }

    /// A cluster's access decisions, none yet, under [`config`]`(max_in_flight)`: with their
    /// metrics and a count of the reviews sent.
    struct Decisions {
        reviews: Arc<AccessReviews>,
        m: JoinMetrics,
        c: AccessReviewConfig,
        sent: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Decisions {
        fn new(max_in_flight: u32) -> Decisions {
            Decisions {
                reviews: Arc::new(AccessReviews::default()),
                m: JoinMetrics::new(&prometheus::Registry::new()),
                c: config(max_in_flight),
                sent: Arc::default(),
            }
        }

        /// What sender `who` gets, `review` deciding if nothing is known.
        async fn access(&self, who: &str, review: impl FnOnce() -> Reviewing) -> Access {
            self.reviews
                .access(&self.m, key(who), &self.c, review)
                .await
        }

        /// Sender `who` asking in a task of its own, its review sent and waiting for the
        /// answer given on the channel returned.
        async fn waiting(
            &self,
            who: &'static str,
        ) -> (
            tokio::sync::oneshot::Sender<Result<bool, ReviewFailure>>,
            tokio::task::JoinHandle<Access>,
        ) {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let review = review_from(rx, &self.sent);
            let (reviews, m, c) = (self.reviews.clone(), self.m.clone(), self.c);
            let asked = tokio::spawn(async move { reviews.access(&m, key(who), &c, review).await });
            tokio::task::yield_now().await;
            (tx, asked)
        }

        fn sent(&self) -> usize {
            self.sent.load(Ordering::Acquire)
        }
    }

    fn no_review() -> Reviewing {
        panic!("the answer is remembered: no review")
    }

    #[tokio::test]
    async fn one_review_answers_everyone_waiting_and_is_remembered() {
        let d = Decisions::new(16);
        let (tx, first) = d.waiting("a").await;
        // A second request of the same sender and attributes waits on the same review.
        let (_unused, second) = d.waiting("a").await;
        tx.send(Ok(false)).unwrap();
        assert_eq!(first.await.unwrap(), Access::Denied);
        assert_eq!(second.await.unwrap(), Access::Denied);
        assert_eq!(d.sent(), 1);
        assert_eq!(d.access("a", no_review).await, Access::Denied);
        assert_eq!(d.m.access_review_cache_entries.get(), 1);
    }

    #[tokio::test]
    async fn beyond_max_in_flight_or_after_a_failure_nothing_is_known() {
        let d = Decisions::new(1);
        let (tx, pending) = d.waiting("a").await;
        // The one slot is taken: another sender is not reviewed, and goes on its own.
        assert_eq!(d.access("b", no_review).await, Access::Unknown);
        tx.send(Err(ReviewFailure::Transient("503".into())))
            .unwrap();
        assert_eq!(pending.await.unwrap(), Access::Unknown);
        // A failure is not remembered: the next request is reviewed again.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tx.send(Ok(true)).unwrap();
        assert_eq!(
            d.access("a", review_from(rx, &d.sent)).await,
            Access::Allowed
        );
        assert_eq!(d.sent(), 2);
    }
}
