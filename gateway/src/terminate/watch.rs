//! Watches kept alive: a watch whose replica goes away continues on another, and the share of
//! long-running requests is kept even across replicas.
//!
//! | module | job |
//! |---|---|
//! | `continuity` | a watch whose replica goes away continues on another from its last position, until its time is up |
//! | `share` | the share of long-running requests kept even: a replica holding more than its share asks some of its watches to move (a task the control runtime starts) |

pub(super) mod continuity;
pub(super) mod share;
