//! The stand-in extension server's answer, shared by every extension group-version of the
//! replica (`--aggregated-api`): set by the fault port's `/aggregated-answer`, given by the
//! aggregator's proxy (`aggregator`).

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

/// What the stand-in extension server answers (the fault port's `/aggregated-answer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status code.
    pub status: StatusCode,
    /// Body; `None`: the default for the path (`aggregator::default_body`).
    pub body: Option<Bytes>,
    /// `Content-Type`; none when `None`.
    pub content_type: Option<HeaderValue>,
    /// Further headers, in order (an `X-Kubernetes-PF-*` of the extension server's own, ...).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Default for Answer {
    fn default() -> Answer {
        Answer {
            status: StatusCode::OK,
            body: None,
            content_type: Some(HeaderValue::from_static("application/json")),
            headers: Vec::new(),
        }
    }
}

/// The stand-in's answer, shared by every extension group-version of the replica.
pub type ExtensionServer = crate::setting::Setting<Answer>;
