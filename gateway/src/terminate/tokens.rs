//! Naming bearer-token clients. Every in-cluster controller authenticates with a token, and
//! a `dispatch` rule on `users`, `groups` or `service_accounts` can only take a request whose
//! sender kubegate can name. kubegate asks the apiserver who a token belongs to with a
//! TokenReview (`authentication.k8s.io/v1`), sent as its own front-proxy identity (user
//! `kubegate`, which needs the `system:auth-delegator` ClusterRole), and remembers the answer
//! by a SHA-256 of the token — the token itself is never kept, logged or counted.
//!
//! The name only decides which rule a request falls under and what the access log and the
//! status page say. The token is forwarded untouched and the apiserver authenticates it as
//! always: kubegate asserts nothing on a token client's behalf. A review that is refused,
//! fails or takes longer than `terminate.token_review.timeout` leaves the client unnamed (the
//! request goes on; rules that name senders do not take it).
//!
//! Bounds: at most `max_entries` tokens are remembered (a full table first forgets expired
//! entries, then an arbitrary eighth); at most `max_in_flight` reviews are under way (a new
//! token beyond goes on unnamed and unremembered); one review per token at a time, however
//! many requests carry it. A warm lookup hashes the token and takes one lock, and allocates
//! nothing.

use crate::state::Gateway;
use crate::telemetry::TokenReviewResult;
use http::{header, HeaderMap};
use kubegate_config::TokenReviewConfig;
use kubegate_wire::identity::UserInfo;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A warning about refused reviews is logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A token, as it is remembered: its SHA-256.
type TokenHash = [u8; 32];

/// One review of a token (`token_review::review`): `Ok(Some)` named, `Ok(None)` not accepted,
/// `Err` the review failed, why.
pub type Reviewing = Pin<Box<dyn Future<Output = Result<Option<UserInfo>, String>> + Send>>;

/// What kubegate knows of the tokens it has seen.
#[derive(Default)]
pub struct TokenReviews {
    entries: Mutex<HashMap<TokenHash, Review>>,
    in_flight: AtomicU32,
    warned: Mutex<Option<Instant>>,
}

/// One token's review: under way until its channel holds the outcome.
struct Review {
    outcome: watch::Receiver<Option<Outcome>>,
    started: Instant,
}

/// What a review found, and when.
#[derive(Clone)]
struct Outcome {
    user: Option<Arc<UserInfo>>,
    at: Instant,
}

impl Review {
    /// Whether this entry no longer answers: its outcome is older than its TTL, or the review
    /// has been under way longer than any request would wait for it.
    fn stale(&self, config: &TokenReviewConfig, now: Instant) -> bool {
        match &*self.outcome.borrow() {
            Some(o) => {
                let ttl = if o.user.is_some() {
                    config.ttl
                } else {
                    config.negative_ttl
                };
                now.duration_since(o.at) >= ttl
            }
            None => now.duration_since(self.started) >= config.timeout * 4,
        }
    }
}

/// The token of an `Authorization: Bearer` header, as the apiserver's bearer-token
/// authenticator reads it: trimmed, the scheme in any case, the token the word after it.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = auth.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl TokenReviews {
    /// Who `token` belongs to, as far as the apiserver said: at once when remembered,
    /// otherwise after a review (at most `token_review.timeout`); `None` when unnamed.
    /// `review` sends a review of the token it is given, when one is needed.
    pub async fn name(
        self: &Arc<Self>,
        gw: &Gateway,
        token: &str,
        review: impl FnOnce(String) -> Reviewing,
    ) -> Option<Arc<UserInfo>> {
        let config = gw.config().load().terminate.token_review;
        if !config.enabled {
            return None;
        }
        let key = hash(token);
        let now = Instant::now();
        let mut review = Some(review);
        let mut waiting = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            match entries.get(&key) {
                Some(r) if !r.stale(&config, now) => r.outcome.clone(),
                _ => {
                    let reviewing = review.take().map(|r| r(token.to_string()));
                    let Some(reviewing) = reviewing.and_then(|r| self.begin(gw, &config, r)) else {
                        gw.metrics()
                            .terminate
                            .token_reviewed(TokenReviewResult::Skipped);
                        return None;
                    };
                    if entries.len() >= config.max_entries as usize {
                        forget_some(&mut entries, &config, now);
                    }
                    entries.insert(
                        key,
                        Review {
                            outcome: reviewing.clone(),
                            started: now,
                        },
                    );
                    gw.metrics()
                        .terminate
                        .token_review_cache_entries
                        .set(entries.len() as i64);
                    reviewing
                }
            }
        };
        if let Some(o) = &*waiting.borrow() {
            return o.user.clone();
        }
        let known = tokio::time::timeout(config.timeout, waiting.wait_for(Option::is_some)).await;
        match known {
            Ok(Ok(o)) => o.as_ref().and_then(|o| o.user.clone()),
            _ => None,
        }
    }

    /// Starts `reviewing` in a task of its own (the review outlives a request that stops
    /// waiting); `None` when `max_in_flight` reviews are under way.
    fn begin(
        self: &Arc<Self>,
        gw: &Gateway,
        config: &TokenReviewConfig,
        reviewing: Reviewing,
    ) -> Option<watch::Receiver<Option<Outcome>>> {
        let max = config.max_in_flight;
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        let (tx, rx) = watch::channel(None);
        let tokens = self.clone();
        let metrics = gw.metrics_shared();
        tokio::spawn(async move {
            let result = reviewing.await;
            tokens.in_flight.fetch_sub(1, Ordering::AcqRel);
            let user = match result {
                Ok(user) => {
                    metrics.terminate.token_reviewed(if user.is_some() {
                        TokenReviewResult::Named
                    } else {
                        TokenReviewResult::Rejected
                    });
                    user.map(Arc::new)
                }
                Err(why) => {
                    metrics.terminate.token_reviewed(TokenReviewResult::Failed);
                    tokens.warn(&why);
                    None
                }
            };
            let _ = tx.send(Some(Outcome {
                user,
                at: Instant::now(),
            }));
        });
        Some(rx)
    }

    /// Logs a failed review, at most once a minute (a missing RBAC binding fails them all).
    fn warn(&self, why: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            tracing::debug!(error = %why, "TokenReview failed");
            return;
        }
        *warned = Some(Instant::now());
        tracing::warn!(error = %why, "TokenReview failed: bearer-token clients stay unnamed for dispatch rules and the access log (kubegate's user needs the system:auth-delegator ClusterRole; docs/configuration.md, \"Naming token clients\")");
    }
}

/// Makes room in a full table: forgets stale entries, and if none were, an arbitrary eighth.
fn forget_some(entries: &mut HashMap<TokenHash, Review>, config: &TokenReviewConfig, now: Instant) {
    let before = entries.len();
    entries.retain(|_, r| !r.stale(config, now));
    if entries.len() == before {
        let drop: Vec<TokenHash> = entries.keys().take(before.div_ceil(8)).copied().collect();
        for k in drop {
            entries.remove(&k);
        }
    }
}

fn hash(token: &str) -> TokenHash {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_as_the_apiserver_reads_them() {
        let h = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        assert_eq!(bearer_token(&h("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&h("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&h("  BEARER abc  ")), Some("abc"));
        assert_eq!(bearer_token(&h("Bearer abc def")), Some("abc"));
        assert_eq!(
            bearer_token(&h("Bearer  abc")),
            None,
            "a space before the token"
        );
        assert_eq!(bearer_token(&h("Basic abc")), None);
        assert_eq!(bearer_token(&h("Bearer")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn tokens_are_remembered_by_their_hash_only() {
        assert_eq!(hash("abc"), hash("abc"));
        assert_ne!(hash("abc"), hash("abd"));
        // SHA-256("abc"), FIPS 180-2's example.
        assert_eq!(hash("abc")[..4], [0xba, 0x78, 0x16, 0xbf]);
    }

    #[test]
    fn a_full_table_forgets_the_stale_first_then_an_eighth() {
        let config = TokenReviewConfig::default();
        let now = Instant::now();
        let entry = |age: Duration, named: bool| {
            let (_tx, rx) = watch::channel(Some(Outcome {
                user: named.then(|| {
                    Arc::new(UserInfo {
                        user: "u".into(),
                        groups: vec![],
                    })
                }),
                at: now - age,
            }));
            Review {
                outcome: rx,
                started: now - age,
            }
        };
        let mut entries = HashMap::new();
        entries.insert([1; 32], entry(Duration::from_secs(1), true));
        entries.insert([2; 32], entry(Duration::from_secs(600), true));
        entries.insert([3; 32], entry(Duration::from_secs(30), false));
        forget_some(&mut entries, &config, now);
        assert_eq!(entries.keys().collect::<Vec<_>>(), [&[1; 32]]);
        for i in 0..16u8 {
            entries.insert([i + 10; 32], entry(Duration::from_secs(1), true));
        }
        forget_some(&mut entries, &config, now);
        assert_eq!(entries.len(), 17 - 3);
    }
}
