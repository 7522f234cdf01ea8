//! What a replica serves: its version and API group-versions, as terminate mode learned them
//! from the replica's own `/version`, `/api` and `/apis` (`versions`; `connect` and `dispatch`
//! only forget it, on signs of a restart), kept per replica in its cluster's `Upstreams` and
//! read by `skew` to route around version skew. A replica is
//! `Unknown` until learned and again from the moment it leaves `ready` (it may come back as
//! another version); one whose discovery cannot be read is `Unreadable`, and then routed as
//! if version skew did not exist.

use arc_swap::ArcSwap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

/// API group-versions, `(group, version)` (`""` for core).
pub type GroupVersions = Vec<(Box<str>, Box<str>)>;

/// A replica's version and served group-versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSet {
    /// `/version`'s `gitVersion`, with the emulated version when it differs
    /// (`v1.34.1 (emulating 1.33)`).
    pub version: String,
    /// What orders versions, newest greatest: emulated (major, minor), then the binary's
    /// (major, minor, patch).
    pub rank: [u32; 5],
    /// Served group-versions, `(group, version)` (`""` for core), sorted.
    pub group_versions: GroupVersions,
    /// A hash of `group_versions`: two replicas serve the same set when these are equal.
    pub fingerprint: u64,
}

impl ApiSet {
    /// The set of a replica at `version` (ranked `rank`) serving `group_versions`.
    pub fn new(version: String, rank: [u32; 5], mut group_versions: GroupVersions) -> ApiSet {
        group_versions.sort();
        group_versions.dedup();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        group_versions.hash(&mut h);
        ApiSet {
            version,
            rank,
            group_versions,
            fingerprint: h.finish(),
        }
    }

    /// Whether `group`/`version` is served (no allocation: a binary search of borrowed pairs).
    pub fn serves(&self, group: &str, version: &str) -> bool {
        self.group_versions
            .binary_search_by(|(g, v)| (g.as_ref(), v.as_ref()).cmp(&(group, version)))
            .is_ok()
    }

    /// Whether the discovery document at the decoded `path` is one this set implies the
    /// replica has: `/api`, `/apis` and the OpenAPI roots always; `/apis/GROUP` for a group it
    /// serves a version of; `/openapi/v3/api/v1` and `/openapi/v3/apis/GROUP/VERSION` for a
    /// group-version it serves.
    pub fn claims_document(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        if matches!(path, "/api" | "/apis" | "/openapi/v2" | "/openapi/v3") {
            return true;
        }
        if let Some(rest) = path.strip_prefix("/openapi/v3/") {
            return match rest.split('/').collect::<Vec<_>>()[..] {
                ["api", version] => self.serves("", version),
                ["apis", group, version] => self.serves(group, version),
                _ => false,
            };
        }
        path.strip_prefix("/apis/")
            .filter(|g| !g.contains('/'))
            .is_some_and(|group| self.group_versions.iter().any(|(g, _)| &**g == group))
    }

    /// The group-versions as the apiserver writes them (`v1`, `apps/v1`).
    pub fn names(&self) -> impl Iterator<Item = String> + '_ {
        self.group_versions.iter().map(|(g, v)| {
            if g.is_empty() {
                v.to_string()
            } else {
                format!("{g}/{v}")
            }
        })
    }
}

/// What is known of a replica's served APIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// Not learned yet, or no longer (the replica left `ready`).
    Unknown,
    /// Learned at the instant given.
    Learned(Arc<ApiSet>, Instant),
    /// Its discovery could not be read (why): routed as if it served everything.
    Unreadable(String, Instant),
}

/// One replica's [`Served`], read on the request path without a lock.
pub struct ServedApis {
    current: ArcSwap<Served>,
}

impl Default for ServedApis {
    fn default() -> ServedApis {
        ServedApis {
            current: ArcSwap::from_pointee(Served::Unknown),
        }
    }
}

impl ServedApis {
    /// What is known now.
    pub fn get(&self) -> arc_swap::Guard<Arc<Served>> {
        self.current.load()
    }

    /// Replaces what is known; returns what was.
    pub fn set(&self, served: Served) -> Arc<Served> {
        self.current.swap(Arc::new(served))
    }

    /// Forgets what was learned (to be read again at once), if anything was; says whether.
    pub fn forget(&self) -> bool {
        let learned = matches!(&**self.get(), Served::Learned(..) | Served::Unreadable(..));
        if learned {
            self.set(Served::Unknown);
        }
        learned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(gvs: &[(&str, &str)]) -> ApiSet {
        ApiSet::new(
            "v1.35.0".into(),
            [1, 35, 1, 35, 0],
            gvs.iter()
                .map(|(g, v)| ((*g).into(), (*v).into()))
                .collect(),
        )
    }

    #[test]
    fn membership_and_fingerprints() {
        let a = set(&[("resource.k8s.io", "v1"), ("", "v1"), ("apps", "v1")]);
        assert!(a.serves("", "v1"));
        assert!(a.serves("resource.k8s.io", "v1"));
        assert!(!a.serves("resource.k8s.io", "v1beta1"));
        assert!(!a.serves("", "v2"));
        let same = set(&[("apps", "v1"), ("", "v1"), ("resource.k8s.io", "v1")]);
        assert_eq!(a.fingerprint, same.fingerprint);
        let other = set(&[("apps", "v1"), ("", "v1")]);
        assert_ne!(a.fingerprint, other.fingerprint);
        assert_eq!(
            a.names().collect::<Vec<_>>(),
            ["v1", "apps/v1", "resource.k8s.io/v1"]
        );
        // Discovery documents it implies it has.
        for yes in [
            "/api",
            "/apis/",
            "/apis/apps",
            "/openapi/v3",
            "/openapi/v3/apis/resource.k8s.io/v1",
            "/openapi/v3/api/v1",
        ] {
            assert!(a.claims_document(yes), "{yes}");
        }
        for no in [
            "/apis/batch",
            "/openapi/v3/apis/apps/v2",
            "/openapi/v3/apis/apps",
            "/version",
        ] {
            assert!(!a.claims_document(no), "{no}");
        }
    }
}
