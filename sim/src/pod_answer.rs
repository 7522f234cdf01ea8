//! The stand-in pod's answer: what every pod of the replica answers through `pods/proxy`
//! (`proxy`), set by the fault port's `/pod-answer`.

use bytes::Bytes;
use http::{HeaderValue, StatusCode};

/// What the stand-in pod answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status code.
    pub status: StatusCode,
    /// Body.
    pub body: Bytes,
    /// `Content-Type`; none when `None`.
    pub content_type: Option<HeaderValue>,
}

impl Default for Answer {
    fn default() -> Answer {
        Answer {
            status: StatusCode::OK,
            body: Bytes::from_static(b"ok"),
            content_type: Some(HeaderValue::from_static("text/plain; charset=utf-8")),
        }
    }
}

/// What every pod of the replica answers through `pods/proxy`, set through the fault port.
pub type PodAnswer = crate::setting::Setting<Answer>;
