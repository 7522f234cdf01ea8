//! The server side: a client connection accepted, its TLS handshake (the cluster its server
//! name chooses, and so the certificate it sees), its HTTP/1.1 or HTTP/2 server, and what one
//! connection may hold.
//!
//! | module | job |
//! |---|---|
//! | `listener` | TLS handshake (with a deadline), the client's certificate identity, the HTTP/1.1 or HTTP/2 server, GOAWAY / `Connection: close` when kubegate drains |
//! | `resets` | the rapid reset rule: a connection whose streams are mostly reset at once is closed |

pub(super) mod listener;
pub(super) mod resets;
