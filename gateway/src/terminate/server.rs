//! The server side: a client connection accepted, its TLS handshake (the cluster its server
//! name chooses, and so the certificate it sees), its HTTP/1.1 or HTTP/2 server, and what one
//! connection may hold.
//!
//! | module | job |
//! |---|---|
//! | `listener` | TLS handshake (with a deadline), the client's certificate identity, the HTTP/1.1 or HTTP/2 server, GOAWAY / `Connection: close` when kubegate drains |
//! | `clusters` | what terminate mode keeps for each cluster it serves (its terminate state, and its handshake where it has its own), kept with the cluster in the table both planes route by |
//! | `resets` | the rapid reset rule: a connection whose streams are mostly reset at once is closed |

pub(super) mod clusters;
pub(super) mod listener;
pub(super) mod resets;
