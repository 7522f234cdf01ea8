//! What terminate mode keeps for each cluster it serves: below the request, above the stages
//! a request's state lives in.
//!
//! | module | job |
//! |---|---|
//! | `mode` | one cluster's long-lived state, kept across generations: reviewed tokens, access decisions, joins, feeds, the owner of its upstream settings |
//! | `shed` | the rules put in force at run time (`kubegate shed`), as one cluster compiled them, and the reserve they never take unless they name it |
//! | `auto_shed` | `terminate.auto_shed`: which levels are troubled, the runaway senders of each, held back by a growing share, let go once it calms (the task that looks each second is `control::auto_shed`) |
//! | `plane` | the table of the clusters served in one generation, with each one's handshake, upstream settings and rules in force: what a connection is routed by and a request reads in one load |

pub(super) mod auto_shed;
pub(super) mod mode;
pub(super) mod plane;
pub(super) mod shed;
