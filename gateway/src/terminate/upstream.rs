//! The upstream side: a request placed on a backend and sent, on kubegate's own HTTP/2
//! connections, with what it knows of each replica (its version, what it serves).
//!
//! | module | job |
//! |---|---|
//! | `upstreams` | a cluster's upstream settings (TLS, identity headers), replaced whole by reloads and certificate changes |
//! | `outgoing` | a request as it goes to the backends, held whole for retries; kubegate's own requests |
//! | `own` | kubegate's own requests (reviews, the shed object) placed and answered as any |
//! | `dispatch` | placing a request on a backend within its rule's backends and sending it; what comes back; retries where provably unprocessed |
//! | `flow` | what each replica's priority and fairness says, its one owner per cluster: a request's level learned from answers, each replica's levels (rejecting, in flight, latency), replicas rejecting a level left out until their `Retry-After`, the retry budget |
//! | `signals` | the apiserver's own answers kubegate acts on (a rejection, a shutdown, a watch cache initializing or behind, a storage failure, no handler), matched exactly, and who may have written an answer |
//! | `retry` | the pure rule of when a request may go to another backend |
//! | `connect` | streams on a backend's HTTP/2 connections, new connections (TCP, TLS, HTTP/2), TLS for upgrades |
//! | `served` | what a replica serves (its version, its group-versions), kept per replica of the cluster |
//! | `replicas` | what terminate mode knows per replica of a cluster, keyed by address, read without a lock |
//! | `skew` | version skew: a request for a group-version kept off replicas that do not serve it, discovery on the newest version's |
//! | `versions` | each replica's version and served group-versions, read from its `/version`, `/api`, `/apis` (a task the control runtime starts) |
//! | `tls` | how kubegate dials the apiservers: their CA and name, and its front-proxy certificate |
//! | `rotation` | upstream connections that present a replaced front-proxy certificate: no new stream, closed before it expires |

pub(super) mod connect;
pub(super) mod dispatch;
pub(super) mod flow;
pub(super) mod outgoing;
pub(super) mod own;
pub(super) mod replicas;
pub(super) mod retry;
pub(super) mod rotation;
pub(super) mod served;
pub(super) mod signals;
pub(super) mod skew;
pub(super) mod tls;
pub(super) mod upstreams;
pub(super) mod versions;
