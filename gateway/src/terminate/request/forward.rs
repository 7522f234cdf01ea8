//! A shaped request sent and its client answered: placed within its rule (its `fallback`
//! once), dispatched to the backends (`dispatch`), a watch's response followed across them
//! (`watch`), a long-running request's rule slot let go as its response starts, and what
//! kubegate answers itself when no backend would.

use crate::net::Unplaced;
use crate::state::{Gateway, Generation};
use crate::telemetry::{AttemptFailure, RequestFailure};
use crate::terminate::exchange::body::{Relayed, ResponseBody};
use crate::terminate::exchange::status::{broken, status, unavailable};
use crate::terminate::request::served::Served;
use crate::terminate::rules::Slot;
use crate::terminate::upstream::dispatch::{dispatch, Answer, Within};
use crate::terminate::upstream::outgoing::Outgoing;
use crate::terminate::upstream::retry::may_retry;
use crate::terminate::upstream::upstreams::Upstreams;
use crate::terminate::watch::continuity as watch;
use http::{Response, StatusCode};
use kubegate_wire::classify::RequestClass;
use kubegate_wire::framing::Framing;
use std::sync::Arc;
use std::time::Instant;

/// A request ready to go upstream, with what every route sends it with: its cluster's
/// upstream settings of its generation, what it is, the backends its rule allows, and its
/// place under its rule.
pub(super) struct Sending {
    pub(super) gw: Arc<Gateway>,
    /// The request's generation: the settings it is sent under.
    pub(super) generation: Arc<Generation>,
    pub(super) upstreams: Arc<Upstreams>,
    pub(super) outgoing: Outgoing,
    pub(super) class: RequestClass,
    pub(super) within: Within,
    /// Its place under its `dispatch` rule: let go as a long-running request's response
    /// starts, any other's once its body has been sent.
    pub(super) slot: Option<Slot>,
}

impl Sending {
    /// The same request, its query `query` (a watch asked from another position).
    pub(super) fn with_query(self, query: &str) -> Sending {
        Sending {
            outgoing: self.outgoing.with_query(query),
            ..self
        }
    }

    /// The same request, its rule's slot let go (a long-running request's response has
    /// started).
    pub(super) fn unslotted(self) -> Sending {
        Sending { slot: None, ..self }
    }
}

/// A read turned away by a run-time rule put in force while it waits for its answer (`kubegate
/// shed` in an incident): the shed sender's reads already queued at the replicas are what
/// keeps them busy after the rule, so they are let go too. Dropping the exchange resets its
/// upstream stream, which cancels the apiserver's request context (its queue wait, its read
/// from storage); the client gets the rule's 429, which says the request had no effect —
/// true of a read, and why writes, which may have been applied, are never cut off.
pub(super) struct CutOff<'a> {
    /// Told of each change of the run-time rules.
    pub(super) changes: tokio::sync::watch::Receiver<()>,
    /// The rule's refusal of the request as sent, if a rule turns it away now.
    pub(super) refusal: &'a (dyn Fn(&Outgoing) -> Option<Response<ResponseBody>> + Sync),
}

impl CutOff<'_> {
    /// The refusal, once a change of the rules turns `outgoing` away.
    async fn refused(&mut self, outgoing: &Outgoing) -> Response<ResponseBody> {
        loop {
            if self.changes.changed().await.is_err() {
                // The gateway is gone: nothing changes the rules again.
                std::future::pending::<()>().await;
            }
            if let Some(resp) = (self.refusal)(outgoing) {
                return resp;
            }
        }
    }
}

/// Sends the request (a watch followed across backends when `watch` says how) and answers the
/// client; `served` learns which replica answered. Until the response starts, `cut_off` may
/// turn it away instead.
pub(super) async fn send(
    sending: Sending,
    served: &mut Served,
    watch: Option<watch::Watch>,
    mut cut_off: Option<CutOff<'_>>,
) -> Response<ResponseBody> {
    let Sending {
        gw,
        generation,
        upstreams,
        outgoing,
        class,
        mut within,
        slot,
    } = sending;
    let metrics = &gw.metrics().terminate;
    // A rule's fallback places it again (once); its waits count together, from now.
    let holding_since = Instant::now();
    let answer = loop {
        let tried = &mut within.tried;
        let at = (&*gw, &*generation);
        let dispatched = dispatch(at, &upstreams, &outgoing, class, tried, holding_since);
        let answer = match &mut cut_off {
            None => dispatched.await,
            Some(cut_off) => tokio::select! {
                biased;
                answer = dispatched => answer,
                refusal = cut_off.refused(&outgoing) => return refusal,
            },
        };
        if !matches!(answer, Err(Unplaced::NoBackend)) {
            break answer;
        }
        match within.fall_back() {
            Ok(true) => continue,
            Ok(false) => break answer,
            Err(refused) => return refused.answer(&gw),
        }
    };
    let answer = answer.map(|(replica, answer)| {
        served.answered_by(replica, within.tries());
        answer
    });
    // A long-running request counts against its rule's limit only until its response
    // starts; any other until its body has been sent.
    let slot = slot.filter(|_| class.long_running.is_none());
    let hold = move |resp: Response<ResponseBody>| match slot {
        Some(slot) => resp.map(|body| ResponseBody::held(body, slot)),
        None => resp,
    };
    let resp = match answer {
        Ok(Answer::Whole(resp)) => resp,
        Ok(Answer::Streaming {
            resp,
            in_flight,
            stream,
        }) => {
            let framing = Framing::of_headers(resp.headers());
            match (framing, watch) {
                (Some(framing), Some(watch)) if resp.status() == StatusCode::OK => {
                    let followed = watch::Followed {
                        gw: gw.clone(),
                        generation: generation.clone(),
                        upstreams: upstreams.clone(),
                        outgoing,
                        class,
                        watch,
                        framing,
                    };
                    watch::follow(followed, resp, (in_flight, stream))
                }
                (_, watch) => resp.map(|body| {
                    ResponseBody::Relayed(Relayed::new(body, watch.is_some(), in_flight, stream))
                }),
            }
        }
        Err(Unplaced::NoBackend) => {
            metrics.request_failed(RequestFailure::NoReadyBackend);
            unavailable("no apiserver is ready")
        }
        Err(Unplaced::Failed(AttemptFailure::NotServed)) => {
            // No replica tried has a handler for it: the apiserver's own answer.
            status(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
                None,
            )
        }
        Err(Unplaced::Failed(failure)) if !may_retry(failure, &class) => {
            metrics.request_failed(RequestFailure::Broken);
            broken("the connection to the apiserver broke after the request was sent: it may have been applied")
        }
        Err(Unplaced::Failed(_)) => {
            metrics.request_failed(RequestFailure::Unavailable);
            unavailable("no apiserver could take the request")
        }
    };
    hold(resp)
}
