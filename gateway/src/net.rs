//! Network plumbing both data planes share: the accept loops (with the admission limit), and the one loop that places new work on a backend (pick → try → on a failure
//! that allows it, another; a failed connect ejects the backend).

mod accept;
mod connect;

pub use accept::{bind, Acceptor, Serve};
pub use connect::{connect_failed, place, Attempt, Unplaced, PASSIVE_EJECTION};
