//! The API resources the simulator serves, and how a request path names them.

/// One served resource.
#[derive(Debug, PartialEq, Eq)]
pub struct Resource {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural name in paths.
    pub plural: &'static str,
    /// Singular name.
    pub singular: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Short names for kubectl.
    pub short_names: &'static [&'static str],
    /// The first Kubernetes 1.x minor version that serves this group-version.
    pub introduced: u32,
    /// Served unless `--runtime-config` turns it off (a GA or alpha-1.24 beta API); a beta
    /// API since 1.24 is off until turned on.
    pub enabled_by_default: bool,
    /// A custom resource (a CRD's): its watch cache initializes after the built-in ones, and
    /// `/readyz` does not wait for it (KEP-4568).
    pub custom: bool,
}

impl Resource {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Store key prefix of the resource, or of one namespace of it.
    pub fn prefix(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/registry/{}/", self.plural)
        } else {
            format!("/registry/{}/{}/", self.group, self.plural)
        };
        match namespace {
            Some(ns) => format!("{base}{ns}/"),
            None => base,
        }
    }
}

/// `configmaps` (v1).
pub const CONFIGMAPS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "configmaps",
    singular: "configmap",
    kind: "ConfigMap",
    short_names: &["cm"],
    introduced: 0,
    enabled_by_default: true,
    custom: false,
};

/// `services` (v1): stored and watched as any object; no cluster IP is allocated and nothing
/// proxies them (the `default/kubernetes` EndpointSlice is the reconciler's).
pub const SERVICES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "services",
    singular: "service",
    kind: "Service",
    short_names: &["svc"],
    introduced: 0,
    enabled_by_default: true,
    custom: false,
};

/// `leases` (coordination.k8s.io/v1).
pub const LEASES: Resource = Resource {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    singular: "lease",
    kind: "Lease",
    short_names: &[],
    introduced: 0,
    enabled_by_default: true,
    custom: false,
};

/// `pods` (v1): created running, with every container ready (no scheduler or kubelet acts on
/// them); `exec`, `attach`, `portforward` and `log` answer as a kubelet would (`pods.rs`).
pub const PODS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "pods",
    singular: "pod",
    kind: "Pod",
    short_names: &["po"],
    introduced: 0,
    enabled_by_default: true,
    custom: false,
};

/// `endpointslices` (discovery.k8s.io/v1): the `default/kubernetes` slice is the lease
/// reconciler's (`reconciler.rs`).
pub const ENDPOINTSLICES: Resource = Resource {
    group: "discovery.k8s.io",
    version: "v1",
    plural: "endpointslices",
    singular: "endpointslice",
    kind: "EndpointSlice",
    short_names: &[],
    introduced: 0,
    enabled_by_default: true,
    custom: false,
};

/// `resourceclaims` (resource.k8s.io/v1beta1): a beta API, off unless `--runtime-config`
/// turns it on. It shares its storage with v1, as the apiserver's versions of one resource do.
pub const RESOURCECLAIMS_V1BETA1: Resource = Resource {
    group: "resource.k8s.io",
    version: "v1beta1",
    plural: "resourceclaims",
    singular: "resourceclaim",
    kind: "ResourceClaim",
    short_names: &[],
    introduced: 32,
    enabled_by_default: false,
    custom: false,
};

/// `resourceclaims` (resource.k8s.io/v1): GA, served from 1.34 — what a rolling upgrade from
/// 1.33 adds, so the simulator can show version skew across replicas.
pub const RESOURCECLAIMS_V1: Resource = Resource {
    group: "resource.k8s.io",
    version: "v1",
    plural: "resourceclaims",
    singular: "resourceclaim",
    kind: "ResourceClaim",
    short_names: &[],
    introduced: 34,
    enabled_by_default: true,
    custom: false,
};

/// `poddisruptionbudgets` (policy/v1, GA since 1.21): stored as any object; no disruption
/// controller keeps their status, so an eviction computes it as that controller would
/// (`eviction.rs`, `budget.rs`).
pub const PODDISRUPTIONBUDGETS: Resource = Resource {
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
    singular: "poddisruptionbudget",
    kind: "PodDisruptionBudget",
    short_names: &["pdb"],
    introduced: 0,
    enabled_by_default: true,
    custom: false,
};

/// `widgets` (kubegate.example.com/v1): a custom resource, as if its CRD were installed: its
/// watch cache initializes `--custom-resource-cache-init` after the built-in ones.
pub const WIDGETS: Resource = Resource {
    group: "kubegate.example.com",
    version: "v1",
    plural: "widgets",
    singular: "widget",
    kind: "Widget",
    short_names: &["wd"],
    introduced: 0,
    enabled_by_default: true,
    custom: true,
};

/// Every resource the simulator knows; which of them a replica serves depends on its version
/// and `--runtime-config` (`versions.rs`).
pub const ALL: [&Resource; 9] = [
    &CONFIGMAPS,
    &SERVICES,
    &PODS,
    &LEASES,
    &ENDPOINTSLICES,
    &PODDISRUPTIONBUDGETS,
    &RESOURCECLAIMS_V1BETA1,
    &RESOURCECLAIMS_V1,
    &WIDGETS,
];

/// Whether a request for `target` is long-running for the apiserver (kube-apiserver's
/// `BasicLongRunningRequestCheck(sets.NewString("watch", "proxy"), sets.NewString("attach",
/// "exec", "proxy", "log", "portforward"))`, k8s.io/apiserver `pkg/server/filters/longrunning.go`):
/// a watch (told apart by the caller), or one of those subresources. Priority and fairness
/// does not classify a long-running request other than a watch, and the shutdown's wait
/// group does not wait for (or refuse) one.
pub fn long_running_subresource(target: Option<&Target<'_>>) -> bool {
    target
        .and_then(|t| t.subresource)
        .is_some_and(|s| matches!(s, "attach" | "exec" | "proxy" | "log" | "portforward"))
}

/// A request path that names a resource.
#[derive(Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// The resource.
    pub resource: &'static Resource,
    /// Namespace, or all namespaces.
    pub namespace: Option<&'a str>,
    /// One object, or the collection.
    pub name: Option<&'a str>,
    /// A subresource of the object (`exec`, `log`, ...).
    pub subresource: Option<&'a str>,
}

/// Parses `/api/v1/[namespaces/NS/]PLURAL[/NAME[/SUBRESOURCE]]` and `/apis/G/V/...` alike;
/// `proxy` may be followed by a path (`pods/NAME/proxy/PATH`), which the proxy reads from the
/// request path itself.
pub fn parse(path: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] if namespace.is_some() => (*plural, Some(*name), None),
        [plural, name, sub, rest @ ..]
            if namespace.is_some() && (rest.is_empty() || *sub == "proxy") =>
        {
            (*plural, Some(*name), Some(*sub))
        }
        _ => return None,
    };
    let resource = ALL
        .into_iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)?;
    Some(Target {
        resource,
        namespace,
        name,
        subresource,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_resources() {
        assert_eq!(
            parse("/api/v1/namespaces/default/configmaps/x"),
            Some(Target {
                resource: &CONFIGMAPS,
                namespace: Some("default"),
                name: Some("x"),
                subresource: None,
            })
        );
        assert_eq!(
            parse("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"),
            Some(Target {
                resource: &LEASES,
                namespace: Some("kube-system"),
                name: None,
                subresource: None,
            })
        );
        assert_eq!(
            parse("/api/v1/configmaps"),
            Some(Target {
                resource: &CONFIGMAPS,
                namespace: None,
                name: None,
                subresource: None,
            })
        );
        assert_eq!(
            parse("/api/v1/namespaces/default/pods/p/exec"),
            Some(Target {
                resource: &PODS,
                namespace: Some("default"),
                name: Some("p"),
                subresource: Some("exec"),
            })
        );
        assert_eq!(
            parse("/api/v1/namespaces/default/pods/p:8080/proxy/a/b/"),
            Some(Target {
                resource: &PODS,
                namespace: Some("default"),
                name: Some("p:8080"),
                subresource: Some("proxy"),
            })
        );
        assert_eq!(parse("/api/v1/namespaces/default/pods/p/exec/x"), None);
        assert_eq!(parse("/api/v1/secrets"), None);
        assert_eq!(parse("/api/v1/namespaces/default"), None);
    }

    #[test]
    fn prefixes_separate_namespaces() {
        assert_eq!(CONFIGMAPS.prefix(Some("a")), "/registry/configmaps/a/");
        assert_eq!(LEASES.prefix(None), "/registry/coordination.k8s.io/leases/");
    }
}
