//! Shedding on its own (`terminate.auto_shed`, off by default): while a replica's flow control
//! rejects a priority level (`Flows`' `PriorityLevels::now`, read from its own 429s) or, with
//! `latency_bound`, answers the level slower than that, the level is troubled; the named
//! senders that met its rejections and cost it far more than their named peers over the last
//! 10–20 s (the cost table's `by_level`, fed only while this is on: a request, a millisecond of
//! a replica's time and 64 KiB each weigh one) are held back: a share of their requests of
//! that level is answered 429 with `Retry-After` at the gateway, before any replica reads it.
//! The share starts at a half and grows halfway to all (at most 98 %) each second the level
//! stays troubled; once it is not, it halves each second, and the sender is let go below 5 %,
//! or after `lasts` in any case (to be held back again only if it is still the runaway of a
//! level still troubled). Requests kubegate cannot place in a level (its first of a flow),
//! upgrades, senders named by their address and the reserve (`cluster::shed`) are never held
//! back. Each start and end is logged, the 429s counted, the senders held back shown in
//! `/debug/shed`.

use crate::state::{Gateway, HeldBackShown};
use crate::telemetry::costs::Cost;
use crate::terminate::cluster::shed::user_in_reserve;
use crate::terminate::upstream::upstreams::Upstreams;
use arc_swap::ArcSwap;
use kubegate_config::AutoShedConfig;
use kubegate_health::BackendState;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How far back a level's costs are read.
pub const WINDOW: Duration = Duration::from_secs(20);
/// The share a sender is held back by when it begins.
const FIRST_SHARE: f64 = 0.5;
/// The most of its requests ever turned away: a runaway still makes some progress, and shows
/// when it calms. A runaway answered at once asks again as soon as its `Retry-After` allows,
/// about twice as often as one the replicas serve slowly, so a tenth of it lets through as
/// much as it sent unshed: a fiftieth keeps it far below.
const MOST: f64 = 0.98;
/// Below this it is let go.
const LEAST: f64 = 0.05;

/// One sender held back in one level.
#[derive(Debug)]
pub struct HeldBack {
    /// The priority level (its UID, as the replicas' answers name it).
    pub level: Arc<str>,
    /// The sender, as the cost table keys it (`Costs::sender_key`).
    pub key: Box<str>,
    /// The sender, as shown: how it authenticated and its name.
    pub sender: String,
    /// The share of its requests of the level turned away now.
    pub share: f64,
    /// Its share of the level's cost when it was found.
    pub cost_share: f64,
    /// When it began.
    pub since: SystemTime,
    began: Instant,
    /// Its requests turned away since.
    rejected: Arc<AtomicU64>,
}

impl HeldBack {
    /// As `/debug/shed` shows it.
    pub fn shown(&self) -> HeldBackShown {
        HeldBackShown {
            level: self.level.to_string(),
            sender: self.sender.clone(),
            share: self.share,
            cost_share: self.cost_share,
            since: humantime::format_rfc3339_seconds(self.since).to_string(),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

/// A change made by one look.
#[derive(Debug, PartialEq)]
pub enum Change {
    /// `sender` is held back in `level`, costing it `cost_share` of the whole.
    Began {
        level: Arc<str>,
        sender: String,
        cost_share: f64,
    },
    /// `sender` is let go in `level`, after `rejected` 429s.
    Ended {
        level: Arc<str>,
        sender: String,
        rejected: u64,
    },
}

/// One cluster's senders held back.
#[derive(Default)]
pub struct AutoShed {
    held: ArcSwap<Vec<Arc<HeldBack>>>,
}

impl AutoShed {
    /// The senders held back now.
    pub fn held(&self) -> Arc<Vec<Arc<HeldBack>>> {
        self.held.load_full()
    }

    /// Whether a request of `level` from the sender keyed `key` is turned away now: the
    /// `Retry-After` to answer it with.
    pub fn turns_away(&self, level: &str, key: &str, retry_after: Duration) -> Option<Duration> {
        let held = self.held.load();
        let h = held.iter().find(|h| &*h.level == level && &*h.key == key)?;
        if fastrand::f64() >= h.share {
            return None;
        }
        h.rejected.fetch_add(1, Ordering::Relaxed);
        Some(retry_after)
    }

    /// Whether anyone is held back (most requests read no further).
    pub fn any(&self) -> bool {
        !self.held.load().is_empty()
    }

    /// One look: the levels `troubled` now, each level's senders and what they cost it
    /// (`by_level`): who is held back, by how much, from now on. What changed.
    pub fn look(
        &self,
        settings: &AutoShedConfig,
        troubled: &HashMap<Arc<str>, Trouble>,
        by_level: &HashMap<String, Vec<(String, Cost)>>,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        let mut next: Vec<Arc<HeldBack>> = Vec::new();
        for h in self.held.load().iter() {
            let share = match troubled.contains_key(&h.level) {
                true => (h.share + (1.0 - h.share) / 2.0).min(MOST),
                false => h.share / 2.0,
            };
            if share < LEAST || h.began.elapsed() >= settings.lasts || !settings.enabled {
                changes.push(Change::Ended {
                    level: h.level.clone(),
                    sender: h.sender.clone(),
                    rejected: h.rejected.load(Ordering::Relaxed),
                });
                continue;
            }
            next.push(Arc::new(HeldBack {
                level: h.level.clone(),
                key: h.key.clone(),
                sender: h.sender.clone(),
                share,
                cost_share: h.cost_share,
                since: h.since,
                began: h.began,
                rejected: h.rejected.clone(),
            }));
        }
        // A reload that lowered `max_senders`: the newest held are let go first.
        while next.len() > settings.max_senders {
            if let Some(h) = next.pop() {
                changes.push(Change::Ended {
                    level: h.level.clone(),
                    sender: h.sender.clone(),
                    rejected: h.rejected.load(Ordering::Relaxed),
                });
            }
        }
        if settings.enabled {
            let mut levels: Vec<(&Arc<str>, &Trouble)> = troubled.iter().collect();
            levels.sort_by(|a, b| a.0.cmp(b.0));
            for (level, trouble) in levels {
                let Some(costs) = by_level.get(&**level) else {
                    continue;
                };
                for (key, cost_share) in runaways(costs, settings, *trouble) {
                    if next.len() >= settings.max_senders {
                        break;
                    }
                    if next.iter().any(|h| h.level == *level && *h.key == *key) {
                        continue;
                    }
                    let sender = shown(key);
                    changes.push(Change::Began {
                        level: level.clone(),
                        sender: sender.clone(),
                        cost_share,
                    });
                    next.push(Arc::new(HeldBack {
                        level: level.clone(),
                        key: key.into(),
                        sender,
                        share: FIRST_SHARE,
                        cost_share,
                        since: SystemTime::now(),
                        began: Instant::now(),
                        rejected: Arc::default(),
                    }));
                }
            }
        }
        self.held.store(Arc::new(next));
        changes
    }
}

/// One level as `kubegate check --auto-shed` shows it: who `settings` would hold back were it
/// troubled now.
#[derive(Debug, serde::Serialize)]
pub struct LevelPreview {
    /// The priority level (its UID).
    pub level: String,
    /// Troubled now (a replica of some cluster rejects it, or answers it past the bound).
    pub troubled: bool,
    /// Senders that cost it something over the window.
    pub senders: usize,
    /// Those it would hold back, with their share of its cost.
    pub would_hold_back: Vec<(String, f64)>,
}

/// What `settings` would do with the cost table now, level by level (those of `gw`'s
/// clusters).
pub fn preview(
    gw: &Gateway,
    served: &[Arc<Upstreams>],
    settings: &AutoShedConfig,
) -> Vec<LevelPreview> {
    let mut troubled_now = HashMap::new();
    for upstreams in served {
        troubled_now.extend(troubled(upstreams, settings.latency_bound));
    }
    let mut levels: Vec<LevelPreview> = gw
        .costs()
        .by_level(WINDOW)
        .iter()
        .map(|(level, costs)| LevelPreview {
            troubled: troubled_now.contains_key(level.as_str()),
            senders: costs.len(),
            // As if its flow control rejected every one of them.
            would_hold_back: runaways(costs, settings, Trouble::Slow)
                .into_iter()
                .map(|(key, share)| (shown(key), share))
                .collect(),
            level: level.clone(),
        })
        .collect();
    levels.sort_by(|a, b| b.troubled.cmp(&a.troubled).then(a.level.cmp(&b.level)));
    levels
}

/// The levels a ready replica of `upstreams`' cluster rejects now, or (with `latency_bound`)
/// answers slower than that.
pub fn troubled(
    upstreams: &Upstreams,
    latency_bound: Option<Duration>,
) -> HashMap<Arc<str>, Trouble> {
    let mut levels = HashMap::new();
    for b in upstreams.pool().backends() {
        if b.state() != BackendState::Ready {
            continue;
        }
        let Some(l) = upstreams.flows.known(b.address) else {
            continue;
        };
        if let Some(bound) = latency_bound {
            for (level, took) in l.latencies() {
                if took > bound {
                    levels.entry(level).or_insert(Trouble::Slow);
                }
            }
        }
        for (level, _) in l.now() {
            levels.insert(level, Trouble::Rejected);
        }
    }
    levels
}

/// Why a level is troubled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// A replica's flow control rejects it: only a sender that met a rejection of it is held
    /// back (APF queues each flow apart; one that was never rejected is not what overflows).
    Rejected,
    /// A replica answers it past `latency_bound`.
    Slow,
}

/// Of one level's senders and their costs, the runaways, costliest first, with their share of
/// the level's whole: each a sender kubegate names (a certificate's or a reviewed token's user:
/// one named by its address is never held back, nor counted as a peer), that met a rejection
/// of the level if it is troubled by rejections, costing at least `min_share_percent` of the
/// named senders' whole and, when the level has other named senders, at least `factor` times
/// their median. The reserve's names (nodes, the control plane's components, kube-system's
/// service accounts) never are; the rest of the reserve is never charged by level.
pub fn runaways<'a>(
    costs: &'a [(String, Cost)],
    settings: &AutoShedConfig,
    trouble: Trouble,
) -> Vec<(&'a str, f64)> {
    let weight = |c: &Cost| c.weight().max(1);
    let named: Vec<&(String, Cost)> = costs
        .iter()
        .filter(|(key, _)| matches!(key.chars().next(), Some('c' | 't')) && !reserved(key))
        .collect();
    let total: u64 = named.iter().map(|(_, c)| weight(c)).sum();
    let mut found: Vec<(&str, u64)> = Vec::new();
    for (i, (key, cost)) in named.iter().enumerate() {
        let w = weight(cost);
        if trouble == Trouble::Rejected && cost.rejections == 0 {
            continue;
        }
        if w * 100 < total * u64::from(settings.min_share_percent) {
            continue;
        }
        let mut others: Vec<u64> = named
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (_, c))| weight(c))
            .collect();
        others.sort_unstable();
        let median = others.get(others.len() / 2).copied();
        if median.is_none_or(|m| w >= m.saturating_mul(u64::from(settings.factor))) {
            found.push((key, w));
        }
    }
    found.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    found
        .into_iter()
        .map(|(key, w)| (key, w as f64 / total.max(1) as f64))
        .collect()
}

/// Whether a sender key names a part of the reserve by its user alone.
fn reserved(key: &str) -> bool {
    user_in_reserve(key.get(1..).unwrap_or(""))
}

/// A sender key as an operator reads it (as it is: JSON escapes it, the log and the command
/// line escape it).
fn shown(key: &str) -> String {
    let name = key.get(1..).unwrap_or("");
    match key.chars().next() {
        Some('t') => format!("{name} (token)"),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(ms: u64, rejections: u64) -> Cost {
        Cost {
            requests: 1,
            apiserver_micros: ms * 1000,
            rejections,
            ..Default::default()
        }
    }

    fn level(senders: &[(&str, u64)]) -> Vec<(String, Cost)> {
        senders
            .iter()
            .map(|(k, ms)| (k.to_string(), cost(*ms, 1)))
            .collect()
    }

    fn on() -> AutoShedConfig {
        AutoShedConfig {
            enabled: true,
            ..Default::default()
        }
    }

    #[test]
    fn a_runaway_is_named_rejected_and_costs_far_more_than_its_named_peers() {
        let s = on();
        let r = Trouble::Rejected;
        let costs = level(&[
            ("cagent", 9000),
            ("calice", 100),
            ("cbob", 120),
            ("ccarol", 90),
        ]);
        let found = runaways(&costs, &s, r);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "cagent");
        assert!(found[0].1 > 0.9, "{found:?}");
        // Peers alike: none.
        assert!(runaways(&level(&[("ca", 100), ("cb", 120), ("cc", 90)]), &s, r).is_empty());
        // Alone in its level, it is the whole.
        assert_eq!(runaways(&level(&[("ca", 100)]), &s, r)[0].0, "ca");
        // Nodes and the control plane's components are never found; nor a sender named by
        // its address, which is not a peer either (a flood of them cannot lower the median).
        let nodes = level(&[("csystem:node:n1", 9000), ("ca", 10), ("cb", 10)]);
        assert!(runaways(&nodes, &s, r).is_empty());
        let mut flood = level(&[("ca", 100), ("cb", 100)]);
        flood.extend((0..50).map(|i| (format!("a10.0.0.{i}"), cost(1, 1))));
        flood.push(("T10.0.0.99".to_string(), cost(9000, 1)));
        assert!(
            runaways(&flood, &s, r).is_empty(),
            "{:?}",
            runaways(&flood, &s, r)
        );
        // Troubled by rejections: one never rejected is not held back.
        let mut unrejected = level(&[("calice", 100), ("cbob", 100)]);
        unrejected.push(("cagent".to_string(), cost(9000, 0)));
        assert!(runaways(&unrejected, &s, r).is_empty());
        assert_eq!(runaways(&unrejected, &s, Trouble::Slow)[0].0, "cagent");
    }

    #[test]
    fn a_sender_is_held_back_more_while_the_level_is_troubled_and_let_go_after() {
        let auto = AutoShed::default();
        let s = on();
        let lvl: Arc<str> = "workload-low".into();
        let troubled: HashMap<Arc<str>, Trouble> = [(lvl.clone(), Trouble::Rejected)].into();
        let by_level: HashMap<String, Vec<(String, Cost)>> = [(
            "workload-low".to_string(),
            level(&[("tagent", 9000), ("ta", 10), ("tb", 10)]),
        )]
        .into();
        let changes = auto.look(&s, &troubled, &by_level);
        assert!(
            matches!(&changes[..], [Change::Began { sender, .. }] if sender == "agent (token)")
        );
        assert_eq!(auto.held()[0].share, 0.5);
        assert!(
            auto.look(&s, &troubled, &by_level).is_empty(),
            "held already"
        );
        assert_eq!(auto.held()[0].share, 0.75);
        let turned = (0..1000)
            .filter(|_| {
                auto.turns_away("workload-low", "tagent", Duration::from_secs(5))
                    .is_some()
            })
            .count();
        assert!((600..900).contains(&turned), "about 3 in 4: {turned}");
        assert!(auto
            .turns_away("workload-low", "ta", Duration::from_secs(5))
            .is_none());
        assert!(auto
            .turns_away("other-level", "tagent", Duration::from_secs(5))
            .is_none());
        for _ in 0..10 {
            auto.look(&s, &troubled, &by_level);
        }
        assert_eq!(auto.held()[0].share, MOST);
        // Calm: halved each look, let go below 5 %.
        let calm = HashMap::new();
        let mut ended = None;
        for i in 0..10 {
            if let [Change::Ended { rejected, .. }] = &auto.look(&s, &calm, &by_level)[..] {
                ended = Some((i, *rejected));
                break;
            }
        }
        let (looks, rejected) = ended.expect("let go");
        assert_eq!(looks, 4, "0.98 halved to below 0.05");
        assert_eq!(rejected, turned as u64);
        assert!(!auto.any());
        // Off: nobody is held back, those held are let go.
        auto.look(&s, &troubled, &by_level);
        let off = AutoShedConfig::default();
        assert!(matches!(
            &auto.look(&off, &troubled, &by_level)[..],
            [Change::Ended { .. }]
        ));
        assert!(!auto.any());
    }
}
