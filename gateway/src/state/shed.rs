//! Rules put in force at run time: rules that reject, in the `dispatch` vocabulary, each with
//! an expiry, ahead of every cluster's file rules (which stay the floor: a rule that rejects is
//! stricter than any of them). Two sources: the gateway's own (`kubegate shed --admin`, the
//! admin endpoint's `POST /shed`), for every cluster it serves; and each cluster's object
//! (`terminate.shed_object`, which every kubegate in front of it watches), for that cluster
//! only. Kept here as written; terminate mode compiles them for each cluster when they change
//! (`terminate::cluster::shed`).

use arc_swap::ArcSwap;
use kubegate_config::DispatchRule;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The most rules in force at once from one source: an incident's levers, not a second
/// configuration.
pub const MAX_RULES: usize = 64;

/// Every rule in force at run time, by source.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InForce {
    /// The gateway's own, for every cluster, newest first.
    pub gateway: Vec<DispatchRule>,
    /// Each cluster's, read from its object, by cluster name.
    #[serde(default)]
    pub clusters: BTreeMap<String, Vec<DispatchRule>>,
}

/// A sender `terminate.auto_shed` holds back, as shown (`/debug/shed`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HeldBackShown {
    /// The priority level (its UID).
    pub level: String,
    /// The sender.
    pub sender: String,
    /// The share of its requests of the level turned away now.
    pub share: f64,
    /// Its share of the level's cost when it was found.
    pub cost_share: f64,
    /// When it began (RFC 3339).
    pub since: String,
    /// Its requests turned away since.
    pub rejected: u64,
}

/// The rules in force at run time.
#[derive(Default)]
pub struct Shed {
    /// Who `terminate.auto_shed` holds back, by cluster, as its last look left it.
    auto: ArcSwap<BTreeMap<String, Vec<HeldBackShown>>>,
    rules: ArcSwap<InForce>,
    /// Raised at each change, so a compiled copy knows it is stale without comparing rules.
    version: AtomicU64,
    /// Told of each change: a read waiting for its answer looks again whether a rule now
    /// turns it away (`terminate::request::forward::CutOff`).
    changes: tokio::sync::watch::Sender<()>,
    /// Held through a change and its writing down: two changes at once (two operators, two
    /// admin connections, a cluster's object) neither lose one another nor write the file out
    /// of order.
    changing: Mutex<()>,
}

impl Shed {
    /// Every rule, by source (expired ones included until the next change drops them: they
    /// take nothing).
    pub fn all(&self) -> Arc<InForce> {
        self.rules.load_full()
    }

    /// Every rule that has not expired by `now`.
    pub fn in_force(&self, now: SystemTime) -> InForce {
        let mut rules = (*self.rules.load_full()).clone();
        drop_expired(&mut rules, now);
        rules
    }

    /// Who `terminate.auto_shed` holds back, by cluster.
    pub fn auto(&self) -> Arc<BTreeMap<String, Vec<HeldBackShown>>> {
        self.auto.load_full()
    }

    /// `cluster`'s senders held back now (none: its entry goes).
    pub fn set_auto(&self, cluster: &str, held: Vec<HeldBackShown>) {
        self.auto.rcu(|all| {
            let mut all = (**all).clone();
            match held.is_empty() {
                true => all.remove(cluster),
                false => all.insert(cluster.to_string(), held.clone()),
            };
            all
        });
    }

    /// Which change the rules are at.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Told of every change from now on.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.changes.subscribe()
    }

    /// Puts `rule` in force among the gateway's own, in place of the one of its name, else
    /// first; rules expired by `now` are dropped; `write` is given the rules before anyone can
    /// change them again. The gateway's rules now, or why not (too many).
    pub fn put(
        &self,
        rule: DispatchRule,
        now: SystemTime,
        write: impl FnOnce(&InForce),
    ) -> Result<Vec<DispatchRule>, String> {
        self.change(now, write, |all| {
            let rules = &mut all.gateway;
            let full = rules.len() >= MAX_RULES;
            match rules.iter_mut().find(|r| r.name == rule.name) {
                Some(same) => *same = rule,
                None if full => {
                    return Err(format!(
                        "{MAX_RULES} rules are in force: remove one first (kubegate unshed NAME)"
                    ))
                }
                None => rules.insert(0, rule),
            }
            Ok(())
        })
        .map(|all| all.gateway.clone())
    }

    /// Removes the gateway's rule named `name` (`write` as for [`Shed::put`]); the gateway's
    /// rules now, or `None` if none was so named.
    pub fn remove(
        &self,
        name: &str,
        now: SystemTime,
        write: impl FnOnce(&InForce),
    ) -> Option<Vec<DispatchRule>> {
        self.change(now, write, |all| {
            let before = all.gateway.len();
            all.gateway.retain(|r| r.name.as_deref() != Some(name));
            (all.gateway.len() < before).then_some(()).ok_or(())
        })
        .ok()
        .map(|all| all.gateway.clone())
    }

    /// Makes `rules` (read from its object) cluster `cluster`'s, at most [`MAX_RULES`];
    /// `write` as for [`Shed::put`]. Whether anything changed.
    pub fn set_cluster(
        &self,
        cluster: &str,
        mut rules: Vec<DispatchRule>,
        now: SystemTime,
        write: impl FnOnce(&InForce),
    ) -> bool {
        rules.truncate(MAX_RULES);
        self.change(now, write, |all| {
            let had = all.clusters.get(cluster).map_or(&[][..], Vec::as_slice);
            if *had == *rules {
                return Err(());
            }
            if rules.is_empty() {
                all.clusters.remove(cluster);
            } else {
                all.clusters.insert(cluster.to_string(), rules);
            }
            Ok(())
        })
        .is_ok()
    }

    /// Replaces every rule with `rules` (those a restarted kubegate read back), expired ones
    /// and those beyond [`MAX_RULES`] of a source left out.
    pub fn restore(&self, mut rules: InForce, now: SystemTime) {
        rules.gateway.truncate(MAX_RULES);
        for r in rules.clusters.values_mut() {
            r.truncate(MAX_RULES);
        }
        let _ = self.change(
            now,
            |_| {},
            |all| {
                *all = rules;
                Ok::<(), ()>(())
            },
        );
    }

    fn change<E>(
        &self,
        now: SystemTime,
        write: impl FnOnce(&InForce),
        edit: impl FnOnce(&mut InForce) -> Result<(), E>,
    ) -> Result<Arc<InForce>, E> {
        let _changing = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        let before = self.rules.load_full();
        let mut rules = (*before).clone();
        drop_expired(&mut rules, now);
        edit(&mut rules)?;
        let rules = Arc::new(rules);
        self.rules.store(rules.clone());
        self.version.fetch_add(1, Ordering::AcqRel);
        // Only a rule put in force (new or changed) can turn a waiting read away.
        if added(&before, &rules) {
            self.changes.send_replace(());
        }
        write(&rules);
        Ok(rules)
    }
}

/// Whether `after` holds a rule `before` did not (of the same source).
fn added(before: &InForce, after: &InForce) -> bool {
    let new_in = |was: &[DispatchRule], now: &[DispatchRule]| now.iter().any(|r| !was.contains(r));
    new_in(&before.gateway, &after.gateway)
        || after.clusters.iter().any(|(cluster, now)| {
            new_in(
                before.clusters.get(cluster).map_or(&[][..], Vec::as_slice),
                now,
            )
        })
}

fn drop_expired(all: &mut InForce, now: SystemTime) {
    let live = |r: &DispatchRule| r.expires.is_none_or(|at| at > now);
    all.gateway.retain(live);
    for rules in all.clusters.values_mut() {
        rules.retain(live);
    }
    all.clusters.retain(|_, rules| !rules.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rule(name: &str, expires: SystemTime) -> DispatchRule {
        let mut r: DispatchRule =
            serde_yaml_ng::from_str("match: {users: [agent]}\nreject: {}").unwrap();
        r.name = Some(name.into());
        r.expires = Some(expires);
        r
    }

    fn names(rules: &[DispatchRule]) -> Vec<String> {
        rules.iter().filter_map(|r| r.name.clone()).collect()
    }

    #[test]
    fn rules_are_put_replaced_removed_and_expired_ones_dropped() {
        let shed = Shed::default();
        let now = SystemTime::now();
        let later = now + Duration::from_secs(600);
        shed.put(rule("a", later), now, |_| {}).unwrap();
        shed.put(rule("b", now + Duration::from_secs(1)), now, |_| {})
            .unwrap();
        let v = shed.version();
        let rules = shed
            .put(rule("a", later + Duration::from_secs(1)), now, |_| {})
            .unwrap();
        assert_eq!(
            names(&rules),
            ["b", "a"],
            "replaced in place, the newest first"
        );
        assert!(shed.version() > v);
        let mut written = Vec::new();
        let after = shed
            .remove("a", now + Duration::from_secs(2), |r| {
                written = names(&r.gateway)
            })
            .expect("a was in force");
        assert!(written.is_empty(), "written as it stands: {written:?}");
        assert!(after.is_empty(), "b expired meanwhile: {:?}", names(&after));
        assert!(shed
            .remove("a", now, |_| panic!("nothing changed"))
            .is_none());
        for i in 0..MAX_RULES {
            shed.put(rule(&format!("r{i}"), later), now, |_| {})
                .unwrap();
        }
        assert!(shed.put(rule("one-more", later), now, |_| {}).is_err());
        assert!(
            shed.put(rule("r3", later), now, |_| {}).is_ok(),
            "a replacement always fits"
        );
    }

    #[test]
    fn a_clusters_rules_are_its_own_and_an_unchanged_read_changes_nothing() {
        let shed = Shed::default();
        let now = SystemTime::now();
        let later = now + Duration::from_secs(600);
        let mut changes = shed.changes();
        assert!(shed.set_cluster("a", vec![rule("x", later)], now, |_| {}));
        assert!(changes.has_changed().unwrap(), "a waiting read is told");
        changes.mark_unchanged();
        let v = shed.version();
        assert!(
            !shed.set_cluster("a", vec![rule("x", later)], now, |_| panic!("no change")),
            "the same rules read again"
        );
        assert_eq!(shed.version(), v);
        assert!(!changes.has_changed().unwrap(), "nothing to look at again");
        shed.put(rule("mine", later), now, |_| {}).unwrap();
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert!(shed.set_cluster("a", Vec::new(), now, |_| {}));
        assert!(
            !changes.has_changed().unwrap(),
            "a removal turns no read away"
        );
        assert!(shed.set_cluster("a", vec![rule("x", later)], now, |_| {}));
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        let all = shed.all();
        assert_eq!(names(&all.gateway), ["mine"]);
        assert_eq!(names(&all.clusters["a"]), ["x"]);
        assert!(!all.clusters.contains_key("b"));
        assert!(shed.set_cluster("a", Vec::new(), now, |_| {}));
        assert!(shed.all().clusters.is_empty(), "no rules: no entry");
        assert_eq!(shed.all().gateway.len(), 1, "the gateway's own stay");
    }
}
