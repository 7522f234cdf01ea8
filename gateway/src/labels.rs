//! Typed metric labels: each reason a decision can have is an enum, so the series created at 0
//! on start and the values recorded later come from one list and cannot drift apart.

/// Why a client connection (or request) was turned away without reaching a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No backend is ready (and the `no_ready_backend` policy gave none either).
    NoReadyBackend,
    /// Every backend tried failed to connect.
    ConnectFailed,
    /// kubegate itself is out of descriptors or memory.
    OutOfResources,
}

impl Refusal {
    /// Every reason.
    pub const ALL: [Refusal; 3] = [
        Refusal::NoReadyBackend,
        Refusal::ConnectFailed,
        Refusal::OutOfResources,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoReadyBackend => "no_ready_backend",
            Refusal::ConnectFailed => "connect_failed",
            Refusal::OutOfResources => "out_of_resources",
        }
    }
}

/// Which limit made kubegate close a client connection to protect itself and its other
/// clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientLimit {
    /// `limits.max_client_connections` were open: the new one was closed once accepted.
    Connections,
    /// The client reset most of its HTTP/2 streams right after opening them
    /// (`terminate.rapid_reset_min_streams`).
    RapidReset,
}

impl ClientLimit {
    /// Every reason.
    pub const ALL: [ClientLimit; 2] = [ClientLimit::Connections, ClientLimit::RapidReset];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientLimit::Connections => "connections",
            ClientLimit::RapidReset => "rapid_reset",
        }
    }
}

/// Why the admin endpoint turned a connection or request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminRefusal {
    /// `admin.max_connections` were open: the oldest was closed for a new one.
    Evicted,
    /// Its TLS handshake or request headers did not arrive within `admin.header_read_timeout`.
    Timeout,
    /// Its request headers were larger than the endpoint reads.
    TooLarge,
    /// No verified client certificate or valid bearer token for a path that needs one.
    Unauthorized,
}

impl AdminRefusal {
    /// Every reason.
    pub const ALL: [AdminRefusal; 4] = [
        AdminRefusal::Evicted,
        AdminRefusal::Timeout,
        AdminRefusal::TooLarge,
        AdminRefusal::Unauthorized,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            AdminRefusal::Evicted => "evicted",
            AdminRefusal::Timeout => "timeout",
            AdminRefusal::TooLarge => "too_large",
            AdminRefusal::Unauthorized => "unauthorized",
        }
    }
}

/// Why a connect to a backend failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectError {
    /// Nothing listens (connection refused).
    Refused,
    /// No answer within `connect.timeout`.
    Timeout,
    /// Anything else (unreachable, reset, a failed TLS handshake upstream).
    Error,
}

impl ConnectError {
    /// Every reason.
    pub const ALL: [ConnectError; 3] = [
        ConnectError::Refused,
        ConnectError::Timeout,
        ConnectError::Error,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectError::Refused => "refused",
            ConnectError::Timeout => "timeout",
            ConnectError::Error => "error",
        }
    }

    /// Classifies an I/O error of a connect.
    pub fn of(e: &std::io::Error) -> ConnectError {
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => ConnectError::Refused,
            std::io::ErrorKind::TimedOut => ConnectError::Timeout,
            _ => ConnectError::Error,
        }
    }
}

/// How a configuration reload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadResult {
    /// Applied.
    Success,
    /// Refused; the running configuration stays.
    Failure,
}

impl ReloadResult {
    /// Every result.
    pub const ALL: [ReloadResult; 2] = [ReloadResult::Success, ReloadResult::Failure];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Success => "success",
            ReloadResult::Failure => "failure",
        }
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
}

/// Why a terminate-mode request got an answer from kubegate instead of a backend's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFailure {
    /// No backend is ready (and the `no_ready_backend` policy gave none either): 503.
    NoReadyBackend,
    /// Every attempt failed before the apiserver processed the request: 503.
    Unavailable,
    /// The connection broke after the request was sent and it may not be retried: 502.
    Broken,
    /// The body is larger than `terminate.max_request_body_bytes`: 413.
    BodyTooLarge,
    /// The client's body could not be read: 400.
    BadRequest,
}

impl RequestFailure {
    /// Every reason.
    pub const ALL: [RequestFailure; 5] = [
        RequestFailure::NoReadyBackend,
        RequestFailure::Unavailable,
        RequestFailure::Broken,
        RequestFailure::BodyTooLarge,
        RequestFailure::BadRequest,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestFailure::NoReadyBackend => "no_ready_backend",
            RequestFailure::Unavailable => "unavailable",
            RequestFailure::Broken => "broken",
            RequestFailure::BodyTooLarge => "body_too_large",
            RequestFailure::BadRequest => "bad_request",
        }
    }
}

/// Whose a terminate-mode request is, as kubegate passes it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// A verified client certificate, sent as `X-Remote-User`/`X-Remote-Group`.
    ClientCertificate,
    /// A bearer token, passed untouched.
    BearerToken,
    /// Neither.
    Anonymous,
}

impl Identity {
    /// Every kind.
    pub const ALL: [Identity; 3] = [
        Identity::ClientCertificate,
        Identity::BearerToken,
        Identity::Anonymous,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Identity::ClientCertificate => "client_certificate",
            Identity::BearerToken => "bearer_token",
            Identity::Anonymous => "anonymous",
        }
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
