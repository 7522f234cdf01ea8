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
