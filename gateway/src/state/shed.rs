//! Rules put in force at run time (`kubegate shed`, the admin endpoint's `POST /shed`): rules
//! that reject, in the `dispatch` vocabulary, each with an expiry, ahead of every cluster's
//! file rules (which stay the floor: a rule that rejects is stricter than any of them). Kept
//! here as the operator wrote them; terminate mode compiles them for each cluster when they
//! change (`terminate::shed`).

use arc_swap::ArcSwap;
use kubegate_config::DispatchRule;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The most rules in force at once: an incident's levers, not a second configuration.
pub const MAX_RULES: usize = 64;

/// The rules in force at run time.
#[derive(Default)]
pub struct Shed {
    rules: ArcSwap<Vec<DispatchRule>>,
    /// Raised at each change, so a compiled copy knows it is stale without comparing rules.
    version: AtomicU64,
    /// Held through a change and its writing down: two changes at once (two operators, two
    /// admin connections) neither lose one another nor write the file out of order.
    changing: Mutex<()>,
}

impl Shed {
    /// The rules, newest first (expired ones included until the next change drops them: they
    /// take nothing).
    pub fn rules(&self) -> Arc<Vec<DispatchRule>> {
        self.rules.load_full()
    }

    /// The rules that have not expired by `now`, newest first.
    pub fn in_force(&self, now: SystemTime) -> Vec<DispatchRule> {
        let mut rules = (*self.rules.load_full()).clone();
        rules.retain(|r| r.expires.is_none_or(|at| at > now));
        rules
    }

    /// Which change the rules are at.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Puts `rule` in force in place of the one of its name, else first; rules expired by
    /// `now` are dropped; `write` is given the rules before anyone can change them again. The
    /// rules now, or why not (too many).
    pub fn put(
        &self,
        rule: DispatchRule,
        now: SystemTime,
        write: impl FnOnce(&[DispatchRule]),
    ) -> Result<Arc<Vec<DispatchRule>>, String> {
        self.change(now, write, |rules| {
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
    }

    /// Removes the rule named `name` (`write` as for [`Shed::put`]); the rules now, or `None`
    /// if none was so named.
    pub fn remove(
        &self,
        name: &str,
        now: SystemTime,
        write: impl FnOnce(&[DispatchRule]),
    ) -> Option<Arc<Vec<DispatchRule>>> {
        self.change(now, write, |rules| {
            let before = rules.len();
            rules.retain(|r| r.name.as_deref() != Some(name));
            (rules.len() < before).then_some(()).ok_or(())
        })
        .ok()
    }

    /// Replaces every rule with `rules` (those a restarted kubegate read back), expired ones
    /// and those beyond [`MAX_RULES`] left out.
    pub fn restore(&self, rules: Vec<DispatchRule>, now: SystemTime) {
        let _ = self.change(
            now,
            |_| {},
            |all| {
                *all = rules.into_iter().take(MAX_RULES).collect();
                all.retain(|r| r.expires.is_none_or(|at| at > now));
                Ok::<(), ()>(())
            },
        );
    }

    fn change<E>(
        &self,
        now: SystemTime,
        write: impl FnOnce(&[DispatchRule]),
        edit: impl FnOnce(&mut Vec<DispatchRule>) -> Result<(), E>,
    ) -> Result<Arc<Vec<DispatchRule>>, E> {
        let _changing = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        let mut rules = self.in_force(now);
        edit(&mut rules)?;
        let rules = Arc::new(rules);
        self.rules.store(rules.clone());
        self.version.fetch_add(1, Ordering::AcqRel);
        write(&rules);
        Ok(rules)
    }
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
            .remove("a", now + Duration::from_secs(2), |r| written = names(r))
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
}
