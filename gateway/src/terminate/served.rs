//! What serving a request leaves behind for the operator: who sent it (counted for the status
//! page's busiest lists), which replica answered after how many tries, and the access log's
//! line built from both.

use crate::state::{Backend, Gateway, Kind};
use crate::telemetry::access_log::Entry;
use crate::telemetry::Identity;
use crate::terminate::request::{user_agent, Client};
use http::{Request, Response};
use kubegate_wire::classify::request_info;
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
}

impl Served {
    /// The request was shaped to go as `kind`: counted for its sender.
    pub fn sent_as(&mut self, gw: &Gateway, client: &Client, kind: Kind, user_agent: &str) {
        let identity = identity(kind);
        self.identity = Some(identity);
        let name = match (&client.identity, identity) {
            (Some(id), Identity::ClientCertificate) => id.user.as_str(),
            _ => client.ip(),
        };
        gw.busiest().record(identity, name, user_agent);
    }

    /// `replica` answered, after `tried` replicas (itself included).
    pub fn answered_by(&mut self, replica: Arc<Backend>, tried: usize) {
        self.replica = Some(replica);
        self.tried = tried;
    }

    /// Fills in what `entry` learns once the response's head is known.
    pub fn complete<B>(&self, entry: &mut Entry, resp: &Response<B>) {
        entry.status = resp.status().as_u16();
        entry.identity = self.identity.map_or("-", Identity::as_str);
        entry.replica = self
            .replica
            .as_ref()
            .map_or_else(|| "-".to_string(), |b| b.info().name.clone());
        entry.retries = self.tried.saturating_sub(1) as u32;
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

/// The access log's line for `req` from `client`, before it is served.
pub fn entry<B>(client: &Client, req: &Request<B>) -> Entry {
    let info = request_info(req.method(), req.uri());
    let target = info.target;
    let resource = match (target.resource, target.subresource) {
        (Some(r), Some(s)) => format!("{r}/{s}"),
        (Some(r), None) => r.to_string(),
        _ => String::new(),
    };
    Entry {
        started: Some(SystemTime::now()),
        client: client.addr.to_string(),
        user: client
            .identity
            .as_ref()
            .map(|id| id.user.clone())
            .unwrap_or_default(),
        groups: client
            .identity
            .as_ref()
            .map(|id| id.groups.clone())
            .unwrap_or_default(),
        verb: info.class.verb.as_str(),
        api_group: target.api_group.map(str::to_string),
        resource,
        namespace: target.namespace.unwrap_or_default().to_string(),
        name: target.name.unwrap_or_default().to_string(),
        path: req.uri().path().to_string(),
        user_agent: user_agent(req.headers()).to_string(),
        protocol: if client.h2 { "h2" } else { "http/1.1" },
        ..Entry::default()
    }
}
