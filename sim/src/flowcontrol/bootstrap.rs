//! The configuration objects a 1.33–1.35 apiserver creates for itself
//! (`k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go`): its priority levels with
//! their shares of the server's seats, and the flow schemas that classify a request into one,
//! matched in order of precedence.

use crate::auth::User;

/// A priority level's configuration.
#[derive(Debug)]
pub struct LevelSpec {
    /// The object's name.
    pub name: &'static str,
    /// Its share of the server's seats (`nominalConcurrencyShares`); 0 for `exempt`.
    pub shares: u32,
    /// Queues (`queuing.queues`); 0: a request finding no free seat is rejected at once
    /// (`limitResponse.type: Reject`, `catch-all`'s).
    pub queues: usize,
    /// Queues a flow is dealt (`queuing.handSize`).
    pub hand_size: usize,
    /// Requests one queue holds (`queuing.queueLengthLimit`).
    pub queue_length_limit: usize,
    /// Never limited (`type: Exempt`).
    pub exempt: bool,
}

const fn limited(name: &'static str, shares: u32, queues: usize, hand_size: usize) -> LevelSpec {
    LevelSpec {
        name,
        shares,
        queues,
        hand_size,
        queue_length_limit: 50,
        exempt: false,
    }
}

/// Every priority level, mandatory and suggested.
pub const LEVELS: &[LevelSpec] = &[
    LevelSpec {
        name: "exempt",
        shares: 0,
        queues: 0,
        hand_size: 0,
        queue_length_limit: 0,
        exempt: true,
    },
    limited("system", 30, 64, 6),
    limited("node-high", 40, 64, 6),
    limited("leader-election", 10, 16, 4),
    limited("workload-high", 40, 128, 6),
    limited("workload-low", 100, 128, 6),
    limited("global-default", 20, 128, 6),
    limited("catch-all", 5, 0, 0),
];

/// What tells one flow of a schema from another (`distinguisherMethod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distinguisher {
    /// The user's name.
    ByUser,
    /// The request's namespace.
    ByNamespace,
}

/// What a flow schema is matched against: who asks, and what for.
#[derive(Debug)]
pub struct Attributes<'a> {
    /// Who.
    pub user: &'a User,
    /// The request's verb as authorization names it (`get`, `list`, `watch`, `create`, ...).
    pub verb: &'a str,
    /// API group and resource, for a resource request.
    pub resource: Option<(&'a str, &'a str)>,
    /// The namespace, for a namespaced request.
    pub namespace: Option<&'a str>,
}

impl Attributes<'_> {
    fn user_is(&self, names: &[&str]) -> bool {
        names.contains(&self.user.name.as_str())
    }

    fn in_group(&self, group: &str) -> bool {
        self.user.groups.iter().any(|g| g == group)
    }

    /// A service account of `namespace` (`system:serviceaccount:NS:NAME`).
    fn service_account_of(&self, namespace: &str) -> bool {
        self.user
            .name
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .is_some_and(|(ns, _)| ns == namespace)
    }

    fn verb_is(&self, verbs: &[&str]) -> bool {
        verbs.contains(&self.verb)
    }

    /// Endpoints, config maps (core) or leases: what leader election writes.
    fn election_object(&self) -> bool {
        matches!(
            self.resource,
            Some(("", "endpoints" | "configmaps")) | Some(("coordination.k8s.io", "leases"))
        )
    }
}

/// A flow schema: the level it sends the requests it matches to.
pub struct SchemaSpec {
    /// The object's name.
    pub name: &'static str,
    /// `matchingPrecedence`: the lowest that matches classifies the request.
    pub precedence: u32,
    /// The priority level's name.
    pub level: &'static str,
    /// How its flows are told apart.
    pub distinguisher: Distinguisher,
    /// Its subjects and rules.
    pub matches: fn(&Attributes) -> bool,
}

/// Every flow schema, in order of precedence.
pub const SCHEMAS: &[SchemaSpec] = &[
    SchemaSpec {
        name: "exempt",
        precedence: 1,
        level: "exempt",
        distinguisher: Distinguisher::ByUser,
        matches: |a| a.in_group("system:masters"),
    },
    SchemaSpec {
        name: "system-leader-election",
        precedence: 100,
        level: "leader-election",
        distinguisher: Distinguisher::ByUser,
        matches: |a| {
            (a.user_is(&["system:kube-controller-manager", "system:kube-scheduler"])
                || a.user_is(&[
                    "system:serviceaccount:kube-system:kube-controller-manager",
                    "system:serviceaccount:kube-system:kube-scheduler",
                ]))
                && a.verb_is(&["get", "create", "update"])
                && a.election_object()
        },
    },
    SchemaSpec {
        name: "endpoint-controller",
        precedence: 150,
        level: "workload-high",
        distinguisher: Distinguisher::ByUser,
        matches: |a| {
            a.user_is(&[
                "system:kube-controller-manager",
                "system:serviceaccount:kube-system:endpoint-controller",
            ]) && a.verb_is(&["get", "create", "update"])
                && matches!(a.resource, Some(("", "endpoints")))
        },
    },
    SchemaSpec {
        name: "workload-leader-election",
        precedence: 200,
        level: "leader-election",
        distinguisher: Distinguisher::ByUser,
        matches: |a| {
            a.service_account_of("kube-system")
                && a.verb_is(&["get", "create", "update"])
                && a.election_object()
        },
    },
    SchemaSpec {
        name: "system-node-high",
        precedence: 400,
        level: "node-high",
        distinguisher: Distinguisher::ByUser,
        matches: |a| {
            a.in_group("system:nodes")
                && matches!(
                    a.resource,
                    Some(("", "nodes")) | Some(("coordination.k8s.io", "leases"))
                )
        },
    },
    SchemaSpec {
        name: "system-nodes",
        precedence: 500,
        level: "system",
        distinguisher: Distinguisher::ByUser,
        matches: |a| a.in_group("system:nodes"),
    },
    SchemaSpec {
        name: "kube-controller-manager",
        precedence: 800,
        level: "workload-high",
        distinguisher: Distinguisher::ByNamespace,
        matches: |a| a.user_is(&["system:kube-controller-manager"]),
    },
    SchemaSpec {
        name: "kube-scheduler",
        precedence: 800,
        level: "workload-high",
        distinguisher: Distinguisher::ByNamespace,
        matches: |a| a.user_is(&["system:kube-scheduler"]),
    },
    SchemaSpec {
        name: "kube-system-service-accounts",
        precedence: 900,
        level: "workload-high",
        distinguisher: Distinguisher::ByNamespace,
        matches: |a| a.service_account_of("kube-system"),
    },
    SchemaSpec {
        name: "service-accounts",
        precedence: 9000,
        level: "workload-low",
        distinguisher: Distinguisher::ByUser,
        matches: |a| a.in_group("system:serviceaccounts"),
    },
    SchemaSpec {
        name: "global-default",
        precedence: 9900,
        level: "global-default",
        distinguisher: Distinguisher::ByUser,
        matches: |a| a.in_group("system:authenticated") || a.in_group("system:unauthenticated"),
    },
    SchemaSpec {
        name: "catch-all",
        precedence: 10000,
        level: "catch-all",
        distinguisher: Distinguisher::ByUser,
        matches: |_| true,
    },
];

/// The schema that classifies `attrs`: the first that matches, by precedence (`catch-all`
/// matches everything).
pub fn classify(attrs: &Attributes) -> &'static SchemaSpec {
    SCHEMAS
        .iter()
        .filter(|s| (s.matches)(attrs))
        .min_by_key(|s| s.precedence)
        .expect("catch-all matches every request")
}

/// An object's UID as the response headers carry it. The apiserver's are random and kept in
/// etcd, the same on every replica of a cluster; these are derived from the name, so that they
/// are the same on every replica too.
pub fn uid(name: &str) -> String {
    // FNV-1a, twice with different offsets, for 128 bits.
    let hash = |offset: u64| {
        name.bytes().fold(offset, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let (a, b) = (hash(0xcbf2_9ce4_8422_2325), hash(0x8422_2325_cbf2_9ce4));
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: BTreeMap::new(),
            uid: String::new(),
        }
    }

    fn level_of(
        u: &User,
        verb: &str,
        resource: Option<(&str, &str)>,
        ns: Option<&str>,
    ) -> &'static str {
        classify(&Attributes {
            user: u,
            verb,
            resource,
            namespace: ns,
        })
        .level
    }

    #[test]
    fn requests_are_classified_as_the_bootstrap_schemas_say() {
        let admin = user(
            "kubernetes-admin",
            &["system:masters", "system:authenticated"],
        );
        let kcm = user("system:kube-controller-manager", &["system:authenticated"]);
        let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        let sa = user(
            "system:serviceaccount:default:proxy",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:default",
                "system:authenticated",
            ],
        );
        let kube_system_sa = user(
            "system:serviceaccount:kube-system:coredns",
            &["system:serviceaccounts", "system:authenticated"],
        );
        let someone = user("alice", &["system:authenticated"]);
        let lease = Some(("coordination.k8s.io", "leases"));
        let pods = Some(("", "pods"));
        assert_eq!(level_of(&admin, "list", pods, None), "exempt");
        assert_eq!(
            level_of(&kcm, "update", lease, Some("kube-system")),
            "leader-election"
        );
        assert_eq!(level_of(&kcm, "list", pods, None), "workload-high");
        assert_eq!(
            level_of(&node, "update", lease, Some("kube-node-lease")),
            "node-high"
        );
        assert_eq!(level_of(&node, "list", pods, None), "system");
        assert_eq!(
            level_of(&kube_system_sa, "get", lease, Some("kube-system")),
            "leader-election"
        );
        assert_eq!(
            level_of(&kube_system_sa, "list", pods, None),
            "workload-high"
        );
        assert_eq!(level_of(&sa, "list", pods, None), "workload-low");
        assert_eq!(level_of(&someone, "list", pods, None), "global-default");
        assert_eq!(
            level_of(&User::anonymous(), "get", None, None),
            "global-default"
        );
        assert_eq!(level_of(&user("x", &[]), "get", None, None), "catch-all");
    }

    #[test]
    fn every_schema_names_a_level_and_precedence_orders_them() {
        for s in SCHEMAS {
            assert!(LEVELS.iter().any(|l| l.name == s.level), "{}", s.name);
        }
        assert!(SCHEMAS
            .windows(2)
            .all(|w| w[0].precedence <= w[1].precedence));
    }

    #[test]
    fn uids_are_stable_distinct_and_shaped_like_uuids() {
        assert_eq!(uid("workload-low"), uid("workload-low"));
        assert_ne!(uid("workload-low"), uid("workload-high"));
        let u = uid("catch-all");
        assert_eq!(u.len(), 36, "{u}");
        assert_eq!(u.matches('-').count(), 4, "{u}");
    }
}
