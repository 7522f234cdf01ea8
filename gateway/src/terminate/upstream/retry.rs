//! When a request may go to another backend: only where the apiserver provably did not process
//! it (any verb), and, for reads of storage (GET, LIST, a new watch), also after a failure
//! before response headers (RFC 9113 §8.7; client-go's own rules in `rest/request.go`) or
//! when one replica's own storage failed them. Never once response headers were forwarded:
//! kubegate only forwards them after deciding.

use crate::telemetry::AttemptFailure;
use kubegate_wire::classify::{LongRunning, RequestClass, Verb};

/// Whether the apiserver provably did not process a request whose attempt failed with
/// `failure`: every failure but a break after sending and a replica's own storage failure.
pub fn unprocessed(failure: AttemptFailure) -> bool {
    !matches!(
        failure,
        AttemptFailure::Reset | AttemptFailure::StorageFailed
    )
}

/// Whether a request of `class` that failed with `failure` may be sent to another backend.
pub fn may_retry(failure: AttemptFailure, class: &RequestClass) -> bool {
    match failure {
        AttemptFailure::StorageFailed => reads_storage(class),
        f if unprocessed(f) => true,
        // A new watch is a read like a GET: until its response headers, its client has seen
        // nothing, and the replica changed nothing (a 30-minute soak answered 502 to two new
        // watches whose replica was SIGKILLed, where another replica could serve them).
        _ => reads_storage(class),
    }
}

/// A read the replica answers from its own storage or watch cache: a GET, a LIST or a watch.
/// Not a log, exec or proxied request: their failures belong to a kubelet or a pod, which
/// every replica reaches alike.
pub fn reads_storage(class: &RequestClass) -> bool {
    matches!(class.verb, Verb::Get | Verb::List | Verb::Watch)
        && matches!(class.long_running, None | Some(LongRunning::Watch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubegate_wire::classify::{LongRunning, Verb};

    fn class(verb: Verb, long_running: Option<LongRunning>) -> RequestClass {
        RequestClass { verb, long_running }
    }

    #[test]
    fn unprocessed_requests_are_retried_whatever_the_verb() {
        for f in [
            AttemptFailure::Connect,
            AttemptFailure::Unsent,
            AttemptFailure::RefusedStream,
            AttemptFailure::GoAway,
            AttemptFailure::ShuttingDown,
            AttemptFailure::NotServed,
            AttemptFailure::Initializing,
            AttemptFailure::Throttled,
            AttemptFailure::CacheBehind,
        ] {
            for v in Verb::ALL {
                assert!(may_retry(f, &class(v, None)), "{f:?} {v:?}");
            }
            assert!(may_retry(f, &class(Verb::Watch, Some(LongRunning::Watch))));
        }
    }

    /// A storage failure (the replica answered) and a reset before response headers (it may
    /// have processed the request) send only reads of storage elsewhere.
    #[test]
    fn after_a_storage_failure_or_a_reset_only_reads_of_storage_are_retried() {
        let table = [
            (class(Verb::Get, None), true),
            (class(Verb::List, None), true),
            (class(Verb::Watch, Some(LongRunning::Watch)), true),
            (class(Verb::Get, Some(LongRunning::Log)), false),
            (class(Verb::Get, Some(LongRunning::Session)), false),
            (class(Verb::Create, None), false),
            (class(Verb::Update, None), false),
            (class(Verb::Patch, None), false),
            (class(Verb::Delete, None), false),
            (class(Verb::DeleteCollection, None), false),
            (class(Verb::Other, None), false),
        ];
        for failure in [AttemptFailure::StorageFailed, AttemptFailure::Reset] {
            for (c, want) in &table {
                assert_eq!(may_retry(failure, c), *want, "{failure:?} {c:?}");
            }
        }
        // The replica answered: a write it failed may still have reached etcd.
        assert!(!unprocessed(AttemptFailure::StorageFailed));
        assert!(unprocessed(AttemptFailure::Initializing));
        assert!(unprocessed(AttemptFailure::CacheBehind));
        assert!(unprocessed(AttemptFailure::Throttled));
        assert!(unprocessed(AttemptFailure::GoAway));
        assert!(unprocessed(AttemptFailure::NotServed));
        assert!(!unprocessed(AttemptFailure::Reset));
    }
}
