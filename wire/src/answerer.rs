//! Who writes the answer to a request, as far as its target tells: the apiserver's own
//! handlers, a workload the apiserver passes bytes on from (a pod or kubelet behind `*/proxy`,
//! `log`, `exec`, `attach`, `portforward`: the `proxy` registry and the kubelet's streaming
//! server copy status, headers and body through `proxy.UpgradeAwareHandler`), or the handlers
//! of an API group-version — the apiserver's own for its built-in groups and for custom
//! resources, an extension server's for a group-version an `APIService` with a `service`
//! names (kube-aggregator's `proxyHandler`, which copies the extension server's answer whole).
//!
//! Only the apiserver's own answers say anything about the replica that gave them: a body or
//! header a workload or an extension server wrote is theirs, however much it looks like the
//! apiserver's (an extension server built on k8s.io/apiserver writes the same priority and
//! fairness rejection and the same shutdown answers about itself).

use crate::classify::{LongRunning, RequestInfo};

/// The API groups kube-apiserver serves itself (1.33 to 1.36): what counts as its own while the
/// replicas' APIServices are not known (an APIService with a service can still hand one of
/// their group-versions to an extension server, which only a cluster admin can create).
pub const BUILT_IN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Who writes the answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answerer<'a> {
    /// The apiserver's own handlers: every path that is not a group-version's (`/version`,
    /// `/healthz`, `/api`, `/apis`, `/apis/GROUP`, `/openapi/...`).
    Apiserver,
    /// A pod or kubelet, through the apiserver: `proxy`, `log`, `exec`, `attach`,
    /// `portforward`, the `/proxy/` path verb.
    Workload,
    /// The handlers of a group-version: the apiserver's own for a built-in group's and a custom
    /// resource's, an extension server's for one an APIService with a service names.
    GroupVersion {
        /// The group (`""` for the core group).
        group: &'a str,
        /// The version.
        version: &'a str,
        /// One of [`BUILT_IN_GROUPS`].
        built_in: bool,
    },
}

/// Who writes the answer to a request read as `info`, at decoded `path`.
pub fn answerer<'a>(info: &RequestInfo<'a>, path: &'a str) -> Answerer<'a> {
    if matches!(
        info.class.long_running,
        Some(LongRunning::Session | LongRunning::Log)
    ) {
        return Answerer::Workload;
    }
    // A resource's group-version, or a group-version's discovery document (`/apis/G/V`,
    // which the aggregator proxies to an extension server for an aggregated one).
    let (group, version) = match info.target.api_group {
        Some(group) => (group, info.target.api_version),
        None => match path.trim_matches('/').split('/').collect::<Vec<_>>()[..] {
            ["apis", group, version, ..] if !group.is_empty() && !version.is_empty() => {
                (group, version)
            }
            _ => return Answerer::Apiserver,
        },
    };
    Answerer::GroupVersion {
        group,
        version,
        built_in: BUILT_IN_GROUPS.contains(&group),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ReadTarget;
    use http::{Method, Uri};

    fn of(method: Method, target: &str) -> String {
        let uri: Uri = target.parse().unwrap();
        let read = ReadTarget::of(&uri).unwrap();
        let info = read.info(&method);
        format!("{:?}", answerer(&info, read.path()))
    }

    #[test]
    fn the_answerer_is_read_from_the_target() {
        for t in [
            "/version",
            "/apis",
            "/api",
            "/apis/metrics.k8s.io",
            "/readyz",
        ] {
            assert_eq!(of(Method::GET, t), "Apiserver", "{t}");
        }
        let core = r#"GroupVersion { group: "", version: "v1", built_in: true }"#;
        for t in [
            "/api/v1/namespaces/a/pods",
            "/api/v1/namespaces/a/pods/p/eviction",
            "/api/v1/namespaces/a/pods/p/status",
        ] {
            assert_eq!(of(Method::GET, t), core, "{t}");
        }
        assert_eq!(
            of(Method::GET, "/apis/apps/v1/deployments"),
            r#"GroupVersion { group: "apps", version: "v1", built_in: true }"#
        );
        for t in [
            "/api/v1/namespaces/a/pods/p/proxy/x",
            "/api/v1/namespaces/a/pods/p:8080/proxy",
            "/api/v1/namespaces/a/services/s/proxy",
            "/api/v1/nodes/n/proxy/metrics",
            "/api/v1/namespaces/a/pods/p/log",
            "/api/v1/namespaces/a/pods/p/exec",
            "/api/v1/proxy/namespaces/a/pods/p",
        ] {
            assert_eq!(of(Method::POST, t), "Workload", "{t}");
        }
        let metrics =
            r#"GroupVersion { group: "metrics.k8s.io", version: "v1beta1", built_in: false }"#;
        assert_eq!(
            of(Method::GET, "/apis/metrics.k8s.io/v1beta1/pods"),
            metrics
        );
        assert_eq!(of(Method::GET, "/apis/metrics.k8s.io/v1beta1"), metrics);
        assert_eq!(
            of(Method::GET, "/apis/kubegate.example.com/v1/widgets"),
            r#"GroupVersion { group: "kubegate.example.com", version: "v1", built_in: false }"#
        );
    }
}
