//! What serving a request leaves behind for the operator: who sent it (counted for the status
//! page's cost table), which replica answered after how many tries, and the access log's
//! line built from both.

use crate::state::{Backend, Gateway, Kind};
use crate::telemetry::access_log::Entry;
use crate::telemetry::costs::{bounded_bytes, Payer, SenderKind};
use crate::telemetry::Identity;
use crate::terminate::cluster::shed::sender_in_reserve;
use crate::terminate::request::shape::Client;
use crate::terminate::rules::{kubectl_header, KUBECTL_COMMAND, KUBECTL_SESSION};
use crate::terminate::upstream::outgoing::user_agent;
use http::header::HeaderValue;
use http::{HeaderMap, Request, Response, Uri};
use kubegate_wire::identity::UserInfo;
use std::sync::Arc;
use std::time::SystemTime;

/// How a request was served, as far as it went.
#[derive(Default)]
pub struct Served {
    /// How it authenticated, once shaped.
    pub identity: Option<Identity>,
    /// The replica that answered.
    pub replica: Option<Arc<Backend>>,
    /// Replicas tried, the one that answered included.
    pub tried: usize,
    /// Who a TokenReview found its bearer token to belong to.
    pub token_user: Option<Arc<UserInfo>>,
    /// Its answer was shared with identical reads (`join`).
    pub shared: Option<Sharing>,
}

/// How a request took part in a shared answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// It went upstream, and identical reads were answered from its answer (a watch: it
    /// opened the upstream watch identical watches are fed from).
    Led,
    /// It was answered from an identical read's upstream answer.
    Joined,
    /// It is a watch fed from an identical watch's upstream watch.
    Fed,
}

impl Sharing {
    /// The access log's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Sharing::Led => "led",
            Sharing::Joined => "joined",
            Sharing::Fed => "fed",
        }
    }
}

impl Served {
    /// Its bearer token was found to belong to `user` (or to nobody kubegate could name).
    pub fn named(&mut self, user: Option<Arc<UserInfo>>) {
        self.token_user = user;
    }

    /// The request (a LIST if `list`) was shaped to go as `kind`: counted for its sender (a
    /// certificate's or a reviewed token's user, else the client's address), who is charged
    /// for what it costs upstream (`by_level`: by priority level too, for
    /// `terminate.auto_shed`).
    pub fn sent_as(
        &mut self,
        gw: &Gateway,
        client: &Client,
        kind: Kind,
        headers: &HeaderMap,
        list: bool,
        by_level: bool,
    ) -> Arc<Payer> {
        let identity = identity(kind);
        self.identity = Some(identity);
        let (kind, name, named) = match (&client.identity, &self.token_user, identity) {
            (Some(id), _, Identity::ClientCertificate) => {
                (SenderKind::Certificate, id.user.as_str(), Some(&**id))
            }
            (_, Some(user), Identity::BearerToken) => {
                (SenderKind::Token, user.user.as_str(), Some(&**user))
            }
            (_, None, Identity::BearerToken) => (SenderKind::TokenByAddress, client.ip(), None),
            _ => (SenderKind::Anonymous, client.ip(), None),
        };
        let kubectl_command =
            kubectl_header(headers, KUBECTL_COMMAND).and_then(|v| v.to_str().ok());
        let mut payer = gw.costs().payer(kind, name, user_agent(headers));
        // Charged by level only where `terminate.auto_shed` could hold it back: a sender it
        // names, outside the reserve.
        if by_level && named.is_some_and(|u| !sender_in_reserve(u)) {
            payer = payer.by_level();
        }
        let payer = Arc::new(payer);
        payer.sent(list, kubectl_command);
        payer
    }

    /// `replica` answered, after `tried` replicas (itself included).
    pub fn answered_by(&mut self, replica: Arc<Backend>, tried: usize) {
        self.replica = Some(replica);
        self.tried = tried;
    }

    /// Its answer was shared with identical reads, as `how`; `replica` answered.
    pub fn shared(&mut self, how: Sharing, replica: Option<&Arc<Backend>>) {
        self.shared = Some(how);
        if how != Sharing::Led {
            self.replica = replica.cloned();
            self.tried = 0;
        }
    }

    /// Fills in what `entry` learns once the response's head is known.
    pub fn complete<B>(&self, entry: &mut Entry, resp: &Response<B>) {
        entry.status = resp.status().as_u16();
        entry.identity = self.identity.map_or("-", Identity::as_str);
        entry.replica = self.replica.as_ref().map(|b| Arc::clone(&b.info()));
        entry.retries = self.tried.saturating_sub(1) as u32;
        if let Some(user) = &self.token_user {
            entry.sender = Some(user.clone());
        }
        if let Some(how) = self.shared {
            // The apiserver audited the request that went upstream, under this ID: what ties a
            // joined client's line to the audit event.
            entry.shared = Some(how.as_str());
            entry.audit_id = resp
                .headers()
                .get("audit-id")
                .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
        }
    }
}

/// How a request sent as `kind` authenticated.
fn identity(kind: Kind) -> Identity {
    match kind {
        Kind::WithIdentity => Identity::ClientCertificate,
        Kind::BearerToken => Identity::BearerToken,
        Kind::Anonymous => Identity::Anonymous,
    }
}

/// The access log's line for `req` from `client`, before it is served: cheap parts only (the
/// writer thread reads and formats them). The target, user agent and kubectl's headers are
/// copied, whatever the protocol: an HTTP/1.1 request's point into the connection's read
/// buffer and an HTTP/2 request's into its decoded header block, which a queued entry must not
/// keep alive (the queue's bound counts what an entry holds).
pub fn entry<B>(client: &Client, req: &Request<B>) -> Entry {
    let ua = req.headers().get(http::header::USER_AGENT);
    let uri = req
        .uri()
        .path_and_query()
        .and_then(|pq| Uri::try_from(pq.as_str()).ok())
        .unwrap_or_default();
    let copy = |v: &HeaderValue| HeaderValue::from_bytes(v.as_bytes()).ok();
    let user_agent = ua.and_then(copy);
    // kubectl sends both; one alone is another client's, and shows as `-` for the other. Only
    // what the line shows is copied.
    let header = |name| {
        kubectl_header(req.headers(), name)
            .and_then(|v| HeaderValue::from_bytes(bounded_bytes(v.as_bytes())).ok())
    };
    let kubectl = match (header(KUBECTL_COMMAND), header(KUBECTL_SESSION)) {
        (None, None) => None,
        (command, session) => Some(Box::new([
            command.unwrap_or(HeaderValue::from_static("-")),
            session.unwrap_or(HeaderValue::from_static("-")),
        ])),
    };
    Entry {
        started: SystemTime::now(),
        client: client.addr,
        method: req.method().clone(),
        uri,
        identity: "-",
        sender: client.identity.clone(),
        replica: None,
        status: 0,
        retries: 0,
        bytes: 0,
        duration: std::time::Duration::ZERO,
        user_agent,
        kubectl,
        protocol: if client.h2 { "h2" } else { "http/1.1" },
        shared: None,
        audit_id: None,
    }
}
