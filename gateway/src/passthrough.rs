//! The L4 passthrough plane: TLS passes through untouched. With clusters, the server name of
//! the client's ClientHello (read, not answered) chooses the cluster. A new connection is
//! placed on a ready backend (connect, retried on another), registered with that backend, and both sockets
//! go to a relay task that copies bytes until either side closes or kubegate closes the
//! connection (backend down, drain deadline, shutdown grace: the task is aborted).
//!
//! | module | job |
//! |---|---|
//! | `proxy` | the plane's entry: choose the cluster, place the connection, register it, spawn its relay |
//! | `hello` | the server name of a ClientHello, read without answering it |
//! | `guard` | a relay's registration with its backend, released when the relay ends |
//! | `port_probe` | the readiness of the replicas' other port a listener forwards to (`backend_port`, `backend_probe: tcp`) |
//! | `copy` | `Relay`: the hand-written future that copies both ways |

mod copy;
mod guard;
mod hello;
mod port_probe;
mod proxy;

pub use proxy::Passthrough;
