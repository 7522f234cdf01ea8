//! When a request may go to another backend: only where the apiserver provably did not process
//! it (any verb), and, for idempotent reads, also after a failure before response headers
//! (RFC 9113 §8.7; client-go's own rules in `rest/request.go`). Never once response headers
//! were forwarded: kubegate only forwards them after deciding.

use kubegate_wire::classify::RequestClass;

/// How an attempt on one backend failed before response headers reached the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// TCP, TLS or the HTTP/2 handshake failed: nothing was sent.
    Connect,
    /// The connection took no new stream (it had received GOAWAY, or ended): nothing was sent.
    Unsent,
    /// `RST_STREAM` with `REFUSED_STREAM`: refused before any processing.
    RefusedStream,
    /// A graceful `GOAWAY` (`NO_ERROR`) whose last-stream-id is below this stream's.
    GoAway,
    /// 429 or 503 "the apiserver is shutting down": rejected before any handler ran.
    ShuttingDown,
    /// The stream or connection broke after the request was sent: it may have been processed.
    Reset,
}

impl Failure {
    /// Every failure, for metric series.
    pub const ALL: [Failure; 6] = [
        Failure::Connect,
        Failure::Unsent,
        Failure::RefusedStream,
        Failure::GoAway,
        Failure::ShuttingDown,
        Failure::Reset,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Connect => "connect_failed",
            Failure::Unsent => "unsent",
            Failure::RefusedStream => "refused_stream",
            Failure::GoAway => "goaway",
            Failure::ShuttingDown => "shutting_down",
            Failure::Reset => "reset",
        }
    }

    /// The apiserver provably did not process the request.
    pub fn unprocessed(self) -> bool {
        !matches!(self, Failure::Reset)
    }

    /// Reads what an error on an upstream HTTP/2 stream says about the request.
    pub fn of(error: &h2::Error) -> Failure {
        if error.is_remote() && error.reason() == Some(h2::Reason::REFUSED_STREAM) {
            return Failure::RefusedStream;
        }
        // Only a graceful GOAWAY fails exactly the streams above its last-stream-id; one with
        // an error code fails every stream of the connection (h2's `recv_go_away` vs the
        // connection error).
        if error.is_go_away() && error.is_remote() && error.reason() == Some(h2::Reason::NO_ERROR) {
            return Failure::GoAway;
        }
        Failure::Reset
    }
}

/// Whether a request of `class` that failed with `failure` may be sent to another backend.
pub fn may_retry(failure: Failure, class: &RequestClass) -> bool {
    failure.unprocessed() || (class.verb.idempotent_read() && class.long_running.is_none())
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
            Failure::Connect,
            Failure::Unsent,
            Failure::RefusedStream,
            Failure::GoAway,
            Failure::ShuttingDown,
        ] {
            for v in Verb::ALL {
                assert!(may_retry(f, &class(v, None)), "{f:?} {v:?}");
            }
            assert!(may_retry(f, &class(Verb::Watch, Some(LongRunning::Watch))));
        }
    }

    #[test]
    fn after_a_reset_only_idempotent_short_reads_are_retried() {
        let table = [
            (class(Verb::Get, None), true),
            (class(Verb::List, None), true),
            (class(Verb::Watch, Some(LongRunning::Watch)), false),
            (class(Verb::Get, Some(LongRunning::Log)), false),
            (class(Verb::Create, None), false),
            (class(Verb::Update, None), false),
            (class(Verb::Patch, None), false),
            (class(Verb::Delete, None), false),
            (class(Verb::DeleteCollection, None), false),
            (class(Verb::Other, None), false),
        ];
        for (c, want) in table {
            assert_eq!(may_retry(Failure::Reset, &c), want, "{c:?}");
        }
    }
}
