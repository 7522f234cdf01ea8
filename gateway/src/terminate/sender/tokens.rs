//! Naming bearer-token clients. Every in-cluster controller authenticates with a token, and
//! a `dispatch` rule on `users`, `groups` or `service_accounts` can only take a request whose
//! sender kubegate can name. kubegate asks the apiserver who a token belongs to with a
//! TokenReview (`authentication.k8s.io/v1`), sent as its own front-proxy identity (user
//! `kubegate`, which needs the `system:auth-delegator` ClusterRole), and remembers the answer
//! by a SHA-256 of the token — the token itself is never kept, logged or counted.
//!
//! The name only decides which rule a request falls under and what the access log and the
//! status page say. The token is forwarded untouched and the apiserver authenticates it as
//! always: kubegate asserts nothing on a token client's behalf.
//!
//! What a flood of tokens cannot do (each distinct bogus token costs a review):
//! - **Evict names.** Named tokens and tokens the apiserver did not accept are kept in two
//!   tables, each bounded by `max_entries` and least-recently-used within itself: unknown
//!   tokens only ever push out other unknown tokens.
//! - **Starve another client.** The cluster's `max_in_flight` review slots are shared by
//!   source (an IPv4 address, an IPv6 /64), in turn, first come first served within each
//!   (`review_queue`): forty connections of never-seen tokens from one address delay another
//!   address's new token by at most one review, and a quarter of the slots is kept for
//!   renewals of names kubegate knows. Requests carrying the same token wait for one review,
//!   registered before it waits for a slot.
//! - **Take a known client's name.** A name stays usable for rules and the access log for
//!   [`STALE_FOR`] past its TTL while its renewal is under way ([`Naming::Renewing`]): a
//!   client kubegate named never turns unnamed because strangers keep the reviews busy. Only a
//!   name reviewed within its TTL lets a request share another's answer (`Naming::fresh`).
//! - **Switch rules off.** A request whose review could not be had in time (every slot busy,
//!   the apiserver slow, or answering 429/5xx) is [`Naming::Unreviewed`]: where a rule names
//!   senders, `handle` answers it 429 with `Retry-After` instead of letting it pass as if no
//!   rule named it. A review the apiserver refused for good (kubegate not authorized, an
//!   unreadable answer) leaves the client unnamed, logged with the apiserver's own words.
//!
//! A named token the apiserver answers 401 for is forgotten at once ([`TokenReviews::forget`]):
//! a revoked token does not keep its name for the rest of its TTL. One review per token at a
//! time, however many requests carry it. A warm lookup hashes the token and takes one lock.

use crate::state::Gateway;
use crate::telemetry::TokenReviewResult;
use crate::terminate::sender::failure::ReviewFailure;
use crate::terminate::sender::remembered::Remembered;
use crate::terminate::sender::review_queue::{ReviewQueue, Waiting};
use kubegate_config::TokenReviewConfig;
use kubegate_wire::identity::UserInfo;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Longest a review holds its slot: beyond an authenticator's own limits (a token webhook's
/// default is 10 s), so that a replica that stopped answering gives the slot back.
const REVIEW_LIMIT: Duration = Duration::from_secs(15);

/// A warning about failed reviews is logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How long past its TTL a name kubegate reviewed still names its client for rules and the
/// access log while its renewal is under way (or cannot be had): a token's user never changes,
/// and a revoked token's 401 forgets the name at once.
pub const STALE_FOR: Duration = Duration::from_secs(3600);

/// A token, as it is remembered: its SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `token`.
    pub fn of(token: &str) -> TokenHash {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(digest.as_ref());
        TokenHash(out)
    }
}

/// One review of a token (`token_review::review`): `Ok(Some)` named, `Ok(None)` not accepted.
pub type Reviewing = Pin<Box<dyn Future<Output = Result<Option<UserInfo>, ReviewFailure>> + Send>>;

/// Who a request's bearer token names, as far as kubegate could learn in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Naming {
    /// The apiserver named its user within the review TTL, and has not refused it since.
    Named(Arc<UserInfo>),
    /// The apiserver named its user before; its renewal did not answer in time. The name for
    /// rules and the access log, never for sharing another's answer.
    Renewing(Arc<UserInfo>),
    /// The apiserver did not accept the token, refused the review for good, or reviews are
    /// off: no name, and none coming.
    Unnamed,
    /// No answer in time (kubegate's reviews busy, the apiserver slow or overloaded): the
    /// name is unknown, not absent.
    Unreviewed,
}

impl Naming {
    /// The user named, if any (reviewed within its TTL, or renewing).
    pub fn user(&self) -> Option<&Arc<UserInfo>> {
        match self {
            Naming::Named(u) | Naming::Renewing(u) => Some(u),
            _ => None,
        }
    }

    /// The user named by a review within its TTL: who may share another's answer.
    pub fn fresh(&self) -> Option<&Arc<UserInfo>> {
        match self {
            Naming::Named(u) => Some(u),
            _ => None,
        }
    }
}

/// What kubegate knows of the tokens it has seen.
pub struct TokenReviews {
    tables: Mutex<Tables>,
    /// Counts the named tokens the apiserver refused since (`forget`): each change wakes the
    /// shared watches of token clients, which leave if theirs was refused.
    refusals: watch::Sender<u64>,
    /// The review slots (`max_in_flight`), shared by source.
    queue: Arc<ReviewQueue>,
    warned: Mutex<Option<Instant>>,
}

impl Default for TokenReviews {
    fn default() -> TokenReviews {
        TokenReviews {
            tables: Mutex::default(),
            refusals: watch::Sender::new(0),
            queue: Arc::default(),
            warned: Mutex::default(),
        }
    }
}

/// The two remembered tables and the reviews under way.
#[derive(Default)]
struct Tables {
    named: Remembered<TokenHash, Arc<UserInfo>>,
    /// Tokens the apiserver did not accept (or a review refused for good).
    unnamed: Remembered<TokenHash, ()>,
    /// Named tokens the apiserver then answered 401 for, and when: no shared answer reaches
    /// a request of theirs that arrived before.
    refused: Remembered<TokenHash, Instant>,
    /// One review per token under way (waiting for its slot, or sent).
    pending: HashMap<TokenHash, watch::Receiver<Option<Naming>>>,
    /// Tokens with no name the apiserver refused while their review was under way, and when:
    /// its answer does not name them. Apart from `refused`, and forgotten with the review, so
    /// that a flood of bogus tokens pushes no real refusal out.
    refused_under_review: HashMap<TokenHash, Instant>,
    /// Counts lookups: the recency each entry keeps.
    clock: u64,
}

impl Tables {
    /// The apiserver refused `key` at `now`: its name goes, and the refusal is remembered if it
    /// had one, or until its review answers if one is under way (a name it brings comes from
    /// before the refusal); says whether it had a name.
    fn refuse(&mut self, key: &TokenHash, now: Instant, config: &TokenReviewConfig) -> bool {
        let named = self.named.remove(key);
        if named {
            self.clock += 1;
            let clock = self.clock;
            // Kept as long as a name is kept: a request named by it, or a fed watch, may be
            // about still.
            let max = config.max_entries as usize;
            self.refused
                .insert(*key, now, now, clock, max, config.ttl + STALE_FOR);
        } else if self.pending.contains_key(key) {
            self.refused_under_review.insert(*key, now);
        }
        named
    }

    /// What is known of `key`: a remembered answer (marked as used), a review under way, a
    /// name due for renewal, or nothing.
    fn known(&mut self, key: &TokenHash, config: &TokenReviewConfig) -> Known {
        let now = Instant::now();
        self.clock += 1;
        let clock = self.clock;
        let stale = self.named.get_aged(key, config.ttl + STALE_FOR, now, clock);
        if let Some((user, age)) = &stale {
            if *age < config.ttl {
                return Known::Answer(Naming::Named(user.clone()));
            }
        }
        if self
            .unnamed
            .get(key, config.negative_ttl, now, clock)
            .is_some()
        {
            return Known::Answer(Naming::Unnamed);
        }
        let renewing = stale.map(|(user, _)| user);
        match self.pending.get(key) {
            Some(rx) => Known::Waiting(rx.clone(), renewing),
            None => match renewing {
                Some(user) => Known::Due(user),
                None => Known::Unknown,
            },
        }
    }
}

/// What a lookup found without sending anything.
enum Known {
    Answer(Naming),
    /// A review under way, and the name it renews, if any.
    Waiting(watch::Receiver<Option<Naming>>, Option<Arc<UserInfo>>),
    /// A name past its TTL, to renew.
    Due(Arc<UserInfo>),
    Unknown,
}

impl TokenReviews {
    /// Who `token` (hashed: `key`) belongs to, as far as the apiserver said: at once when
    /// remembered, otherwise after a review, all within `config.timeout` (waiting first for a
    /// slot of the cluster's, shared by `source` address: `review_queue`). A name due for
    /// renewal is renewed ahead of new tokens, and stays the client's name meanwhile
    /// ([`Naming::Renewing`]). `review` sends a review of the token it is given, when one is
    /// needed.
    pub async fn name(
        self: &Arc<Self>,
        gw: &Gateway,
        key: TokenHash,
        token: &str,
        config: &TokenReviewConfig,
        source: IpAddr,
        review: impl FnOnce(String) -> Reviewing,
    ) -> Naming {
        if !config.enabled {
            return Naming::Unnamed;
        }
        let deadline = tokio::time::Instant::now() + config.timeout;
        let (waiting, renewing) = match self.known(&key, config) {
            Known::Answer(naming) => return naming,
            Known::Waiting(rx, renewing) => (rx, renewing),
            Known::Due(user) => {
                let rx = self.begin(
                    gw,
                    key,
                    config,
                    (source, Waiting::Renewal, deadline),
                    || review(token.to_string()),
                );
                (rx, Some(user))
            }
            Known::Unknown => {
                let rx = self.begin(gw, key, config, (source, Waiting::New, deadline), || {
                    review(token.to_string())
                });
                (rx, None)
            }
        };
        still_named(outcome(waiting, deadline).await, renewing)
    }

    /// What the tables answer for `key` now, without a review (reviews off: unnamed);
    /// `None` when only a review can tell (`name`).
    pub fn named_now(&self, key: &TokenHash, config: &TokenReviewConfig) -> Option<Naming> {
        if !config.enabled {
            return Some(Naming::Unnamed);
        }
        match self.known(key, config) {
            Known::Answer(naming) => Some(naming),
            Known::Waiting(..) | Known::Due(_) | Known::Unknown => None,
        }
    }

    /// What the tables say of `key` now.
    fn known(&self, key: &TokenHash, config: &TokenReviewConfig) -> Known {
        let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        t.known(key, config)
    }

    /// The review of `key` under way: the one another request started, or one started now —
    /// registered before it waits for a slot, so that requests carrying the same token wait
    /// for that one review rather than each for a slot of its own. It runs in a task of its
    /// own (it outlives a request that stops waiting): a slot of `source`'s for a review of
    /// `kind` by `deadline`, then `reviewing()`; no slot in time answers `Unreviewed`.
    fn begin(
        self: &Arc<Self>,
        gw: &Gateway,
        key: TokenHash,
        config: &TokenReviewConfig,
        (source, kind, deadline): (IpAddr, Waiting, tokio::time::Instant),
        reviewing: impl FnOnce() -> Reviewing,
    ) -> watch::Receiver<Option<Naming>> {
        let (tx, rx) = {
            let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
            match t.known(&key, config) {
                Known::Unknown | Known::Due(_) => {}
                Known::Waiting(rx, _) => return rx,
                // Answered meanwhile: a receiver that holds the answer.
                Known::Answer(naming) => return watch::channel(Some(naming)).1,
            }
            let (tx, rx) = watch::channel(None);
            t.pending.insert(key, rx.clone());
            (tx, rx)
        };
        let reviewing = reviewing();
        let tokens = self.clone();
        let metrics = gw.metrics_shared();
        let config = *config;
        tokio::spawn(async move {
            let started = Instant::now();
            let slot = tokens
                .queue
                .acquire(source, kind, config.max_in_flight, deadline)
                .await;
            let naming = match slot {
                None => {
                    metrics.terminate.token_reviewed(TokenReviewResult::Skipped);
                    Naming::Unreviewed
                }
                Some(slot) => {
                    let answered = tokio::time::timeout(REVIEW_LIMIT, reviewing)
                        .await
                        .unwrap_or_else(|_| {
                            Err(ReviewFailure::Transient("no answer in time".to_string()))
                        });
                    let naming = match answered {
                        Ok(Some(user)) => {
                            metrics.terminate.token_reviewed(TokenReviewResult::Named);
                            Naming::Named(Arc::new(user))
                        }
                        Ok(None) => {
                            metrics
                                .terminate
                                .token_reviewed(TokenReviewResult::Rejected);
                            Naming::Unnamed
                        }
                        Err(ReviewFailure::Refused(why)) => {
                            metrics.terminate.token_reviewed(TokenReviewResult::Failed);
                            tokens.warn(&why);
                            Naming::Unnamed
                        }
                        Err(ReviewFailure::Transient(why)) => {
                            metrics.terminate.token_reviewed(TokenReviewResult::Failed);
                            tracing::debug!(error = %why, "TokenReview failed for now");
                            Naming::Unreviewed
                        }
                    };
                    drop(slot);
                    naming
                }
            };
            let entries = tokens.remember(key, &naming, started, &config);
            metrics
                .terminate
                .token_review_cache_entries
                .set(entries as i64);
            let _ = tx.send(Some(naming));
        });
        rx
    }

    /// Records what the review of `key` begun at `started` found (nothing for `Unreviewed`:
    /// asked again next time; nor a name when the apiserver refused the token since the review
    /// began: its 401 is the newer word); returns how many tokens are remembered.
    fn remember(
        &self,
        key: TokenHash,
        naming: &Naming,
        started: Instant,
        config: &TokenReviewConfig,
    ) -> usize {
        let now = Instant::now();
        let max = config.max_entries as usize;
        let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        t.pending.remove(&key);
        let refused_under_review = t.refused_under_review.remove(&key);
        t.clock += 1;
        let clock = t.clock;
        let refused_since_started = refused_under_review.is_some_and(|at| at >= started)
            || t.refused
                .get(&key, config.ttl + STALE_FOR, now, clock)
                .is_some_and(|at| at >= started);
        match naming {
            Naming::Named(_) if refused_since_started => {}
            Naming::Named(user) => {
                t.unnamed.remove(&key);
                // Kept past its TTL too, as the name of a client whose renewal is under way.
                t.named
                    .insert(key, user.clone(), now, clock, max, config.ttl + STALE_FOR);
            }
            Naming::Unnamed => {
                // A renewal the apiserver refused: no name any more, and its requests leave
                // every join and shared watch, as after a 401.
                if t.refuse(&key, now, config) {
                    self.refusals.send_modify(|n| *n += 1);
                }
                t.unnamed
                    .insert(key, (), now, clock, max, config.negative_ttl);
            }
            // Renewing is never a review's answer; nothing is learned from no answer.
            Naming::Renewing(_) | Naming::Unreviewed => {}
        }
        t.named.len() + t.unnamed.len()
    }

    /// Forgets the name of `key`: the apiserver answered 401 for it (revoked, expired). Its
    /// requests that arrived before leave every join and shared watch ([`Self::refused_since`],
    /// [`Self::revocation`]).
    pub fn forget(&self, key: &TokenHash, config: &TokenReviewConfig) -> bool {
        let forgotten = {
            let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
            t.refuse(key, Instant::now(), config)
        };
        if forgotten {
            self.refusals.send_modify(|n| *n += 1);
        }
        forgotten
    }

    /// Whether the apiserver refused `key` (401) at or after `since`.
    pub fn refused_since(
        &self,
        key: &TokenHash,
        since: Instant,
        config: &TokenReviewConfig,
    ) -> bool {
        let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        t.clock += 1;
        let clock = t.clock;
        t.refused
            .get(key, config.ttl + STALE_FOR, Instant::now(), clock)
            .is_some_and(|at| at >= since)
    }

    /// Completes once the apiserver refuses `key` (401) after `since`: what ends a shared
    /// watch of a token client whose token was revoked.
    pub fn revocation(
        self: &Arc<Self>,
        key: TokenHash,
        since: Instant,
        config: TokenReviewConfig,
    ) -> impl Future<Output = ()> + Send + 'static {
        let (tokens, mut refusals) = (self.clone(), self.refusals.subscribe());
        async move {
            // Refused between `since` and now: no change is coming to say so.
            if tokens.refused_since(&key, since, &config) {
                return;
            }
            while refusals.changed().await.is_ok() {
                if tokens.refused_since(&key, since, &config) {
                    return;
                }
            }
            std::future::pending().await
        }
    }

    /// Logs a review refused for good, at most once a minute (a missing RBAC binding fails
    /// them all).
    fn warn(&self, why: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            tracing::debug!(error = %why, "TokenReview failed");
            return;
        }
        *warned = Some(Instant::now());
        tracing::warn!(error = %why, "TokenReview failed: bearer-token clients stay unnamed for dispatch rules and the access log (docs/configuration.md, \"Naming token clients\")");
    }
}

/// `naming`, or the name being renewed when the renewal gave none in time.
fn still_named(naming: Naming, renewing: Option<Arc<UserInfo>>) -> Naming {
    match (naming, renewing) {
        (Naming::Unreviewed, Some(user)) => Naming::Renewing(user),
        (naming, _) => naming,
    }
}

/// The review's answer, or `Unreviewed` if none came by `deadline`.
async fn outcome(
    mut rx: watch::Receiver<Option<Naming>>,
    deadline: tokio::time::Instant,
) -> Naming {
    if let Some(naming) = &*rx.borrow() {
        return naming.clone();
    }
    match tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await {
        Ok(Ok(naming)) => naming.clone().unwrap_or(Naming::Unreviewed),
        _ => Naming::Unreviewed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_remembered_by_their_hash_only() {
        assert_eq!(TokenHash::of("abc"), TokenHash::of("abc"));
        assert_ne!(TokenHash::of("abc"), TokenHash::of("abd"));
        // SHA-256("abc"), FIPS 180-2's example.
        assert_eq!(TokenHash::of("abc").0[..4], [0xba, 0x78, 0x16, 0xbf]);
    }

    fn alice() -> Arc<UserInfo> {
        Arc::new(UserInfo {
            user: "alice".into(),
            groups: vec![],
            uid: None,
            extra: Default::default(),
        })
    }

    /// Reviews that named token 0 alice, under `config`.
    fn alice_named(config: &TokenReviewConfig) -> (TokenReviews, Arc<UserInfo>) {
        let reviews = TokenReviews::default();
        let user = alice();
        reviews.remember(key(0), &Naming::Named(user.clone()), Instant::now(), config);
        (reviews, user)
    }

    fn key(i: u32) -> TokenHash {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&i.to_be_bytes());
        TokenHash(k)
    }

    #[test]
    fn unknown_tokens_never_push_out_named_ones() {
        let config = TokenReviewConfig {
            max_entries: 100,
            ..TokenReviewConfig::default()
        };
        let (reviews, user) = alice_named(&config);
        for i in 1..=10_000 {
            reviews.remember(key(i), &Naming::Unnamed, Instant::now(), &config);
        }
        match reviews.known(&key(0), &config) {
            Known::Answer(Naming::Named(u)) => assert_eq!(u, user),
            _ => panic!("alice's name was forgotten by a flood of unknown tokens"),
        }
        let t = reviews.tables.lock().unwrap();
        assert!(t.unnamed.len() <= 100, "{}", t.unnamed.len());
        assert_eq!(t.named.len(), 1);
        drop(t);
        let before = Instant::now();
        assert!(!reviews.refused_since(&key(0), before, &config));
        assert!(reviews.forget(&key(0), &config), "a 401 forgets the name");
        assert!(matches!(reviews.known(&key(0), &config), Known::Unknown));
        assert!(reviews.refused_since(&key(0), before, &config));
        assert!(!reviews.refused_since(&key(0), Instant::now() + Duration::from_secs(1), &config));
        assert!(
            !reviews.forget(&key(1), &config),
            "an unnamed token has no name to forget"
        );
        assert!(!reviews.refused_since(&key(1), before, &config));
    }

    #[test]
    fn a_name_past_its_ttl_is_renewed_and_stays_meanwhile() {
        let config = TokenReviewConfig {
            ttl: Duration::ZERO,
            ..TokenReviewConfig::default()
        };
        let (reviews, user) = alice_named(&config);
        // Due for renewal: not fresh, but still the client's name if no renewal answers.
        match reviews.known(&key(0), &config) {
            Known::Due(u) => assert_eq!(u, user),
            _ => panic!("a name past its TTL is due for renewal"),
        }
        let naming = still_named(Naming::Unreviewed, Some(user.clone()));
        assert_eq!(naming, Naming::Renewing(user.clone()));
        assert_eq!(naming.user(), Some(&user));
        assert_eq!(naming.fresh(), None, "a renewing name shares nothing");
        assert_eq!(
            still_named(Naming::Unnamed, Some(user.clone())),
            Naming::Unnamed
        );
        // The renewal refused: the name goes, and the refusal is as a 401's.
        let before = Instant::now();
        let refusals = reviews.refusals.subscribe();
        reviews.remember(key(0), &Naming::Unnamed, Instant::now(), &config);
        assert!(matches!(
            reviews.known(&key(0), &config),
            Known::Answer(Naming::Unnamed)
        ));
        assert!(reviews.refused_since(&key(0), before, &config));
        assert!(refusals.has_changed().unwrap(), "fed watches are told");
    }
}
