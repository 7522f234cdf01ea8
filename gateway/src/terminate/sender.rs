//! Who sent a request (a bearer token's client named by a TokenReview; a certificate's is
//! named in the handshake, `server::listener`), and what it may read of what others asked (a
//! SubjectAccessReview, before another sender's answer is shared with it).
//!
//! | module | job |
//! |---|---|
//! | `tokens` | bearer-token clients named by a TokenReview, remembered by the token's hash, renewed ahead of strangers |
//! | `review_queue` | the cluster's review slots, shared in turn by source address, first come first served, a quarter kept for renewals |
//! | `token_review` | one TokenReview |
//! | `access` | whether a sender may read what a request asks, remembered by a hash of both; reviews bounded |
//! | `access_review` | one SubjectAccessReview |
//! | `attributes` | what a request asks, as an authorizer reads it |
//! | `review` | one review POSTed to a replica as kubegate |
//! | `failure` | why a review gave no answer |
//! | `remembered` | a bounded table of answers with TTLs, least recently used forgotten first |

pub(super) mod access;
pub(super) mod access_review;
pub(super) mod attributes;
pub(super) mod failure;
pub(super) mod remembered;
pub(super) mod review;
pub(super) mod review_queue;
pub(super) mod token_review;
pub(super) mod tokens;
