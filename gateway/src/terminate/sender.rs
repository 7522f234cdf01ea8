//! Who sent a request: a bearer token's client named by a TokenReview (a certificate's is named
//! in the handshake, `server::listener`).
//!
//! | module | job |
//! |---|---|
//! | `tokens` | bearer-token clients named by a TokenReview, remembered by the token's hash; each connection's share of reviews |
//! | `token_review` | one TokenReview sent to a replica as kubegate |

pub(super) mod token_review;
pub(super) mod tokens;
