//! What one probe found, classified so that operators read the cause, not a stack of errors.

use crate::state::ProbeSignal;
use std::time::{Duration, SystemTime};

/// Why a certificate was refused. Each is a configuration or rotation problem worth its own
/// name: none is ever accepted silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsProblem {
    /// Not signed by `health.tls.ca_file`.
    UnknownCa,
    /// Not valid for `health.tls.server_name`.
    NameMismatch,
    /// Past its `notAfter`.
    Expired,
    /// Before its `notBefore`.
    NotYetValid,
    /// The server asked for a client certificate we could not give, or refused ours.
    ClientAuth,
    /// Any other handshake failure.
    Handshake,
}

impl TlsProblem {
    /// Short label (`unknown_ca`, `name_mismatch`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TlsProblem::UnknownCa => "unknown_ca",
            TlsProblem::NameMismatch => "name_mismatch",
            TlsProblem::Expired => "expired",
            TlsProblem::NotYetValid => "not_yet_valid",
            TlsProblem::ClientAuth => "client_auth",
            TlsProblem::Handshake => "handshake",
        }
    }
}

/// Why a probe got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreachableReason {
    /// TCP connection refused: nothing listens.
    Refused,
    /// No answer within `health.timeout` (frozen, partitioned, overloaded).
    Timeout,
    /// The connection broke (reset, EOF) before an answer.
    Reset,
    /// Anything else (no route, bad HTTP).
    Error,
}

impl UnreachableReason {
    /// Short label (`refused`, `timeout`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            UnreachableReason::Refused => "refused",
            UnreachableReason::Timeout => "timeout",
            UnreachableReason::Reset => "reset",
            UnreachableReason::Error => "error",
        }
    }
}

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// HTTP 200.
    Passed,
    /// The backend answered with another status.
    Failed {
        /// HTTP status code.
        status: u16,
        /// Failing checks named in the verbose body (`etcd`, `shutdown`, ...).
        failing_checks: Vec<String>,
        /// `[-]shutdown` was among them.
        shutting_down: bool,
    },
    /// The TLS handshake failed; the detail is rustls' own message.
    TlsRejected(TlsProblem, String),
    /// No answer.
    Unreachable(UnreachableReason, String),
    /// The probe could not start: this process is out of descriptors or memory. It says nothing
    /// about the backend, whose state stays as it was (were it counted as a failure, a gateway
    /// short of descriptors would take every backend down and close every connection).
    NotRun(String),
}

impl ProbeOutcome {
    /// The probe passed (`/readyz` answered 200).
    pub fn passed(&self) -> bool {
        matches!(self, ProbeOutcome::Passed)
    }

    /// What the state machine makes of it; `None` when the probe did not run.
    pub fn signal(&self) -> Option<ProbeSignal> {
        Some(match self {
            ProbeOutcome::Passed => ProbeSignal::Pass,
            ProbeOutcome::Failed { shutting_down, .. } => ProbeSignal::Fail {
                shutting_down: *shutting_down,
            },
            ProbeOutcome::TlsRejected(..) => ProbeSignal::Fail {
                shutting_down: false,
            },
            ProbeOutcome::Unreachable(..) => ProbeSignal::Unreachable,
            ProbeOutcome::NotRun(_) => return None,
        })
    }

    /// Metric label of the result: `pass`, `fail`, `tls_error`, `refused`, `timeout`, `reset`,
    /// `error`, `not_run`. Bounded set.
    pub fn result_label(&self) -> &'static str {
        match self {
            ProbeOutcome::Passed => "pass",
            ProbeOutcome::Failed { .. } => "fail",
            ProbeOutcome::TlsRejected(..) => "tls_error",
            ProbeOutcome::Unreachable(r, _) => r.as_str(),
            ProbeOutcome::NotRun(_) => "not_run",
        }
    }

    /// Failing readyz checks, empty unless `Failed`.
    pub fn failing_checks(&self) -> &[String] {
        match self {
            ProbeOutcome::Failed { failing_checks, .. } => failing_checks,
            _ => &[],
        }
    }

    /// One line for logs and `/debug/backends`.
    pub fn describe(&self) -> String {
        match self {
            ProbeOutcome::Passed => "readyz passed".into(),
            ProbeOutcome::Failed {
                status,
                failing_checks,
                ..
            } if failing_checks.is_empty() => match status {
                401 | 403 => format!(
                    "HTTP {status}: the apiserver refuses anonymous probes; set \
                     health.tls.client_cert_file or health.bearer_token_file"
                ),
                _ => format!("HTTP {status}"),
            },
            ProbeOutcome::Failed {
                status,
                failing_checks,
                ..
            } => format!("HTTP {status}: failing {}", failing_checks.join(", ")),
            ProbeOutcome::TlsRejected(p, detail) => format!("TLS {}: {detail}", p.as_str()),
            ProbeOutcome::Unreachable(r, detail) => format!("{}: {detail}", r.as_str()),
            ProbeOutcome::NotRun(detail) => format!("not run (state kept): {detail}"),
        }
    }
}

/// One probe, as reported to the observer.
#[derive(Debug, Clone)]
pub struct ProbeRecord {
    /// When it started.
    pub at: SystemTime,
    /// How long it took.
    pub latency: Duration,
    /// What it found.
    pub outcome: ProbeOutcome,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_did_not_run_says_nothing_to_the_state_machine() {
        let o = ProbeOutcome::NotRun("Too many open files".into());
        assert_eq!(o.signal(), None);
        assert_eq!(o.result_label(), "not_run");
        assert!(o.describe().contains("state kept"), "{}", o.describe());
        let refused = ProbeOutcome::Unreachable(UnreachableReason::Refused, "refused".into());
        assert_eq!(refused.signal(), Some(ProbeSignal::Unreachable));
    }
}
