//! The apiserver's health checks and what makes each fail.
//!
//! Order and names follow a v1.3x kube-apiserver's `/readyz?verbose`. A check fails when the
//! fault port forces it, when it is a post-start hook and startup is not finished, or (`shutdown`)
//! once shutdown began.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

/// Post-start hooks that are still running during the simulated startup.
const SLOW_HOOKS: &[&str] = &[
    "poststarthook/start-apiextensions-controllers",
    "poststarthook/crd-informer-synced",
    "poststarthook/storage-readiness",
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/apiservice-registration-controller",
];

/// Post-start hooks (and `autoregister-completion`, which sits among them), in output order.
const POSTSTART_HOOKS: &[&str] = &[
    "poststarthook/start-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers",
    "poststarthook/priority-and-fairness-config-consumer",
    "poststarthook/priority-and-fairness-filter",
    "poststarthook/storage-object-count-tracker-hook",
    "poststarthook/start-apiextensions-informers",
    "poststarthook/start-apiextensions-controllers",
    "poststarthook/crd-informer-synced",
    "poststarthook/start-system-namespaces-controller",
    "poststarthook/start-cluster-authentication-info-controller",
    "poststarthook/start-kube-apiserver-identity-lease-controller",
    "poststarthook/start-kube-apiserver-identity-lease-garbage-collector",
    "poststarthook/storage-readiness",
    "poststarthook/start-legacy-token-tracking-controller",
    "poststarthook/start-service-ip-repair-controllers",
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/scheduling/bootstrap-system-priority-classes",
    "poststarthook/priority-and-fairness-config-producer",
    "poststarthook/bootstrap-controller",
    "poststarthook/aggregator-reload-proxy-client-cert",
    "poststarthook/start-kube-aggregator-informers",
    "poststarthook/apiservice-registration-controller",
    "poststarthook/apiservice-discovery-controller",
    "poststarthook/kube-apiserver-autoregistration",
    "autoregister-completion",
    "poststarthook/apiservice-openapi-controller",
    "poststarthook/apiservice-openapiv3-controller",
];

/// Which endpoint a check list belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/readyz`
    Readyz,
    /// `/livez`
    Livez,
    /// `/healthz`
    Healthz,
}

impl Endpoint {
    /// The word in `... check passed`.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Readyz => "readyz",
            Endpoint::Livez => "livez",
            Endpoint::Healthz => "healthz",
        }
    }

    /// The endpoint's checks, in output order.
    pub fn checks(self) -> Vec<&'static str> {
        let mut v = vec!["ping", "log", "etcd"];
        if self == Endpoint::Readyz {
            v.extend(["etcd-readiness", "informer-sync"]);
        }
        v.extend(POSTSTART_HOOKS);
        if self == Endpoint::Readyz {
            v.push("shutdown");
        }
        v
    }
}

/// Live state behind the checks.
#[derive(Default)]
pub struct Checks {
    forced: RwLock<BTreeSet<String>>,
    started: AtomicBool,
    /// The custom resources' watch caches initialized (after `started`).
    custom_caches_ready: AtomicBool,
    shutting_down: AtomicBool,
    storage_down: AtomicBool,
    cache_reinitializing: AtomicBool,
}

impl Checks {
    /// Startup finished: post-start hooks pass.
    pub fn finish_startup(&self) {
        self.started.store(true, Ordering::Release);
    }

    /// Shutdown began: readyz's `shutdown` check fails from now on.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Post-start hooks finished (the watch cache is initialised).
    pub fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// The watch caches re-initialize (true) or are ready again (false): the cacher after
    /// its etcd watch failed. `/readyz` is not affected (its `storage-readiness` hook ran once,
    /// at start).
    pub fn set_cache_initializing(&self, initializing: bool) {
        self.cache_reinitializing
            .store(initializing, Ordering::Release);
    }

    /// Whether the watch caches cannot serve yet: startup not finished, or re-initializing.
    pub fn cache_initializing(&self) -> bool {
        !self.started() || self.cache_reinitializing.load(Ordering::Acquire)
    }

    /// The custom resources' watch caches initialized: the CRD informer synced and their
    /// caches listed, some time after the built-in ones. `/readyz` never waited for them.
    pub fn finish_custom_caches(&self) {
        self.custom_caches_ready.store(true, Ordering::Release);
    }

    /// Whether the watch cache of a resource (`custom` or built-in) cannot serve yet.
    pub fn cache_initializing_for(&self, custom: bool) -> bool {
        self.cache_initializing() || (custom && !self.custom_caches_ready.load(Ordering::Acquire))
    }

    /// Shutdown began.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// The store (etcd) answers or not: drives `etcd` and `etcd-readiness`.
    pub fn set_storage_down(&self, down: bool) {
        self.storage_down.store(down, Ordering::Release);
    }

    /// Makes `check` fail (true) or stop failing (false) on every endpoint that has it.
    pub fn force(&self, check: &str, failing: bool) {
        let mut f = self.forced.write().unwrap_or_else(|e| e.into_inner());
        if failing {
            f.insert(check.to_string());
        } else {
            f.remove(check);
        }
    }

    /// Checks forced to fail.
    pub fn forced(&self) -> Vec<String> {
        self.forced
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Why `check` fails on `endpoint` right now, or `None` when it passes.
    pub fn failure(&self, endpoint: Endpoint, check: &str) -> Option<String> {
        if self
            .forced
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(check)
        {
            return Some(format!("{check} check failed (fault injected)"));
        }
        // Liveness stays green during startup, as within the apiserver's livez grace period.
        if endpoint == Endpoint::Readyz
            && !self.started.load(Ordering::Acquire)
            && SLOW_HOOKS.contains(&check)
        {
            return Some("not finished".into());
        }
        if matches!(check, "etcd" | "etcd-readiness") && self.storage_down.load(Ordering::Acquire) {
            return Some("etcd is not reachable".into());
        }
        if check == "shutdown" && self.shutting_down() {
            return Some("process is shutting down".into());
        }
        None
    }
}
