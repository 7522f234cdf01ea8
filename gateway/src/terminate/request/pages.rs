//! Where a paginated LIST's continue pages go: back to the replica that served its first page,
//! while that replica stays ready, the same stretch of readiness.
//!
//! Since 1.34 (KEP-4988, `ListFromCacheSnapshot`) an apiserver reads a continue page at its
//! first page's revision from its watch cache's snapshots while the revision is within the
//! cache's window, and from etcd otherwise (`Cacher.ShouldDelegateContinue` →
//! `shouldDelegateExactRV` → `CanServeExactRV`). Every replica snapshots its cache after each
//! event, so a replica that has been up all along serves the page from memory too; the one
//! that cannot is a replica whose cache started after the first page — restarted, or its cache
//! started over — which reads every page sent to it from etcd. The replica that answered the
//! first page is the one known to hold its revision: its pages go there first, and elsewhere
//! (as any request) when it is not ready, has been not ready since, or fails them.
//!
//! What is remembered is per client connection — a client pages one LIST on the connection it
//! began it on (kubectl, client-go's pager): the last [`HELD`] LISTs' first-page replicas, by
//! a hash of what tells one LIST from another (path, label and field selectors). Nothing is
//! read from a response; a continue page without a remembered first page is placed as any
//! request.

use crate::state::{Backend, Pool};
use kubegate_health::BackendState;
use kubegate_wire::classify::{RequestInfo, Verb};
use kubegate_wire::target::Query;
use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Mutex;

/// LISTs remembered per connection: client-go sends a whole process's requests (every
/// informer's LIST) over one connection. About 40 bytes each.
pub const HELD: usize = 32;

/// What a request is to a paginated LIST, named by a hash of the LIST.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paging {
    /// Not a page of a LIST.
    None,
    /// A first page: a LIST with a `limit` and no `continue`.
    First(u64),
    /// A continue page.
    Continue(u64),
}

impl Paging {
    /// What the request `info` (its decoded `path`, its `query`) is.
    pub fn of(info: &RequestInfo<'_>, path: &str, query: &Query<'_>) -> Paging {
        if info.class.verb != Verb::List {
            return Paging::None;
        }
        let continues = query.first("continue").is_some_and(|c| !c.is_empty());
        let limited = query
            .text("limit")
            .and_then(|l| l.parse::<i64>().ok())
            .is_some_and(|l| l > 0);
        if !continues && !limited {
            return Paging::None;
        }
        // Pages of one LIST share these; `limit`, `continue` and the resourceVersion
        // (client-go's pager clears it after the first page) may differ.
        let mut hash = DefaultHasher::new();
        path.hash(&mut hash);
        query.first("labelSelector").hash(&mut hash);
        query.first("fieldSelector").hash(&mut hash);
        let list = hash.finish();
        if continues {
            Paging::Continue(list)
        } else {
            Paging::First(list)
        }
    }
}

/// One connection's LISTs and the replicas that served their first pages.
#[derive(Default)]
pub struct PageHolders {
    held: Mutex<VecDeque<Held>>,
}

struct Held {
    list: u64,
    replica: SocketAddr,
    /// When the replica became ready: a replica ready again since is not the one that served.
    ready_since_ms: u64,
}

impl PageHolders {
    fn held(&self) -> std::sync::MutexGuard<'_, VecDeque<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `replica` answered the first page of `list`.
    pub fn served_first(&self, list: u64, replica: &Backend) {
        let mut held = self.held();
        held.retain(|h| h.list != list);
        if held.len() == HELD {
            held.pop_front();
        }
        held.push_back(Held {
            list,
            replica: replica.address,
            ready_since_ms: replica.since_unix_ms(),
        });
    }

    /// Where `list`'s first page was served, as far as it still holds the page's revision:
    /// in `pool`, ready all along since, not ejected.
    pub fn holder(&self, list: u64, pool: &Pool) -> Holder {
        let known = {
            let held = self.held();
            held.iter()
                .find(|h| h.list == list)
                .map(|h| (h.replica, h.ready_since_ms))
        };
        let Some((replica, since)) = known else {
            return Holder::Unknown;
        };
        let holds = pool.backends().iter().any(|b| {
            b.address == replica
                && b.state() == BackendState::Ready
                && b.since_unix_ms() == since
                && !b.ejected()
        });
        if holds {
            Holder::At(replica)
        } else {
            Holder::Gone
        }
    }
}

/// Where a continue page's first page was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Not on this connection (or forgotten).
    Unknown,
    /// On a replica that left, was not ready since, or is ejected: another must serve it.
    Gone,
    /// On this replica, which still holds it.
    At(SocketAddr),
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Uri};
    use kubegate_wire::classify::ReadTarget;

    fn paging(method: &str, target: &str) -> Paging {
        let uri: Uri = target.parse().unwrap();
        let read = ReadTarget::of(&uri).unwrap();
        Paging::of(
            &read.info(&method.parse::<Method>().unwrap()),
            read.path(),
            &read.query(),
        )
    }

    #[test]
    fn a_lists_pages_are_told_apart_from_other_lists_and_requests() {
        let cms = "/api/v1/namespaces/a/configmaps";
        let Paging::First(first) = paging("GET", &format!("{cms}?limit=500")) else {
            panic!("a first page")
        };
        let next = paging(
            "GET",
            &format!("{cms}?continue=abc&limit=500&resourceVersion="),
        );
        assert_eq!(next, Paging::Continue(first));
        // Another selector is another LIST.
        let other = paging(
            "GET",
            &format!("{cms}?continue=abc&limit=500&labelSelector=x%3Dy"),
        );
        assert!(matches!(other, Paging::Continue(l) if l != first));
        for not_a_page in [
            cms.to_string(),
            format!("{cms}?limit=0"),
            format!("{cms}?watch=1&limit=5"),
            format!("{cms}/x?limit=5"),
        ] {
            assert_eq!(paging("GET", &not_a_page), Paging::None, "{not_a_page}");
        }
    }
}
