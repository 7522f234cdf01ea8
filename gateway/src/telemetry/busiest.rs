//! Who sends the most requests, over the last minute: per identity (a certificate's user, or
//! the address of a client with a token or no credentials), per user agent and per kubectl
//! command (its `Kubectl-Command`), for the status page. An operator paged for a busy apiserver
//! asks this first; Prometheus labels cannot carry it (one series per user is unbounded).
//!
//! Memory is bounded: a minute is six ten-second slots, each with at most [`NAMES`] names per
//! table, each name kept to its first [`NAME_BYTES`] bytes; a name that finds its slot's table
//! full is counted under [`OTHERS`]. (Kept whole, 1,500 requests with distinct 48 KiB
//! user agents grew kubegate by 92 MiB.)

use crate::telemetry::labels::Identity;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A slot's length.
const SLOT: Duration = Duration::from_secs(10);
/// Slots in the window (a minute).
const SLOTS: usize = 6;
/// Names a slot's table holds.
pub const NAMES: usize = 1000;
/// What names beyond [`NAMES`] are counted as.
pub const OTHERS: &str = "(others)";
/// The longest name kept (a user agent, a user); longer ones are cut at a character boundary.
pub const NAME_BYTES: usize = 256;

/// `bytes` (text from a client, perhaps not UTF-8), cut to at most [`NAME_BYTES`] bytes, not
/// inside a UTF-8 sequence.
pub fn bounded_bytes(bytes: &[u8]) -> &[u8] {
    if bytes.len() <= NAME_BYTES {
        return bytes;
    }
    let mut end = NAME_BYTES;
    while end > 0 && bytes[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    &bytes[..end]
}

/// `name`, cut to at most [`NAME_BYTES`] bytes at a character boundary.
pub fn bounded(name: &str) -> &str {
    if name.len() <= NAME_BYTES {
        return name;
    }
    let mut end = NAME_BYTES;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// Request counts by who sent them, over the last minute.
pub struct Busiest {
    epoch: Instant,
    slots: Mutex<[Slot; SLOTS]>,
}

#[derive(Default)]
struct Slot {
    /// Which ten seconds (since `epoch`) the counts are for.
    period: u64,
    /// By identity kind (`Identity as usize`), then name.
    identities: [Table; 3],
    user_agents: Table,
    kubectl_commands: Table,
}

#[derive(Default)]
struct Table(HashMap<Box<str>, u64>);

impl Table {
    fn count(&mut self, name: &str) {
        let name = bounded(name);
        // Found without allocating: the common case, a client seen before.
        if let Some(n) = self.0.get_mut(name) {
            *n += 1;
        } else if self.0.len() < NAMES {
            self.0.insert(name.into(), 1);
        } else {
            *self.0.entry(OTHERS.into()).or_default() += 1;
        }
    }
}

/// The busiest lists of the last minute, busiest first.
#[derive(Debug, Default)]
pub struct Top {
    /// By identity.
    pub identities: Vec<Sender>,
    /// By user agent.
    pub user_agents: Vec<Sender>,
    /// By kubectl command (requests without a `Kubectl-Command` are not counted).
    pub kubectl_commands: Vec<Sender>,
}

/// One row of a busiest list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    /// The user, address, user agent or kubectl command.
    pub name: String,
    /// For identities: how it authenticated.
    pub identity: Option<Identity>,
    /// Requests in the last minute.
    pub requests: u64,
}

impl Default for Busiest {
    fn default() -> Self {
        Busiest {
            epoch: Instant::now(),
            slots: Mutex::new(Default::default()),
        }
    }
}

impl Busiest {
    fn period(&self, now: Instant) -> u64 {
        (now.duration_since(self.epoch).as_secs() / SLOT.as_secs()) + 1
    }

    /// Counts one request from `name` (a certificate's user, or the client's address),
    /// authenticated as `identity`, with `user_agent` and, from kubectl, `kubectl_command`.
    pub fn record(
        &self,
        identity: Identity,
        name: &str,
        user_agent: &str,
        kubectl_command: Option<&str>,
    ) {
        self.record_at(Instant::now(), identity, name, user_agent, kubectl_command)
    }

    fn record_at(
        &self,
        now: Instant,
        identity: Identity,
        name: &str,
        user_agent: &str,
        kubectl_command: Option<&str>,
    ) {
        let period = self.period(now);
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut slots[(period % SLOTS as u64) as usize];
        if slot.period != period {
            *slot = Slot {
                period,
                ..Slot::default()
            };
        }
        slot.identities[identity as usize].count(name);
        slot.user_agents.count(user_agent);
        if let Some(command) = kubectl_command {
            slot.kubectl_commands.count(command);
        }
    }

    /// The `n` busiest of each list over the last minute.
    pub fn top(&self, n: usize) -> Top {
        self.top_at(Instant::now(), n)
    }

    fn top_at(&self, now: Instant, n: usize) -> Top {
        let current = self.period(now);
        let mut identities: HashMap<(usize, &str), u64> = HashMap::new();
        let mut agents: HashMap<&str, u64> = HashMap::new();
        let mut commands: HashMap<&str, u64> = HashMap::new();
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        for slot in slots
            .iter()
            .filter(|s| s.period != 0 && s.period + SLOTS as u64 > current)
        {
            for (kind, table) in slot.identities.iter().enumerate() {
                for (name, count) in &table.0 {
                    *identities.entry((kind, name)).or_default() += count;
                }
            }
            for (name, count) in &slot.user_agents.0 {
                *agents.entry(name).or_default() += count;
            }
            for (name, count) in &slot.kubectl_commands.0 {
                *commands.entry(name).or_default() += count;
            }
        }
        let identities = identities
            .into_iter()
            .map(|((kind, name), requests)| Sender {
                name: name.to_string(),
                identity: Identity::ALL.get(kind).copied(),
                requests,
            })
            .collect();
        let named = |counts: HashMap<&str, u64>| {
            let senders = counts
                .into_iter()
                .map(|(name, requests)| Sender {
                    name: name.to_string(),
                    identity: None,
                    requests,
                })
                .collect();
            busiest(senders, n)
        };
        Top {
            identities: busiest(identities, n),
            user_agents: named(agents),
            kubectl_commands: named(commands),
        }
    }
}

fn busiest(mut senders: Vec<Sender>, n: usize) -> Vec<Sender> {
    senders.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.name.cmp(&b.name)));
    senders.truncate(n);
    senders
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_come_first_and_old_slots_are_forgotten() {
        let b = Busiest::default();
        let now = b.epoch + Duration::from_secs(1);
        for _ in 0..3 {
            let get = Some("kubectl get");
            b.record_at(
                now,
                Identity::ClientCertificate,
                "alice",
                "kubectl/v1.35",
                get,
            );
        }
        b.record_at(
            now,
            Identity::BearerToken,
            "10.0.0.5",
            "controller/v1",
            None,
        );
        let delete = Some("kubectl delete");
        b.record_at(
            now,
            Identity::Anonymous,
            "10.0.0.5",
            "kubectl/v1.35",
            delete,
        );
        let Top {
            identities: ids,
            user_agents: agents,
            kubectl_commands: commands,
        } = b.top_at(now + Duration::from_secs(50), 10);
        assert_eq!(ids[0].name, "alice");
        assert_eq!(ids[0].requests, 3);
        assert_eq!(ids[0].identity, Some(Identity::ClientCertificate));
        assert_eq!(
            ids.len(),
            3,
            "one address, two ways of authenticating: {ids:?}"
        );
        assert_eq!(agents[0].name, "kubectl/v1.35");
        assert_eq!(agents[0].requests, 4);
        assert_eq!(commands.len(), 2, "{commands:?}");
        assert_eq!(
            (commands[0].name.as_str(), commands[0].requests),
            ("kubectl get", 3)
        );
        let later = b.top_at(now + Duration::from_secs(61), 10);
        assert!(
            later.identities.is_empty()
                && later.user_agents.is_empty()
                && later.kubectl_commands.is_empty(),
            "a minute later: {later:?}"
        );
    }

    #[test]
    fn long_names_are_cut_and_counted_as_one() {
        let b = Busiest::default();
        let now = b.epoch + Duration::from_secs(1);
        let base = "é".repeat(40_000);
        for i in 0..3 {
            b.record_at(
                now,
                Identity::Anonymous,
                "10.0.0.1",
                &format!("{base}{i}"),
                None,
            );
        }
        let agents = b.top_at(now, 10).user_agents;
        assert_eq!(agents.len(), 1, "cut to the same {NAME_BYTES} bytes");
        assert_eq!(agents[0].requests, 3);
        assert!(agents[0].name.len() <= NAME_BYTES);
        assert_eq!(bounded("kubectl/v1.35"), "kubectl/v1.35");
    }

    #[test]
    fn names_beyond_the_bound_are_counted_together() {
        let b = Busiest::default();
        let now = b.epoch + Duration::from_secs(1);
        for i in 0..NAMES + 5 {
            let name = format!("10.0.{}.{}", i / 256, i % 256);
            b.record_at(now, Identity::Anonymous, &name, "a", None);
        }
        let ids = b.top_at(now, 1).identities;
        assert_eq!(ids[0].name, OTHERS);
        assert_eq!(ids[0].requests, 5);
    }
}
