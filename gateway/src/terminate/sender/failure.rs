//! Why a review (a TokenReview, a SubjectAccessReview) gave no answer: what the tables of
//! answers (`tokens`, `access`) and the review itself (`review`) share.

/// Why a review gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewFailure {
    /// It may succeed if asked again soon: no replica ready, the connection broke, the
    /// apiserver answered 429 or 5xx.
    Transient(String),
    /// Asking again will not help: kubegate is not allowed to review (403), has no
    /// front-proxy certificate, or the answer cannot be read.
    Refused(String),
}
