//! The consistent store behind the API: what etcd is to a real apiserver. Replicas that share
//! an etcd share resourceVersions, so a watch resumes on any replica.
//!
//! Keys look like `/registry/configmaps/<namespace>/<name>`; values are the object's JSON
//! without `metadata.resourceVersion`, which is the key's `mod_revision` and added on read.

mod cache;
mod contract;
mod etcd;
mod history;
mod memory;

pub use cache::WatchCache;
pub use contract::{EventStream, ReadFrom, Store, StoreError, StoreEvent, Stored};
pub use etcd::EtcdStore;
pub use memory::MemoryStore;
