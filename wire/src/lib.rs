//! The apiserver's wire, as pure rules with no I/O: what kubegate's terminate mode must
//! understand of a request and a watch to balance, retry and continue them, and how a client's
//! identity reaches the apiserver.
//!
//! | module | job |
//! |---|---|
//! | `target` | a request target as the apiserver reads it: the path percent-decoded, the query decoded pair by pair, booleans as apimachinery converts them |
//! | `classify` | a request's verb, whether it is long-running, and what it addresses (group, version, namespace, resource, subresource, name): k8s.io/apiserver's `RequestInfo` |
//! | `go_duration` | Go's `time.ParseDuration`, as the apiserver reads a request's `?timeout=` |
//! | `framing` | a watch response cut into whole events, JSON lines or length-prefixed protobuf |
//! | `position` | where a watch stands and from which resourceVersion it can continue |
//! | `identity` | a client certificate's identity, and the front-proxy headers that carry it |
//!
//! Everything here reads untrusted bytes from clients or apiservers, so it is fuzzed
//! (`fuzz/`) and property-tested (`tests` modules): it must never panic, and its memory is
//! bounded by what it is given.

pub mod classify;
pub mod framing;
pub mod go_duration;
pub mod identity;
pub mod position;
pub mod target;
