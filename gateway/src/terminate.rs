//! Terminate mode (L7): kubegate ends the client's TLS, and balances each request over the
//! pool's ready backends on HTTP/2 connections of its own, with the client's identity passed on
//! by the apiserver's front-proxy scheme.
//!
//! Imports run one way: `listener` → `by_name` → `mode`; `listener` → `handle` → {`upgrade`,
//! `watch`, `token_review`} → `dispatch` → {`connect`, `h2client`, `in_flight`, `skew`}, with
//! `served`, `request`,
//! `bodies`, `body`, `status`, `retry`, `rules`, `tokens` and `mode` as leaves; `versions`
//! (started by the control runtime) uses `connect` and `h2client`; `share` (started by the
//! control runtime too) asks moves of backends, which `watch` carries out.
//!
//! | module | job |
//! |---|---|
//! | `listener` | TLS handshake (with a deadline), the client's certificate identity, the HTTP/1.1 or HTTP/2 server, GOAWAY / `Connection: close` when kubegate drains |
//! | `handle` | one request: its sender named, its target read as the apiserver reads it, its dispatch rule, upgrade, or body read whole, shaped, dispatched, a watch followed |
//! | `tokens` | bearer-token clients named by a TokenReview, remembered by the token's hash |
//! | `token_review` | one TokenReview sent to a replica as kubegate |
//! | `bodies` | request bodies read whole within their bounds (per request, per connection, in all) and deadline |
//! | `rules` | `dispatch:` compiled: the rule a request falls under, its backends, its limits |
//! | `served` | what serving leaves for the operator: the sender counted for the status page, the replica that answered, the access log's line |
//! | `request` | shaping a request for the backends: identity headers, hop-by-hop headers, the URI, the held body |
//! | `dispatch` | placing a request on a backend within its rule's backends and sending it; what comes back; retries where provably unprocessed |
//! | `connect` | streams on a backend's HTTP/2 connections, new connections (TCP, TLS, HTTP/2), TLS for upgrades |
//! | `h2client` | the HTTP/2 client toward backends, on `h2` directly: a request's own task sends it and waits for its response |
//! | `skew` | version skew: a request for a group-version kept off replicas that do not serve it, discovery on the newest version's |
//! | `versions` | each replica's version and served group-versions, read from its `/version`, `/api`, `/apis` |
//! | `in_flight` | a request's registration with its backend (the load signal, what a drain waits for) |
//! | `upgrade` | exec, attach, port-forward, proxy, a watch over WebSocket: HTTP/1.1 end to end, 101 passed on, then bytes both ways |
//! | `watch` | watch continuity: a watch whose replica goes away continues on another from its last position, until its time is up |
//! | `share` | the share of long-running requests kept even: a replica holding more than its share asks some of its watches to move |
//! | `by_name` | the clusters served by server name: each one's handshake and terminate state, changed by a reload |
//! | `resets` | the rapid reset rule: a connection whose streams are mostly reset at once is closed |
//! | `retry` | the pure rule of when a request may go to another backend |
//! | `mode`, `tls`, `body`, `status` | shared upstream settings, upstream TLS, response bodies, the `Status` errors kubegate answers itself |
//!
//! What a request and a watch are on the apiserver's wire (verbs, long-running requests, watch
//! framing and positions, identity headers) is the `kubegate-wire` crate's; what terminate mode
//! keeps per backend (its HTTP/2 connections, requests in flight) is `state::Upstream`.

mod bodies;
mod body;
mod by_name;
mod connect;
mod dispatch;
mod h2client;
mod handle;
mod in_flight;
mod listener;
mod mode;
pub mod request;
mod resets;
mod retry;
mod rules;
mod served;
mod share;
mod skew;
mod status;
mod tls;
mod token_review;
mod tokens;
mod upgrade;
mod versions;
mod watch;

pub use by_name::{ClusterFiles, TerminatedCluster, TerminatedClusters};
pub use listener::TerminateListener;
pub use mode::{TerminateMode, UpstreamFiles, Upstreams};
pub use rules::Rules;
pub use share::keep as keep_share;
pub use versions::learn as learn_versions;
