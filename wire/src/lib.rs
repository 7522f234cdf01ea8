//! The apiserver's wire, as pure rules with no I/O: what kubegate's terminate mode must
//! understand of a request and a watch to balance, retry and continue them, and how a client's
//! identity reaches the apiserver.
//!
//! | module | job |
//! |---|---|
//! | `target` | a request target as the apiserver reads it: the path percent-decoded, the query decoded pair by pair, booleans as apimachinery converts them |
//! | `classify` | a request's verb, whether it is long-running, and what it addresses (group, version, namespace, resource, subresource, name): k8s.io/apiserver's `RequestInfo` |
//! | `accept` | a request's `Accept` as the apiserver's negotiation reads it (the conversion it asks) |
//! | `answerer` | who writes a request's answer: the apiserver itself, a workload behind it, or an API group's handlers (an extension server's, for an aggregated API) |
//! | `go_duration` | Go's `time.ParseDuration`, as the apiserver reads a request's `?timeout=` |
//! | `framing` | a watch response cut into whole events, JSON lines or length-prefixed protobuf |
//! | `position` | where a watch stands and from which resourceVersion it can continue |
//! | `identity` | a client certificate's identity, and the front-proxy headers that carry it |
//! | `status` | a `metav1.Status` answer or watch ERROR event, JSON or protobuf, read whole: how kubegate tells the apiserver's own answers |
//! | `proto` | the protobuf wire format, read without a schema |
//! | `credentials` | a request's bearer token, read as the apiserver's token authenticators read it |
//! | `proxy_header` | the PROXY protocol header (v1, v2) an outer balancer writes to name the client |
//! | `hop` | the headers an HTTP/1.1 request's `Connection` names, which go no further than kubegate |
//!
//! Everything here reads untrusted bytes from clients or apiservers, so it is fuzzed
//! (`fuzz/`) and property-tested (`tests` modules): it must never panic, and its memory is
//! bounded by what it is given.

pub mod accept;
pub mod answerer;
pub mod classify;
pub mod credentials;
pub mod framing;
pub mod go_duration;
pub mod hop;
pub mod identity;
pub mod position;
mod proto;
pub mod proxy_header;
pub mod status;
pub mod target;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
