//! The bottom of terminate mode, what every stage above speaks: one exchange with a backend
//! or a client — the HTTP/2 stream to a backend, a request's registration there, request
//! bodies held within their bounds, response bodies, and the `Status` errors kubegate answers
//! itself. Nothing here decides where a request goes.
//!
//! | module | job |
//! |---|---|
//! | `coalesce` | writes to a connection held until a flush, and the flush put off one turn of the scheduler: the frames of every task ready at once go out in one TLS record and one system call |
//! | `h2client` | the HTTP/2 client toward backends, on `h2` directly: a request's own task sends it and waits for its response |
//! | `in_flight` | a request's registration with its backend (the load signal, what a drain waits for) |
//! | `bodies` | request bodies read whole within their bounds (per request, per connection, in all) and deadline |
//! | `charge` | bytes held for several clients, counted against shared bounds until the last lets go |
//! | `body` | response bodies: made by kubegate, relayed, a watch followed, shared by joined reads, logged when they end |
//! | `status` | the `Status` errors kubegate answers itself |

pub(super) mod bodies;
pub(super) mod body;
pub(super) mod charge;
pub(super) mod coalesce;
pub(super) mod h2client;
pub(super) mod in_flight;
pub(super) mod status;
