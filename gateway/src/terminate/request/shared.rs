//! A request answered from an identical request's upstream answer (`join`): a read joined to
//! a twin in flight, or leading one; a watch fed from a shared upstream watch, or opening
//! one. What is not shared goes as any request (`forward::send`). Every request that shares
//! passes the same checks, whoever sent the one it shares ([`Sharer`]): an identity valid now,
//! and the apiserver's authorization of its own sender — the twin's or feed's own upstream
//! request of the same sender within `access_review.ttl` of its arrival, or else a
//! SubjectAccessReview (`sender::access`); without that answer it goes upstream on its own.

use crate::state::Gateway;
use crate::terminate::cluster::mode::TerminateMode;
use crate::terminate::exchange::body::ResponseBody;
use crate::terminate::join::feeds::{self, FeedLimits, Revoked, SentBy};
use crate::terminate::join::key::{Feedable, JoinKey, Joinable, SenderKey};
use crate::terminate::join::{Entered as Joining, Entering, Lead, Limits, SharedAnswer};
use crate::terminate::request::forward::{send, Sending};
use crate::terminate::request::served::{Served, Sharing};
use crate::terminate::sender::access::{Access, AccessKey};
use crate::terminate::sender::access_review;
use crate::terminate::sender::attributes::Attributes;
use crate::terminate::sender::tokens::TokenHash;
use crate::terminate::upstream::upstreams::Upstreams;
use crate::terminate::watch::continuity as watch;
use http::{Response, StatusCode};
use kubegate_config::{AccessReviewConfig, TerminateConfig, TokenReviewConfig};
use kubegate_wire::framing::Framing;
use kubegate_wire::identity::UserInfo;
use kubegate_wire::position::{resumed_query, Asked};
use std::sync::Arc;
use std::time::Instant;

/// A read that identical reads may join: where it is entered, the bounds on its answer, and
/// who it is for.
pub(super) struct Joined<'a> {
    pub(super) mode: &'a TerminateMode,
    pub(super) read: Joinable,
    pub(super) limits: Limits,
    pub(super) sharer: Sharer<'a>,
}

impl<'a> Joined<'a> {
    /// `read`, entered in `mode`'s table for `sharer`, its answer within `limits`.
    pub(super) fn new(
        mode: &'a TerminateMode,
        read: Joinable,
        sharer: Sharer<'a>,
        limits: Limits,
    ) -> Joined<'a> {
        Joined {
            mode,
            read,
            limits,
            sharer,
        }
    }
}

/// Who a request answered from another's upstream request is for, as the apiserver would take
/// it now, and what it asks: every read that joins and every watch that is fed passes here
/// (`take_turn`, `send_fed`), whoever sent the request it shares. Its identity is valid now —
/// a certificate within its validity, a token a review named within `token_review.ttl`
/// (`handle` lets no other share) — and it shares only an answer the apiserver authorized for
/// its own sender within `access_review.ttl` before it arrived, or after a SubjectAccessReview
/// allowed its sender the same ([`Sharer::allowed`]); a 401 for its token since it arrived
/// takes it out ([`Sharer::refused`]).
#[derive(Clone)]
pub(super) struct Sharer<'a> {
    pub(super) mode: &'a TerminateMode,
    /// Who the apiserver takes the sender to be.
    pub(super) user: Arc<UserInfo>,
    /// What the request asks, as an authorizer reads it.
    pub(super) attributes: Arc<Attributes>,
    pub(super) config: &'a AccessReviewConfig,
    /// Its bearer token's hash, and the reviews' settings, for a token client.
    pub(super) token: Option<(TokenHash, &'a TokenReviewConfig)>,
    /// When the request arrived.
    pub(super) arrived: Instant,
}

impl Sharer<'_> {
    /// Whether the sender may do what the request asks (remembered, or reviewed now).
    async fn allowed(&self, gw: &Arc<Gateway>, upstreams: &Arc<Upstreams>) -> bool {
        let key = AccessKey::of(&self.user, &self.attributes);
        let (g, u) = (gw.clone(), upstreams.clone());
        let (user, attributes) = (self.user.clone(), self.attributes.clone());
        let review = move || -> crate::terminate::sender::access::Reviewing {
            Box::pin(access_review::review(g, u, user, attributes))
        };
        let metrics = &gw.metrics().joins;
        let access = self.mode.access().access(metrics, key, self.config, review);
        access.await == Access::Allowed
    }

    /// How it enters the joined reads: reviewed or not, when it arrived, and how fresh its own
    /// sender's twin must be.
    fn entering(&self, reviewed: bool) -> Entering {
        Entering {
            reviewed,
            arrived: self.arrived,
            within: self.config.ttl,
        }
    }

    /// Whether the apiserver refused its token (401) since it arrived.
    fn refused(&self) -> bool {
        self.token.as_ref().is_some_and(|(key, config)| {
            self.mode.tokens().refused_since(key, self.arrived, config)
        })
    }

    /// What ends a fed watch of it when the apiserver refuses its token.
    fn revoked(&self) -> Option<Revoked> {
        let (key, config) = self.token?;
        let (tokens, arrived, config) = (self.mode.tokens().clone(), self.arrived, *config);
        Some(Arc::new(move || {
            Box::pin(tokens.revocation(key, arrived, config))
        }))
    }
}

/// A watch that may be fed from a shared one: where it is entered, its key and what its client
/// asked, the bounds of a feed it opens, and how long that feed's upstream watch lasts (the
/// apiserver's `--min-request-timeout`, times a random factor in [1, 2)).
pub(super) struct Fed<'a> {
    pub(super) mode: &'a TerminateMode,
    pub(super) key: JoinKey,
    /// Its sender, when its key leaves the identity out.
    pub(super) sender: Option<SenderKey>,
    /// Who it is for: reviewed before a feed another sender opened, or its own sender longer
    /// ago than `access_review.ttl`, feeds it.
    pub(super) sharer: Sharer<'a>,
    pub(super) client: feeds::Client,
    pub(super) limits: FeedLimits,
    pub(super) lifetime: std::time::Duration,
    /// `terminate.slow_watch_timeout`.
    pub(super) slow_client: std::time::Duration,
}

impl<'a> Fed<'a> {
    /// `feedable`, as the watch `watch` asks it for `sharer`, entered in `mode`'s feeds
    /// within `terminate.shared_watches`.
    pub(super) fn new(
        mode: &'a TerminateMode,
        feedable: Feedable,
        sharer: Sharer<'a>,
        watch: &watch::Watch,
        terminate: &TerminateConfig,
    ) -> Fed<'a> {
        let s = &terminate.shared_watches;
        Fed {
            mode,
            key: feedable.key,
            sender: feedable.sender,
            client: feeds::Client {
                from: feedable.from,
                bookmarks: watch.asked.bookmarks,
                ends: watch.ends,
                revoked: sharer.revoked(),
            },
            sharer,
            limits: FeedLimits {
                window_events: s.window_events as usize,
                window_bytes: usize::try_from(s.window_bytes).unwrap_or(usize::MAX),
                max_lag_events: s.max_lag_events as usize,
                held_bytes_in_total: s.max_held_bytes,
            },
            lifetime: terminate.min_request_timeout,
            slow_client: terminate.slow_watch_timeout,
        }
    }
}

/// Feeds a watch from a shared one, opening the feed when there is none (`join::feeds`): its
/// client's response, or what it needs to be sent on its own when no feed can serve its
/// position.
pub(super) async fn send_fed(
    sending: Sending,
    served: &mut Served,
    fed: Fed<'_>,
) -> Result<Response<ResponseBody>, Sending> {
    // A long-running request holds its rule's slot only until its response starts.
    let sending = sending.unslotted();
    if fed.sharer.refused() {
        // Its token was refused since it arrived: the apiserver answers it.
        return Err(sending);
    }
    let gw = sending.gw.clone();
    let metrics = gw.metrics().joins.clone();
    let mut by = SentBy {
        sender: fed.sender.as_ref(),
        reviewed: false,
        arrived: fed.sharer.arrived,
        within: fed.sharer.config.ttl,
    };
    let opener = loop {
        let feeds = fed.mode.feeds();
        match feeds
            .enter((&fed.key, &fed.limits), by, &fed.client, &metrics)
            .await
        {
            feeds::Entered::Fed(Some(resp)) => {
                served.shared(Sharing::Fed, None);
                return Ok(*resp);
            }
            feeds::Entered::Fed(None) => return Err(sending),
            feeds::Entered::Opens(opener) => break opener,
            feeds::Entered::Unreviewed => {
                if by.reviewed || !fed.sharer.allowed(&gw, &sending.upstreams).await {
                    // Not allowed, or not known in time: a watch of its own, which the
                    // apiserver authorizes.
                    return Err(sending);
                }
                by.reviewed = true;
            }
        }
    };
    // The feed's upstream watch: from this client's position, with bookmarks, for as long as
    // the apiserver lets a watch run; kubegate follows it across replicas.
    let from = fed.client.from.to_string();
    let lasts = watch::lifetime(&Asked::from_query(None), fed.lifetime);
    let query = resumed_query(sending.outgoing.client_query(), Some(&from), lasts);
    let mut asked = Asked::from_query(Some(&query));
    asked.bookmarks = true;
    let feed_watch = watch::Watch {
        asked,
        ends: lasts.map(|d| Instant::now() + d),
        // Its reader is the feed, which never stops reading.
        slow_client: fed.slow_client,
    };
    let resp = send(sending.with_query(&query), served, Some(feed_watch), None).await;
    let framing = Framing::of_headers(resp.headers());
    let opened = resp.status() == StatusCode::OK;
    let resp = opener.open(
        resp,
        framing,
        (fed.client.from, fed.limits),
        &fed.client,
        &metrics,
    );
    if opened {
        served.shared(Sharing::Led, None);
    }
    Ok(resp)
}

/// Sends a watch-list that identical ones may join until its initial events have ended, or
/// joins one on its way (`Lead::publish_sync`): a follower gets the lead's initial events, then
/// watches on by itself from where they ended — fed from a shared watch when `fed` says how
/// (`shared_watches`), else upstream on its own.
pub(super) async fn send_synced(
    sending: Sending,
    served: &mut Served,
    joined: Joined<'_>,
    watch: watch::Watch,
    continued: Option<Fed<'_>>,
) -> Response<ResponseBody> {
    let gw = sending.gw.clone();
    let mut lead = match take_turn(&gw, &sending.upstreams, &joined).await {
        Turn::Leads(lead) => lead,
        Turn::Alone => return send(sending, served, Some(watch), None).await,
        Turn::Answered(answer, same_sender) => {
            served.shared(Sharing::Joined, answer.replica());
            let Some(from) = answer.resumes_from() else {
                // Not a stream (a 403, a 410): the answer itself, as a read's.
                return if same_sender {
                    answer.response()
                } else {
                    answer.response_across()
                };
            };
            // A long-running request holds its rule's slot only until its response starts.
            let rest = watch_on(sending.unslotted(), served, from, watch, continued);
            let rest = Box::pin(rest).await;
            if rest.status() != StatusCode::OK {
                return rest;
            }
            // Its access log line is the joined watch-list's (a fed watch on says `fed`): the
            // lead's audit ID is in the head it gets.
            served.shared(Sharing::Joined, answer.replica());
            return answer.resumed_response(rest.into_body(), !same_sender);
        }
    };
    lead.turn().await;
    let resp = send(sending, served, Some(watch), None).await;
    let framing = Framing::of_headers(resp.headers());
    let answered = (resp, served.replica.clone());
    let metrics = &gw.metrics().joins;
    let cluster = joined.mode.cluster().name();
    let (resp, shared) = lead
        .publish_sync(answered, framing, &joined.limits, metrics, cluster)
        .await;
    if shared {
        served.shared(Sharing::Led, None);
    }
    resp
}

/// A joined watch-list's watch after its initial events: from `from`, with the bookmarks its
/// client asked for, until its client's watch ends — fed from a shared watch (`continued`)
/// when one can serve it, else its own.
async fn watch_on(
    sending: Sending,
    served: &mut Served,
    from: u64,
    watch: watch::Watch,
    continued: Option<Fed<'_>>,
) -> Response<ResponseBody> {
    let sending = match continued {
        Some(mut fed) => {
            fed.client.from = from;
            match Box::pin(send_fed(sending, served, fed)).await {
                Ok(resp) => return resp,
                Err(unfed) => unfed,
            }
        }
        None => sending,
    };
    let from = from.to_string();
    let left = watch
        .ends
        .map(|ends| ends.saturating_duration_since(Instant::now()));
    let query = resumed_query(sending.outgoing.client_query(), Some(&from), left);
    let mut asked = watch.asked;
    asked.from = Some(from);
    asked.initial_events = false;
    let on = watch::Watch {
        asked,
        ends: watch.ends,
        slow_client: watch.slow_client,
    };
    send(sending.with_query(&query), served, Some(on), None).await
}

/// Times a read whose twin's answer was not shared is entered again (it may lead the next
/// twin) before it is sent on its own.
const JOIN_ATTEMPTS: usize = 3;

/// Sends a read that identical reads may join, or joins one already on its way (`join`).
pub(super) async fn send_joined(
    sending: Sending,
    served: &mut Served,
    joined: Joined<'_>,
) -> Response<ResponseBody> {
    let gw = sending.gw.clone();
    let mut lead = match take_turn(&gw, &sending.upstreams, &joined).await {
        Turn::Leads(lead) => lead,
        Turn::Alone => return send(sending, served, None, None).await,
        Turn::Answered(answer, same_sender) => {
            served.shared(Sharing::Joined, answer.replica());
            // It holds its rule's slot until its answer has been sent, as if sent.
            let resp = if same_sender {
                answer.response()
            } else {
                answer.response_across()
            };
            return match sending.slot {
                Some(slot) => resp.map(|body| ResponseBody::held(body, slot)),
                None => resp,
            };
        }
    };
    lead.turn().await;
    let resp = send(sending, served, None, None).await;
    let answered = (resp, served.replica.clone());
    let metrics = &gw.metrics().joins;
    let cluster = joined.mode.cluster().name();
    let (resp, shared) = lead
        .publish(answered, &joined.limits, metrics, cluster)
        .await;
    if shared {
        served.shared(Sharing::Led, None);
    }
    resp
}

/// Where entering a read (or watch-list) in its table left it.
enum Turn {
    /// It goes upstream; others may join it.
    Leads(Lead),
    /// A twin's answer, and whether that twin was of its own sender.
    Answered(Arc<SharedAnswer>, bool),
    /// It goes upstream on its own: not allowed to join another sender's (or not known in
    /// time; the apiserver authorizes it), or its twins' answers were not shared
    /// [`JOIN_ATTEMPTS`] times.
    Alone,
}

/// Enters `joined` until it leads, is answered by a twin, or goes alone: a twin of another
/// sender, or of its own authorized too long before it arrived, only after a review allowed
/// its own sender the same; a twin whose answer was not shared makes it enter again; a 401 for
/// its token meanwhile sends it alone.
async fn take_turn(gw: &Arc<Gateway>, upstreams: &Arc<Upstreams>, joined: &Joined<'_>) -> Turn {
    let metrics = &gw.metrics().joins;
    let sharer = &joined.sharer;
    let (mut reviewed, mut unshared) = (false, 0);
    while unshared < JOIN_ATTEMPTS {
        match joined
            .mode
            .joins()
            .enter(&joined.read, sharer.entering(reviewed), metrics)
        {
            Joining::Leads(lead) => return Turn::Leads(lead),
            Joining::Unreviewed => {
                if reviewed || !sharer.allowed(gw, upstreams).await {
                    return Turn::Alone;
                }
                reviewed = true;
            }
            Joining::Follows(follow) => {
                let same_sender = follow.same_sender();
                match follow.answer().await {
                    // Its token was refused while it waited: the apiserver answers it.
                    Some(_) if sharer.refused() => return Turn::Alone,
                    Some(answer) => {
                        metrics.joined(joined.mode.cluster().name());
                        return Turn::Answered(answer, same_sender);
                    }
                    None => unshared += 1,
                }
            }
        }
    }
    Turn::Alone
}
