//! The rules put in force at run time (`state::Shed`), compiled for one cluster, and the
//! reserve they never take unless they name it: the control plane's own traffic, which an
//! operator shedding a runaway client must not cut by a rule written too wide.
//!
//! The reserve, and what naming each part means:
//! - `system:masters` (break-glass administrators): the rule's `groups` names `system:masters`;
//! - the control plane's components (`system:kube-controller-manager`,
//!   `system:kube-scheduler`, `system:cloud-controller-manager`, `system:kube-proxy`, and
//!   service accounts of `kube-system`): its `users` names the user, its `service_accounts`
//!   names `kube-system:NAME` or `kube-system:*`, or its `groups` names
//!   `system:serviceaccounts:kube-system`;
//! - nodes (`system:node:*`, group `system:nodes`: their status, their heartbeats): its
//!   `groups` names `system:nodes`, or its `users` names the node;
//! - lease renewals (a get, update or patch of one `coordination.k8s.io` lease: leader
//!   election, node heartbeats): its `resources` names `leases`.
//!
//! A request in several parts is taken only by a rule that names every one of them (naming
//! `leases` for one tenant's leases takes no node's heartbeat); otherwise the next matching
//! rule (run-time, then the file's) decides.

use crate::state::Shed;
use crate::telemetry::TerminateMetrics;
use crate::terminate::rules::{Facts, Rule, Rules};
use arc_swap::ArcSwap;
use kubegate_config::DispatchRule;
use kubegate_wire::identity::UserInfo;
use std::sync::Arc;

/// The run-time rules as one cluster compiled them.
struct Compiled {
    /// The `Shed` change they were compiled from.
    version: u64,
    specs: Arc<Vec<DispatchRule>>,
    rules: Rules,
}

/// One cluster's compiled copy of the run-time rules, made again when they change.
pub struct ShedRules(ArcSwap<Compiled>);

impl Default for ShedRules {
    fn default() -> Self {
        ShedRules(ArcSwap::from_pointee(Compiled {
            version: 0,
            specs: Arc::default(),
            rules: Rules::default(),
        }))
    }
}

/// A part of the reserve a request is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reserve {
    Masters,
    Components,
    Nodes,
    Leases,
}

const COMPONENTS: &[&str] = &[
    "system:kube-controller-manager",
    "system:kube-scheduler",
    "system:cloud-controller-manager",
    "system:kube-proxy",
];
const KUBE_SYSTEM_SA: &str = "system:serviceaccount:kube-system:";

impl ShedRules {
    /// The run-time rule of `shed` that takes `facts` in `cluster`, if any: the first that
    /// matches, has not expired, and names the reserve the request is in (if it is).
    pub fn rule_for(
        &self,
        shed: &Shed,
        cluster: &str,
        metrics: &TerminateMetrics,
        facts: &Facts<'_>,
    ) -> Option<Arc<Rule>> {
        let version = shed.version();
        if version == 0 {
            return None;
        }
        let compiled = self.compiled(shed, version, cluster, metrics);
        let reserve = reserve_of(facts);
        let taken = compiled
            .rules
            .matching(facts)
            .find(|(i, _)| reserve.is_empty() || names(&compiled.specs[*i], &reserve, facts))
            .map(|(_, rule)| rule.clone());
        taken
    }
}

impl ShedRules {
    /// Whether some run-time rule names users, groups or service accounts: a sender kubegate
    /// cannot name (a token not reviewed) may be one it would take, and is not let through as
    /// if none did (as with the file's rules).
    pub fn names_senders(&self, shed: &Shed, cluster: &str, metrics: &TerminateMetrics) -> bool {
        let version = shed.version();
        version != 0
            && self
                .compiled(shed, version, cluster, metrics)
                .rules
                .names_senders()
    }

    /// The rules of `shed`'s change `version` for `cluster` — the gateway's own, then those
    /// its object holds — compiled once per change. Their names carry `shed:` (the gateway's)
    /// or `shed:cluster:` (the object's; a rule's own name is a DNS label, so never one of
    /// these), so their metric series and messages are never a file rule's, nor each other's.
    fn compiled(
        &self,
        shed: &Shed,
        version: u64,
        cluster: &str,
        metrics: &TerminateMetrics,
    ) -> Arc<Compiled> {
        let compiled = self.0.load_full();
        if compiled.version == version {
            return compiled;
        }
        let all = shed.all();
        let from_object = all.clusters.get(cluster).map_or(&[][..], Vec::as_slice);
        let specs: Vec<DispatchRule> = all.gateway.iter().chain(from_object).cloned().collect();
        let named: Vec<DispatchRule> = all
            .gateway
            .iter()
            .map(|r| ("shed:", r))
            .chain(from_object.iter().map(|r| ("shed:cluster:", r)))
            .map(|(prefix, r)| DispatchRule {
                name: r.name.as_ref().map(|n| format!("{prefix}{n}")),
                ..r.clone()
            })
            .collect();
        let rules = Rules::compile(cluster, &named, metrics);
        let gone: Vec<&str> = compiled
            .rules
            .names()
            .filter(|old| !rules.names().any(|new| new == *old))
            .collect();
        Rules::forget(cluster, &gone, metrics);
        let compiled = Arc::new(Compiled {
            version,
            rules,
            specs: Arc::new(specs),
        });
        self.0.store(compiled.clone());
        compiled
    }
}

/// The part of the reserve `rule` names, if any: a rule that does is taken from a gateway's
/// own admin endpoint only, never from the cluster's shed object — whoever may write a
/// ConfigMap must not be able to turn away the administrators who would undo it.
pub fn names_reserve(rule: &DispatchRule) -> Option<&'static str> {
    let m = &rule.matches;
    let named = |list: &[String], pick: &dyn Fn(&str) -> bool| {
        list.iter().any(|v| pick(v.trim_start_matches('-')))
    };
    if named(&m.groups, &|g| g == "system:masters") {
        return Some("system:masters");
    }
    if named(&m.groups, &|g| g == "system:nodes")
        || named(&m.users, &|u| u.starts_with("system:node:"))
    {
        return Some("nodes");
    }
    if named(&m.groups, &|g| g == "system:serviceaccounts:kube-system")
        || named(&m.users, &|u| {
            COMPONENTS.contains(&u) || u.starts_with(KUBE_SYSTEM_SA)
        })
        || named(&m.service_accounts, &|sa| sa.starts_with("kube-system:"))
    {
        return Some("the control plane's components");
    }
    if named(&m.resources, &|r| r == "leases" || r.starts_with("leases/")) {
        return Some("leases");
    }
    None
}

/// Whether `facts` is in any part of the reserve.
pub fn in_reserve(facts: &Facts<'_>) -> bool {
    !reserve_of(facts).is_empty()
}

/// Whether `sender` is in the reserve whatever it asks: `system:masters`, the control
/// plane's components, nodes.
pub fn sender_in_reserve(sender: &UserInfo) -> bool {
    !reserve_of_sender(sender).is_empty()
}

/// The parts of the reserve `sender` is in by who it is.
fn reserve_of_sender(sender: &UserInfo) -> Vec<Reserve> {
    let mut parts = Vec::new();
    let user = sender.user.as_str();
    let in_group = |g: &str| sender.groups.iter().any(|s| s == g);
    if in_group("system:masters") {
        parts.push(Reserve::Masters);
    }
    if is_component(user) {
        parts.push(Reserve::Components);
    }
    if is_node(user) || in_group("system:nodes") {
        parts.push(Reserve::Nodes);
    }
    parts
}

/// Whether user `user` is in the reserve by its name alone: a control-plane component, a
/// kube-system service account, a node.
pub fn user_in_reserve(user: &str) -> bool {
    is_component(user) || is_node(user)
}

fn is_component(user: &str) -> bool {
    COMPONENTS.contains(&user) || user.starts_with(KUBE_SYSTEM_SA)
}

fn is_node(user: &str) -> bool {
    user.starts_with("system:node:")
}

/// The parts of the reserve `facts` is in.
fn reserve_of(facts: &Facts<'_>) -> Vec<Reserve> {
    let mut parts = facts.sender.map(reserve_of_sender).unwrap_or_default();
    if facts.info.renews_lease() {
        parts.push(Reserve::Leases);
    }
    parts
}

/// Whether `rule` names every part of the reserve `facts` is in.
fn names(rule: &DispatchRule, reserve: &[Reserve], facts: &Facts<'_>) -> bool {
    let m = &rule.matches;
    let has = |list: &[String], value: &str| list.iter().any(|v| v == value);
    let user = facts.sender.map_or("", |s| s.user.as_str());
    reserve.iter().all(|part| match part {
        Reserve::Masters => has(&m.groups, "system:masters"),
        Reserve::Components => {
            has(&m.users, user)
                || user.strip_prefix(KUBE_SYSTEM_SA).is_some_and(|name| {
                    has(&m.service_accounts, &format!("kube-system:{name}"))
                        || has(&m.service_accounts, "kube-system:*")
                        || has(&m.groups, "system:serviceaccounts:kube-system")
                })
        }
        Reserve::Nodes => has(&m.groups, "system:nodes") || has(&m.users, user),
        Reserve::Leases => has(&m.resources, "leases"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::terminate::rules::{with_facts, Kubectl};
    use std::time::SystemTime;

    /// The run-time rule of `yaml` (rules) that takes `method path` from `user` in `groups`.
    fn taken(shed: &Shed, method: &str, path: &str, user: &str, groups: &[&str]) -> Option<String> {
        let sender = [&[user], groups].concat().join("/");
        let metrics = TerminateMetrics::new(&prometheus::Registry::new());
        with_facts(method, path, Some(&sender), Kubectl::default(), |facts| {
            ShedRules::default()
                .rule_for(shed, "default", &metrics, facts)
                .map(|r| r.name.trim_start_matches("shed:").to_string())
        })
    }

    #[test]
    fn a_clusters_object_rules_take_only_its_own_requests() {
        let shed = Shed::default();
        let mut rule: DispatchRule =
            serde_yaml_ng::from_str("name: bob\nmatch: {users: [bob]}\nreject: {}\n").unwrap();
        rule.expires = Some(SystemTime::now() + std::time::Duration::from_secs(60));
        shed.set_cluster("default", vec![rule.clone()], SystemTime::now(), |_| {});
        let pods = "/api/v1/namespaces/default/pods";
        assert_eq!(
            taken(&shed, "GET", pods, "bob", &["dev"]).as_deref(),
            Some("cluster:bob")
        );
        let other = Shed::default();
        other.set_cluster("other", vec![rule], SystemTime::now(), |_| {});
        assert_eq!(
            taken(&other, "GET", pods, "bob", &["dev"]),
            None,
            "another cluster's"
        );
    }

    fn shed(yaml: &str) -> Shed {
        let shed = Shed::default();
        let rules: Vec<DispatchRule> = serde_yaml_ng::from_str(yaml).unwrap();
        for rule in rules.into_iter().rev() {
            shed.put(rule, SystemTime::now(), |_| {}).unwrap();
        }
        shed
    }

    #[test]
    fn a_wide_rule_spares_the_reserve_and_a_rule_that_names_it_takes_it() {
        let wide =
            shed("- name: everyone\n  match: {groups: [system:authenticated]}\n  reject: {}\n");
        let pods = "/api/v1/namespaces/default/pods";
        let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler";
        let everyone = Some("everyone".to_string());
        assert_eq!(taken(&wide, "GET", pods, "alice", &["dev"]), everyone);
        assert_eq!(taken(&wide, "GET", pods, "root", &["system:masters"]), None);
        assert_eq!(taken(&wide, "PUT", lease, "bob", &["dev"]), None, "a lease");
        assert_eq!(
            taken(&wide, "GET", pods, "system:kube-controller-manager", &[]),
            None
        );
        let sa = "system:serviceaccount:kube-system:coredns";
        assert_eq!(
            taken(&wide, "GET", pods, sa, &["system:serviceaccounts"]),
            None
        );
        assert_eq!(
            taken(&wide, "GET", pods, "system:node:n1", &["system:nodes"]),
            None
        );
        let named = shed(concat!(
            "- name: masters\n  match: {groups: [system:masters]}\n  reject: {}\n",
            "- name: dns\n  match: {service_accounts: [\"kube-system:coredns\"]}\n  reject: {}\n",
            "- name: leases\n  match: {resources: [leases]}\n  reject: {}\n",
        ));
        assert_eq!(
            taken(&named, "GET", pods, "root", &["system:masters"]).as_deref(),
            Some("masters")
        );
        assert_eq!(
            taken(&named, "GET", pods, sa, &["system:serviceaccounts"]).as_deref(),
            Some("dns")
        );
        assert_eq!(
            taken(&named, "PUT", lease, "bob", &["dev"]).as_deref(),
            Some("leases")
        );
        assert_eq!(taken(&named, "GET", pods, "alice", &["dev"]), None);
        // Naming leases takes no node's heartbeat: a node's renewal is in two parts.
        let heartbeat = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1";
        assert_eq!(
            taken(
                &named,
                "PUT",
                heartbeat,
                "system:node:n1",
                &["system:nodes"]
            ),
            None
        );
        // A renewal is one named lease read or written: a tenant listing leases is its own.
        let bob = shed("- name: bob\n  match: {users: [bob]}\n  reject: {}\n");
        let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
        assert_eq!(
            taken(&bob, "GET", leases, "bob", &["dev"]).as_deref(),
            Some("bob")
        );
        assert_eq!(
            taken(&bob, "PUT", lease, "bob", &["dev"]),
            None,
            "its renewal"
        );
        assert_eq!(
            taken(&Shed::default(), "GET", pods, "alice", &["dev"]),
            None
        );
    }
}
