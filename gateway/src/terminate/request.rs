//! One request, from the client's head to the answer it gets: read as the apiserver reads it,
//! under its dispatch rule, its body held within its bounds, shaped for the backends; or an
//! upgrade, passed on whole.
//!
//! | module | job |
//! |---|---|
//! | `handle` | one request through its named phases (addressed, identify, classify, read body, admit, shape, authorize, route, send, respond, log), each a function of its context |
//! | `pages` | where a paginated LIST's continue pages go: back to the replica that served its first page (per client connection) |
//! | `refused` | the answers kubegate gives itself when a phase refuses a request |
//! | `forward` | the one send of a request (`Sending`: what every route sends with), within its rule, its client answered; a watch followed |
//! | `shape` | shaping a request for the backends: identity headers, hop-by-hop headers, the URI, the held body |
//! | `served` | what serving leaves for the operator: the sender counted for the status page, the replica that answered, the access log's line |
//! | `shared` | a request answered from an identical request's upstream answer: a joined read, a fed watch (`join`) |
//! | `upgrade` | exec, attach, port-forward, proxy, a watch over WebSocket: HTTP/1.1 end to end, 101 passed on, then bytes both ways |

pub(super) mod forward;
pub(super) mod handle;
pub(super) mod pages;
pub(super) mod refused;
pub(super) mod served;
pub mod shape;
pub(super) mod shared;
pub(super) mod upgrade;
