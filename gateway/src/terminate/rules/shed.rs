//! The rules put in force at run time (`state::Shed`), compiled for one cluster, and the
//! reserve they never take unless they name it: the control plane's own traffic, which an
//! operator shedding a runaway client must not cut by a rule written too wide.
//!
//! The reserve, and what naming it means:
//! - `system:masters` (break-glass administrators): the rule's `groups` names `system:masters`;
//! - the control plane's controllers (`system:kube-controller-manager`,
//!   `system:kube-scheduler`, service accounts of `kube-system`): its `users` names the user,
//!   or its `service_accounts` names `kube-system:NAME` or `kube-system:*`;
//! - nodes (`system:node:*`, group `system:nodes`: their status, their heartbeats): its
//!   `groups` names `system:nodes`, or its `users` names the node;
//! - leases (`coordination.k8s.io`: leader election, node heartbeats): its `resources` names
//!   `leases`.
//!
//! A request in the reserve is taken only by a rule that names one of the parts it is in;
//! otherwise the next matching rule (run-time, then the file's) decides.

use crate::state::Shed;
use crate::telemetry::TerminateMetrics;
use crate::terminate::rules::{Facts, Rule, Rules};
use arc_swap::ArcSwap;
use kubegate_config::DispatchRule;
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
    Controllers,
    Nodes,
    Leases,
}

const CONTROLLERS: &[&str] = &["system:kube-controller-manager", "system:kube-scheduler"];
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
        let mut compiled = self.0.load_full();
        if compiled.version != version {
            let specs = shed.rules();
            compiled = Arc::new(Compiled {
                version,
                rules: Rules::compile(cluster, &specs, metrics),
                specs,
            });
            self.0.store(compiled.clone());
        }
        let reserve = reserve_of(facts);
        let taken = compiled
            .rules
            .matching(facts)
            .find(|(i, _)| reserve.is_empty() || names(&compiled.specs[*i], &reserve, facts))
            .map(|(_, rule)| rule.clone());
        taken
    }
}

/// The parts of the reserve `facts` is in.
fn reserve_of(facts: &Facts<'_>) -> Vec<Reserve> {
    let mut parts = Vec::new();
    if let Some(sender) = facts.sender {
        let user = sender.user.as_str();
        let in_group = |g: &str| sender.groups.iter().any(|s| s == g);
        if in_group("system:masters") {
            parts.push(Reserve::Masters);
        }
        if CONTROLLERS.contains(&user) || user.starts_with(KUBE_SYSTEM_SA) {
            parts.push(Reserve::Controllers);
        }
        if user.starts_with("system:node:") || in_group("system:nodes") {
            parts.push(Reserve::Nodes);
        }
    }
    let target = &facts.info.target;
    if target.api_group == Some("coordination.k8s.io") && target.resource == Some("leases") {
        parts.push(Reserve::Leases);
    }
    parts
}

/// Whether `rule` names one of the parts of the reserve `facts` is in.
fn names(rule: &DispatchRule, reserve: &[Reserve], facts: &Facts<'_>) -> bool {
    let m = &rule.matches;
    let has = |list: &[String], value: &str| list.iter().any(|v| v == value);
    let user = facts.sender.map_or("", |s| s.user.as_str());
    reserve.iter().any(|part| match part {
        Reserve::Masters => has(&m.groups, "system:masters"),
        Reserve::Controllers => {
            has(&m.users, user)
                || user.strip_prefix(KUBE_SYSTEM_SA).is_some_and(|name| {
                    has(&m.service_accounts, &format!("kube-system:{name}"))
                        || has(&m.service_accounts, "kube-system:*")
                })
        }
        Reserve::Nodes => has(&m.groups, "system:nodes") || has(&m.users, user),
        Reserve::Leases => has(&m.resources, "leases"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::terminate::rules::Kubectl;
    use http::{Method, Uri};
    use kubegate_wire::classify::ReadTarget;
    use kubegate_wire::identity::UserInfo;
    use std::time::SystemTime;

    /// The run-time rule of `yaml` (rules) that takes `method path` from `user` in `groups`.
    fn taken(shed: &Shed, method: &str, path: &str, user: &str, groups: &[&str]) -> Option<String> {
        let uri: Uri = path.parse().unwrap();
        let method: Method = method.parse().unwrap();
        let sender = UserInfo {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            uid: None,
            extra: Default::default(),
        };
        let read = ReadTarget::of(&uri).unwrap();
        let facts = Facts {
            info: read.info(&method),
            path: read.path(),
            sender: Some(&sender),
            kubectl: Kubectl::default(),
        };
        let metrics = TerminateMetrics::new(&prometheus::Registry::new());
        ShedRules::default()
            .rule_for(shed, "default", &metrics, &facts)
            .map(|r| r.name.clone())
    }

    fn shed(yaml: &str) -> Shed {
        let shed = Shed::default();
        let rules: Vec<DispatchRule> = serde_yaml_ng::from_str(yaml).unwrap();
        for rule in rules.into_iter().rev() {
            shed.put(rule, SystemTime::now()).unwrap();
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
        assert_eq!(
            taken(&Shed::default(), "GET", pods, "alice", &["dev"]),
            None
        );
    }
}
