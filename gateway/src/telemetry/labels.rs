//! Typed metric labels: each reason a decision can have is an enum, so the series created at 0
//! on start and the values recorded later come from one list and cannot drift apart. Every
//! label enum of the gateway lives here; the planes record them, telemetry owns their names.

/// What a metric family of one label is counted by: one of a fixed list of values.
pub trait Label: Copy + 'static {
    /// Every value, in declaration order.
    fn all() -> &'static [Self];
    /// Its label value.
    fn label(self) -> &'static str;
    /// Its place in [`Label::all`].
    fn index(self) -> usize;
}

/// A label enum: its variants with their label values, `ALL` (declaration order: series
/// arrays are indexed by it) and `as_str`.
macro_rules! label {
    ($(#[$meta:meta])* pub enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident => $label:literal,)+
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; [$($label),+].len()] = [$($name::$variant),+];

            /// Metric label.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $label,)+
                }
            }
        }

        impl Label for $name {
            fn all() -> &'static [Self] {
                &Self::ALL
            }

            fn label(self) -> &'static str {
                self.as_str()
            }

            fn index(self) -> usize {
                // `ALL` lists the variants in declaration order, their discriminants.
                self as usize
            }
        }
    };
}

label! {
    /// How a bearer token's review (TokenReview) ended.
    pub enum TokenReviewResult {
        /// The apiserver named the token's user.
        Named => "named",
        /// The apiserver did not accept the token: its client stays unnamed.
        Rejected => "rejected",
        /// The review failed (refused, no replica, unreadable answer, timed out).
        Failed => "failed",
        /// Not sent: `terminate.token_review.max_in_flight` reviews were under way.
        Skipped => "skipped",
    }
}

label! {
    /// How a SubjectAccessReview (whether a sender may share another's read) ended.
    pub enum AccessReviewResult {
        /// The apiserver allowed it: the sender's request may be answered from another's.
        Allowed => "allowed",
        /// The apiserver did not allow it: the request goes upstream on its own.
        Denied => "denied",
        /// The review failed (refused, no replica, unreadable answer, timed out).
        Failed => "failed",
        /// Not sent: `terminate.access_review.max_in_flight` reviews were under way.
        Skipped => "skipped",
    }
}

label! {
    /// Why a client connection (or request) was turned away without reaching a backend.
    pub enum Refusal {
        /// No backend is ready (and the `no_ready_backend` policy gave none either).
        NoReadyBackend => "no_ready_backend",
        /// Every backend tried failed to connect.
        ConnectFailed => "connect_failed",
        /// kubegate itself is out of descriptors or memory.
        OutOfResources => "out_of_resources",
        /// With clusters: the ClientHello named no server and the listener has no
        /// `default_cluster`.
        NoServerName => "no_server_name",
        /// With clusters: no cluster of the listener answers the ClientHello's server name.
        UnknownServerName => "unknown_server_name",
        /// With clusters: no ClientHello could be read (not TLS, larger than 16 KiB, or not
        /// whole within 10 s).
        ClientHello => "client_hello",
        /// A PROXY protocol header from a peer outside the listener's
        /// `proxy_protocol.trusted`.
        ProxyHeaderUntrusted => "proxy_header_untrusted",
        /// No PROXY protocol header from a trusted balancer, which must send one
        /// (`proxy_protocol.required`).
        ProxyHeaderMissing => "proxy_header_missing",
        /// A PROXY protocol header that is malformed, longer than 4 KiB, or not whole within
        /// `proxy_protocol.timeout`.
        ProxyHeader => "proxy_header",
    }
}

label! {
    /// Where a LIST's continue page was answered, against the replica that answered its first
    /// page on the same client connection.
    pub enum ContinuePage {
        /// The first page's replica: its watch cache holds the page's revision.
        FirstPageReplica => "first_page_replica",
        /// Another replica: the first page's has left, was not ready since, is ejected,
        /// queued the request's priority level, or failed the page.
        AnotherReplica => "another_replica",
        /// Its first page is not known on the connection (another connection's, or forgotten
        /// among more than 32 LISTs).
        Unknown => "unknown",
    }
}

label! {
    /// How a wait for a ready backend (`terminate.hold_when_none_ready`) ended.
    pub enum HoldOutcome {
        /// A backend became ready (under `no_ready_backend: alive`, answered its probe
        /// again): the work went on.
        Ready => "ready",
        /// None did in time: `no_ready_backend` decided.
        TimedOut => "timed_out",
        /// `terminate.max_held_when_none_ready` were waiting already: not held.
        OverLimit => "over_limit",
    }
}

label! {
    /// Why an accept on a client listener failed.
    pub enum AcceptError {
        /// kubegate is out of descriptors or memory (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`):
        /// clients are being turned away.
        OutOfResources => "out_of_resources",
        /// The client gave up before kubegate accepted (`ECONNABORTED`): its loss, not
        /// kubegate's.
        Aborted => "aborted",
        /// Anything else.
        Other => "other",
    }
}

label! {
    /// Which limit made kubegate close a client connection to protect itself and its other
    /// clients.
    pub enum ClientLimit {
        /// `limits.max_client_connections` were open: the new one was closed once accepted.
        Connections => "connections",
        /// The client reset most of its HTTP/2 streams right after opening them
        /// (`terminate.rapid_reset_min_streams`).
        RapidReset => "rapid_reset",
    }
}

label! {
    /// Why the admin endpoint turned a connection or request away.
    pub enum AdminRefusal {
        /// `admin.max_connections` were open: the oldest was closed for a new one.
        Evicted => "evicted",
        /// Its TLS handshake or request headers did not arrive within
        /// `admin.header_read_timeout`.
        Timeout => "timeout",
        /// Its request headers were larger than the endpoint reads.
        TooLarge => "too_large",
        /// No verified client certificate or valid bearer token for a path that needs one.
        Unauthorized => "unauthorized",
    }
}

label! {
    /// Why a connect to a backend failed.
    pub enum ConnectError {
        /// Nothing listens (connection refused).
        Refused => "refused",
        /// No answer within `connect.timeout`.
        Timeout => "timeout",
        /// Anything else (unreachable, reset, a failed TLS handshake upstream).
        Error => "error",
    }
}

impl ConnectError {
    /// Classifies an I/O error of a connect.
    pub fn of(e: &std::io::Error) -> ConnectError {
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => ConnectError::Refused,
            std::io::ErrorKind::TimedOut => ConnectError::Timeout,
            _ => ConnectError::Error,
        }
    }
}

label! {
    /// How a configuration or certificate reload ended.
    pub enum ReloadResult {
        /// Applied.
        Success => "success",
        /// Refused; the running configuration (or certificate) stays.
        Failure => "failure",
    }
}

label! {
    /// Why a terminate-mode request got an answer from kubegate instead of a backend's.
    pub enum RequestFailure {
        /// No backend is ready (and the `no_ready_backend` policy gave none either): 503.
        NoReadyBackend => "no_ready_backend",
        /// Every attempt failed before the apiserver processed the request: 503.
        Unavailable => "unavailable",
        /// The connection broke after the request was sent and it may not be retried: 502.
        Broken => "broken",
        /// The body is larger than `terminate.max_request_body_bytes`, or would take its
        /// connection or all clients beyond what bodies may hold: 413.
        BodyTooLarge => "body_too_large",
        /// The body did not arrive within `terminate.request_body_timeout`: 408.
        BodyTimeout => "body_timeout",
        /// The client's body could not be read, or its target does not decode: 400.
        BadRequest => "bad_request",
        /// A verified client certificate named no user (no CN), or a name that cannot be sent
        /// as a header: 401.
        Unauthenticated => "unauthenticated",
        /// Its `dispatch` rule's limit was reached: 429 with `Retry-After`.
        Limited => "limited",
        /// Its `dispatch` rule's backends were not ready and its fallback is `none`: 503.
        NoRuleBackend => "no_rule_backend",
        /// Its authority is not a name of its connection's cluster (several clusters by
        /// server name): 421, before anything else is done for it.
        Misdirected => "misdirected",
        /// Its sender's bearer token could not be reviewed in time (kubegate's reviews were
        /// all busy, or the apiserver was slow or refused with 429/5xx) while a `dispatch`
        /// rule names senders: 429 with `Retry-After`, never passed on as if no rule named it.
        Unreviewed => "unreviewed",
    }
}

label! {
    /// Whose a terminate-mode request is, as kubegate passes it on.
    pub enum Identity {
        /// A verified client certificate, sent as `X-Remote-User`/`X-Remote-Group`.
        ClientCertificate => "client_certificate",
        /// A bearer token, passed untouched.
        BearerToken => "bearer_token",
        /// Neither.
        Anonymous => "anonymous",
    }
}

label! {
    /// How an attempt on one backend failed before response headers reached the client
    /// (terminate mode): the names of the retry vocabulary, whose meaning — which failures
    /// the apiserver provably did not process, what may be tried again — is
    /// `terminate/upstream/retry.rs`'s.
    pub enum AttemptFailure {
        /// TCP, TLS or the HTTP/2 handshake failed: nothing was sent.
        Connect => "connect_failed",
        /// The connection took no new stream (it had received GOAWAY, or ended): nothing was
        /// sent.
        Unsent => "unsent",
        /// `RST_STREAM` with `REFUSED_STREAM`: refused before any processing.
        RefusedStream => "refused_stream",
        /// A graceful `GOAWAY` (`NO_ERROR`) whose last-stream-id is below this stream's.
        GoAway => "goaway",
        /// 429 or 503 "the apiserver is shutting down": rejected before any handler ran.
        ShuttingDown => "shutting_down",
        /// 404 "the server could not find the requested resource" for a group-version or a
        /// discovery document: the replica has no handler for it (another version, or a CRD
        /// it has not seen yet), so nothing was processed.
        NotServed => "not_served",
        /// 429 "storage is (re)initializing": the replica's watch cache for the resource is
        /// not ready yet (KEP-4568; custom resources' caches after `/readyz` passes), so
        /// nothing was processed.
        Initializing => "storage_initializing",
        /// 429 from the replica's API Priority and Fairness (it carries
        /// `X-Kubernetes-PF-PriorityLevel-UID`): rejected before any handler ran, so nothing
        /// was processed. Tried once more on another replica within the retry budget.
        Throttled => "apf_rejected",
        /// A read answered 504 "Too large resource version": the replica's watch cache has
        /// not reached the position asked for (it lags its etcd), so nothing was processed.
        CacheBehind => "cache_behind",
        /// A read answered 5xx for a failure of the replica's own: its answer names its
        /// storage (etcd), or its probe fails. Another replica may answer it; only reads are
        /// retried so.
        StorageFailed => "storage_failed",
        /// The stream or connection broke after the request was sent: it may have been
        /// processed.
        Reset => "reset",
    }
}

label! {
    /// Why a followed watch ended (terminate mode).
    pub enum WatchEnd {
        /// The client went away.
        Client => "client",
        /// The client read nothing for `terminate.slow_watch_timeout` while an event waited:
        /// cut alone.
        SlowClient => "slow_client",
        /// The client's `timeoutSeconds` passed.
        Timeout => "timeout",
        /// An ERROR event with 410 (Expired) reached the client: it relists.
        Expired => "expired",
        /// Another ERROR event reached the client.
        Error => "error",
        /// A listing's events reached the client and no position followed.
        NoPosition => "not_resumable_no_position",
        /// `sendInitialEvents`, broken before they ended.
        InitialEvents => "not_resumable_initial_events",
        /// Too many resumes in a minute.
        Budget => "not_resumable_budget",
        /// No replica took the watch again.
        NoBackend => "not_resumable_no_backend",
        /// The stream could not be read as events, or changed encoding.
        Malformed => "malformed",
    }
}

label! {
    /// Why a followed watch's upstream stream stopped (what a resume bridged).
    pub enum WatchBreak {
        /// It ended cleanly (the apiserver ended it: shutdown, its own timeout).
        Ended => "ended",
        /// It broke (reset, connection lost, kubegate closed the backend's work).
        Failed => "failed",
        /// Its replica started draining: moved before the deadline.
        Drained => "drained",
        /// The replica's watch cache did not reach back to the watch's position (410 before
        /// any event: it started after it, or keeps a shorter window): asked of a replica
        /// that has not said so.
        Expired => "expired",
        /// Its replica held more than its share of the long-running requests (or the operator
        /// drained it): moved live onto one that holds less.
        Moved => "moved",
        /// The replica's watch cache had not reached the watch's position ("Too large
        /// resource version" before any event: it lags its etcd): asked of a replica that has
        /// not said so.
        CacheBehind => "cache_behind",
    }
}

label! {
    /// How a watch's position was brought up to date before it moved to a replica that came
    /// back after it.
    pub enum Freshened {
        /// The watch stayed on the replica it left until its next event.
        NextEvent => "next_event",
        /// A bookmark was asked of the replica it left (a short watch there).
        Bookmark => "bookmark",
    }
}

label! {
    /// How a terminate-mode client's TLS handshake failed.
    pub enum HandshakeFailure {
        /// The handshake failed (bad certificate, protocol error, the client left).
        Error => "error",
        /// It did not finish within `terminate.handshake_timeout`.
        Timeout => "timeout",
    }
}

label! {
    /// The HTTP version a terminate-mode client connection speaks.
    pub enum ClientProtocol {
        /// HTTP/2 (ALPN `h2`).
        H2 => "h2",
        /// HTTP/1.1.
        Http1 => "http/1.1",
    }
}

/// The class of an HTTP status code, as a metric label.
pub fn code_class(code: http::StatusCode) -> &'static str {
    match code.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_errors_are_classified_by_kind() {
        use std::io::{Error, ErrorKind};
        assert_eq!(
            ConnectError::of(&Error::from(ErrorKind::ConnectionRefused)),
            ConnectError::Refused
        );
        assert_eq!(
            ConnectError::of(&Error::from(ErrorKind::TimedOut)),
            ConnectError::Timeout
        );
        assert_eq!(
            ConnectError::of(&Error::from(ErrorKind::ConnectionReset)),
            ConnectError::Error
        );
    }

    #[test]
    fn all_lists_every_value_in_declaration_order_with_its_label() {
        for (i, f) in AttemptFailure::ALL.into_iter().enumerate() {
            assert_eq!(f as usize, i);
        }
        assert_eq!(AttemptFailure::ALL.len(), 11);
        assert_eq!(WatchEnd::NoPosition.as_str(), "not_resumable_no_position");
        assert_eq!(ClientProtocol::Http1.as_str(), "http/1.1");
    }
}

label! {
    /// Why a joined read was not answered from the upstream request it waited on: each of its
    /// waiting requests was then sent on its own (`terminate::join`).
    pub enum JoinMiss {
        /// The answer was larger than `terminate.join_reads.max_answer_bytes`.
        TooLarge => "too_large",
        /// Holding it would have gone beyond `terminate.join_reads.max_held_bytes`.
        OverHeld => "over_held",
        /// Its status is not one shared (kubegate's own failures, 401, 429, 5xx: another
        /// attempt may fare better).
        Status => "status",
        /// The answer broke off (the request's client got a 503).
        Broken => "broken",
        /// The request ended before its answer came (its client went away).
        Abandoned => "abandoned",
    }
}
