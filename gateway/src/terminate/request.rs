//! One request, from the client's head to the answer it gets: read as the apiserver reads it,
//! under its dispatch rule, its body held within its bounds, shaped for the backends; or an
//! upgrade, passed on whole.
//!
//! | module | job |
//! |---|---|
//! | `handle` | one request: its sender named, its target read as the apiserver reads it, its dispatch rule, upgrade, or body read whole, shaped, dispatched, a watch followed |
//! | `forward` | a shaped request sent within its rule and its client answered; a watch followed |
//! | `bodies` | request bodies read whole within their bounds (per request, per connection, in all) and deadline |
//! | `rules` | `dispatch:` compiled: the rule a request falls under, its backends, its limits |
//! | `shape` | shaping a request for the backends: identity headers, hop-by-hop headers, the URI, the held body |
//! | `served` | what serving leaves for the operator: the sender counted for the status page, the replica that answered, the access log's line |
//! | `shared` | a request answered from an identical request's upstream answer: a joined read, a fed watch (`join`) |
//! | `upgrade` | exec, attach, port-forward, proxy, a watch over WebSocket: HTTP/1.1 end to end, 101 passed on, then bytes both ways |
//! | `body`, `status` | response bodies; the `Status` errors kubegate answers itself |

pub(super) mod bodies;
pub(super) mod body;
pub(super) mod forward;
pub(super) mod handle;
pub(super) mod rules;
pub(super) mod served;
pub mod shape;
pub(super) mod shared;
pub(super) mod status;
pub(super) mod upgrade;
