//! Who costs the apiservers what (terminate mode): per sender (a certificate's user, a
//! reviewed token's user, else the client's address) and per user agent — requests, LISTs,
//! the time their requests held a replica, the bytes the replicas sent them, the upstream
//! watches they hold open now, and the rejections of the replicas' flow control they met —
//! over the last minute and the last ten; and requests per kubectl command over the last
//! minute. An operator paged for a busy control plane asks this first; Prometheus labels
//! cannot carry it (one series per user is unbounded), so the status page, `/debug/senders`
//! and `kubegate status --top` show the table and the metrics the top few.
//!
//! How each figure is measured:
//! - requests and LISTs: counted once a request has passed kubegate's own checks and rules
//!   (identity, body, `dispatch` limits) and goes on toward the replicas — answered by one,
//!   joined to another's answer, or answered 503 when none could take it; requests kubegate
//!   refused before that are not counted;
//! - apiserver time: from the moment an attempt took its replica (`exchange::in_flight`) to
//!   the end of the replica's answer, for requests that are not long-running; a watch's time
//!   is not counted (APF does not charge it either), its open count is;
//! - bytes: the response body bytes a replica sent for the sender's own upstream requests (a
//!   joined read's or a fed watch's bytes are the request's that went upstream);
//! - open watches: upstream watches (and other long-running requests) of the sender open on a
//!   replica now; watches fed from another's upstream watch hold none;
//! - rejections: the replicas' 429s that `signals::said` reads as priority and fairness's (or
//!   max-in-flight's) rejection.
//!
//! Memory is bounded: a minute is six ten-second slots, ten minutes ten one-minute slots;
//! each slot holds at most [`NAMES`] senders, [`NAMES`] user agents and (minute slots)
//! [`NAMES`] kubectl commands and [`NAMES`] (priority level, sender) pairs (fed only while
//! `terminate.auto_shed` is on), each name cut to [`NAME_BYTES`] bytes. A slot that is full
//! makes room by folding the lightest of a sample of 16 of its names (a request, a
//! millisecond of a replica's time and 64 KiB each weigh one; each sample starts elsewhere in
//! the table) into [`OTHERS`], so a flood of distinct names cannot keep a costly sender from
//! being named. At most 44,000 names (16 slots; ten-minute slots hold no commands or pairs)
//! of at most ~430 bytes with their share of the hash tables: about 19 MiB, reached only under
//! such a flood. Open-watch counts are as many as open upstream watches and upgrades.
//!
//! Recording takes one short lock per request counted, per attempt's hold ended, per
//! rejection and per watch opened or closed; a request's sender and user agent are hashed
//! once, when its [`Payer`] is made, and found by that hash in each table they are charged
//! to. A report holds the lock while it sums the window's slots (at the bound, 60,000 rows
//! for ten minutes: a few milliseconds); it is built at each scrape (the minute's only), each
//! status page load and each `/debug/senders`.

use crate::telemetry::labels::Identity;
use hashbrown::HashTable;
use serde::Serialize;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Names a slot holds, per table.
pub const NAMES: usize = 1000;
/// What names folded out of a full slot are shown as.
pub const OTHERS: &str = "(others)";
/// The row they are counted in: a key no client can send (HTTP header values hold no NUL,
/// and sender keys begin with their kind), so nobody's own name merges with it.
const FOLDED: &str = "\0(others)";
/// The longest name kept (a user agent, a user); longer ones are cut at a character boundary.
pub const NAME_BYTES: usize = 256;
/// Names a full slot compares to find the one it folds into [`OTHERS`].
const SAMPLE: usize = 16;
/// How far each fold's sample starts from the last one's (a prime, so the starts cover the
/// table).
const SAMPLE_STRIDE: usize = 389;

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

/// The window a report covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Window {
    /// The last minute, in ten-second slots.
    #[serde(rename = "1m")]
    Minute,
    /// The last ten minutes, in one-minute slots.
    #[serde(rename = "10m")]
    TenMinutes,
}

impl Window {
    /// `1m` or `10m`.
    pub fn parse(text: &str) -> Option<Window> {
        match text {
            "1m" => Some(Window::Minute),
            "10m" => Some(Window::TenMinutes),
            _ => None,
        }
    }

    /// How it is written in a query.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Minute => "1m",
            Window::TenMinutes => "10m",
        }
    }

    /// Its slots' length and count.
    fn slots(self) -> (Duration, usize) {
        match self {
            Window::Minute => (Duration::from_secs(10), 6),
            Window::TenMinutes => (Duration::from_secs(60), 10),
        }
    }
}

/// What a report's rows are ordered by, largest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SortBy {
    /// Apiserver time.
    Time,
    /// Requests.
    Requests,
    /// LISTs.
    Lists,
    /// Bytes the replicas sent.
    Bytes,
    /// Upstream watches open now.
    Watches,
    /// Flow-control rejections met.
    Rejections,
}

impl SortBy {
    /// Every order, as the status page offers them.
    pub const ALL: [SortBy; 6] = [
        SortBy::Time,
        SortBy::Requests,
        SortBy::Lists,
        SortBy::Bytes,
        SortBy::Watches,
        SortBy::Rejections,
    ];

    /// How it is written in a query (`?sort=`).
    pub fn as_str(self) -> &'static str {
        match self {
            SortBy::Time => "time",
            SortBy::Requests => "requests",
            SortBy::Lists => "lists",
            SortBy::Bytes => "bytes",
            SortBy::Watches => "watches",
            SortBy::Rejections => "rejections",
        }
    }

    /// The order written `text`.
    pub fn parse(text: &str) -> Option<SortBy> {
        SortBy::ALL.into_iter().find(|s| s.as_str() == text)
    }

    fn key(self, cost: &Cost, open_watches: u64) -> u64 {
        match self {
            SortBy::Time => cost.apiserver_micros,
            SortBy::Requests => cost.requests,
            SortBy::Lists => cost.lists,
            SortBy::Bytes => cost.bytes,
            SortBy::Watches => open_watches,
            SortBy::Rejections => cost.rejections,
        }
    }
}

/// What one name cost over a slot or a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    /// Requests sent upstream or joined to another's.
    pub requests: u64,
    /// Of which LISTs.
    pub lists: u64,
    /// Microseconds its requests (not long-running) held a replica.
    pub apiserver_micros: u64,
    /// Response body bytes the replicas sent for its requests.
    pub bytes: u64,
    /// Flow-control rejections its requests met.
    pub rejections: u64,
}

impl Cost {
    /// What a fold compares: a request, a millisecond of a replica's time and 64 KiB it sent
    /// each weigh one, so a sender of few costly LISTs weighs as much as one of many cheap
    /// GETs.
    pub fn weight(&self) -> u64 {
        self.requests + self.apiserver_micros / 1000 + self.bytes / (64 * 1024)
    }

    fn add(&mut self, other: &Cost) {
        self.requests += other.requests;
        self.lists += other.lists;
        self.apiserver_micros += other.apiserver_micros;
        self.bytes += other.bytes;
        self.rejections += other.rejections;
    }
}

/// One row of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// The user, address, user agent or kubectl command ([`OTHERS`] for names folded away).
    pub name: String,
    /// For senders: how it authenticated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<&'static str>,
    /// What it cost over the window.
    #[serde(flatten)]
    pub cost: Cost,
    /// Its upstream watches open now.
    pub open_watches: u64,
}

/// The table over one window, each list ordered by one figure.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The window.
    pub window: Window,
    /// The order.
    pub sort: SortBy,
    /// By sender.
    pub senders: Vec<Row>,
    /// By user agent.
    pub user_agents: Vec<Row>,
    /// By kubectl command (requests only; over the last minute whatever the window).
    pub kubectl_commands: Vec<Row>,
}

/// The cost table.
pub struct Costs {
    epoch: Instant,
    /// What every table hashes its names with (keyed at random, so that no client can choose
    /// names that collide).
    hasher: RandomState,
    tables: Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    minute: [Slot; 6],
    ten: [Slot; 10],
    /// Upstream watches open now, by sender key and by user agent.
    open_by_sender: HashMap<Box<str>, u64>,
    open_by_agent: HashMap<Box<str>, u64>,
}

#[derive(Default)]
struct Slot {
    /// Which slot (since `epoch`, counted from 1) the figures are for; 0: never used.
    period: u64,
    /// Folds made in it, where each fold's sample starts.
    folds: usize,
    /// By sender key (`Payer::sender`).
    senders: Table,
    user_agents: Table,
    kubectl_commands: Table,
    /// By priority level and sender (`LEVEL\0SENDER KEY`), minute slots only: who costs each
    /// level what (`terminate.auto_shed`).
    by_level: Table,
}

/// A name as the tables key it, and its hash under [`Costs`]'s hasher: a request's sender and
/// user agent are hashed once, not at each of the rows they are charged to.
struct Key {
    name: Box<str>,
    hash: u64,
}

impl Key {
    fn new(name: Box<str>, hasher: &RandomState) -> Key {
        Key {
            hash: hasher.hash_one(&*name),
            name,
        }
    }
}

/// Names and their costs, found by their hash ([`Key`]).
#[derive(Default)]
struct Table(HashTable<(Box<str>, Cost)>);

impl Table {
    /// `name`'s row (`hash` its hash under `hasher`), made room for if need be (`turn`: the
    /// slot's count of folds). A name seen before in this slot is found without allocating.
    fn row(&mut self, name: &str, hash: u64, hasher: &RandomState, turn: &mut usize) -> &mut Cost {
        let named = |(n, _): &(Box<str>, Cost)| **n == *name;
        if self.0.len() >= NAMES && self.0.find(hash, named).is_none() {
            *turn = turn.wrapping_add(1);
            self.fold_one(*turn, hasher);
        }
        Table::entry(&mut self.0, name, hash, hasher)
    }

    /// `name`'s row, made if there is none.
    fn entry<'a>(
        table: &'a mut HashTable<(Box<str>, Cost)>,
        name: &str,
        hash: u64,
        hasher: &RandomState,
    ) -> &'a mut Cost {
        let named = |(n, _): &(Box<str>, Cost)| **n == *name;
        let rehash = |(n, _): &(Box<str>, Cost)| hasher.hash_one(&**n);
        &mut table
            .entry(hash, named, rehash)
            .or_insert_with(|| (name.into(), Cost::default()))
            .into_mut()
            .1
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &Cost)> {
        self.0.iter().map(|(name, cost)| (&**name, cost))
    }

    /// Folds the lightest name of a sample into [`OTHERS`]: a name that costs much is rarely
    /// the lightest of any sample, so it stays named however many others arrive. The sample
    /// starts `turn` names in (the table's order is its hash order), so successive folds look
    /// at different names.
    fn fold_one(&mut self, turn: usize, hasher: &RandomState) {
        let skip = turn.wrapping_mul(SAMPLE_STRIDE) % self.0.len().max(1);
        let least = self
            .0
            .iter()
            .cycle()
            .skip(skip)
            .take(SAMPLE.min(self.0.len()))
            .filter(|(name, _)| &**name != FOLDED)
            .min_by_key(|(_, cost)| cost.weight())
            .map(|(name, _)| name.clone());
        let Some(name) = least else { return };
        let Ok(row) = self
            .0
            .find_entry(hasher.hash_one(&*name), |(n, _)| *n == name)
        else {
            return;
        };
        let ((_, cost), _) = row.remove();
        Table::entry(&mut self.0, FOLDED, hasher.hash_one(FOLDED), hasher).add(&cost);
    }
}

/// Whom a request's cost is charged to: made once per request (`request::served`), carried
/// by its upstream request and its replica registration.
pub struct Payer {
    costs: Arc<Costs>,
    /// How it authenticated, then its name: one key, so a certificate's user named like an
    /// address is never counted as that address.
    sender: Key,
    user_agent: Key,
    /// Charged by priority level too (`terminate.auto_shed` is on, and the sender is one it may
    /// hold back: named, outside the reserve).
    by_level: bool,
}

impl std::fmt::Debug for Payer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payer")
            .field("sender", &self.sender.name)
            .field("user_agent", &self.user_agent.name)
            .finish()
    }
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            epoch: Instant::now(),
            hasher: RandomState::new(),
            tables: Mutex::new(Tables::default()),
        }
    }
}

/// How a sender is named: by what it authenticated as, or by its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderKind {
    /// A verified client certificate's user.
    Certificate,
    /// A bearer token's user, as a TokenReview named it.
    Token,
    /// A bearer token kubegate has no name for (not reviewed, or no review possible): named
    /// by the client's address, never mixed with a reviewed user of the same text.
    TokenByAddress,
    /// No credentials: named by the client's address.
    Anonymous,
}

impl SenderKind {
    const ALL: [SenderKind; 4] = [
        SenderKind::Certificate,
        SenderKind::Token,
        SenderKind::TokenByAddress,
        SenderKind::Anonymous,
    ];

    /// The sender key's first character.
    fn mark(self) -> char {
        match self {
            SenderKind::Certificate => 'c',
            SenderKind::Token => 't',
            SenderKind::TokenByAddress => 'T',
            SenderKind::Anonymous => 'a',
        }
    }

    /// How reports name it.
    pub fn as_str(self) -> &'static str {
        match self {
            SenderKind::Certificate => Identity::ClientCertificate.as_str(),
            SenderKind::Token => Identity::BearerToken.as_str(),
            SenderKind::TokenByAddress => "bearer_token_unnamed",
            SenderKind::Anonymous => Identity::Anonymous.as_str(),
        }
    }
}

/// The kind and the name a sender key holds.
fn split_key(key: &str) -> (Option<SenderKind>, &str) {
    let first = key.chars().next();
    match SenderKind::ALL
        .into_iter()
        .find(|k| Some(k.mark()) == first)
    {
        Some(kind) => (Some(kind), &key[1..]),
        None => (None, key),
    }
}

impl Costs {
    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whom to charge for a request from `name` (a user, or the client's address), named as
    /// `kind`, with `user_agent`.
    pub fn payer(self: &Arc<Self>, kind: SenderKind, name: &str, user_agent: &str) -> Payer {
        Payer {
            costs: self.clone(),
            sender: Key::new(Costs::sender_key(kind, name).into(), &self.hasher),
            user_agent: Key::new(bounded(user_agent).into(), &self.hasher),
            by_level: false,
        }
    }

    /// The key a sender named `name`, as `kind`, is counted under.
    pub fn sender_key(kind: SenderKind, name: &str) -> String {
        let mut sender = String::with_capacity(1 + name.len().min(NAME_BYTES));
        sender.push(kind.mark());
        sender.push_str(bounded(name));
        sender
    }

    /// Over the minute slots begun within `within`, each priority level's senders (by
    /// [`Costs::sender_key`]; the folded ones as one) and what each cost it.
    pub fn by_level(&self, within: Duration) -> HashMap<String, Vec<(String, Cost)>> {
        let since = Instant::now().duration_since(self.epoch);
        let tables = self.tables();
        let (length, _) = Window::Minute.slots();
        let newest = period(since, length);
        let back = within.as_secs().div_ceil(length.as_secs().max(1)).max(1);
        let slots: Vec<&Slot> = tables
            .minute
            .iter()
            .filter(|s| s.period != 0 && s.period + back > newest)
            .collect();
        let mut levels: HashMap<String, Vec<(String, Cost)>> = HashMap::new();
        for (key, cost) in sum(&slots, |s| &s.by_level) {
            let (level, sender) = match key.split_once('\0') {
                // The folded row: its level is unknown (`FOLDED` starts with NUL).
                Some(("", _)) | None => continue,
                Some(split) => split,
            };
            levels
                .entry(level.to_string())
                .or_default()
                .push((sender.to_string(), cost));
        }
        levels
    }

    /// Applies `charge` to `payer`'s rows (and `command`'s) in the current slot of each window;
    /// with `level`, a request of that level ended: in the minute's slot, its row under the
    /// level gets `charge` and the request.
    fn charge(
        &self,
        now: Instant,
        payer: &Payer,
        command: Option<&str>,
        level: Option<&str>,
        charge: impl Fn(&mut Cost),
    ) {
        let since = now.duration_since(self.epoch);
        let hasher = &self.hasher;
        // Hashed before the lock is taken; only a kubectl request or a level's has more.
        let command = command.map(|c| {
            let name = bounded(c);
            (name, hasher.hash_one(name))
        });
        let level = level.map(|l| {
            let key = format!("{}\0{}", bounded(l), payer.sender.name);
            let hash = hasher.hash_one(key.as_str());
            (key, hash)
        });
        let mut tables = self.tables();
        let Tables { minute, ten, .. } = &mut *tables;
        for (window, slots) in [
            (Window::Minute, &mut minute[..]),
            (Window::TenMinutes, &mut ten[..]),
        ] {
            let slot = current(window, slots, since);
            let turn = &mut slot.folds;
            let (sender, agent) = (&payer.sender, &payer.user_agent);
            charge(slot.senders.row(&sender.name, sender.hash, hasher, turn));
            charge(slot.user_agents.row(&agent.name, agent.hash, hasher, turn));
            if let (Window::Minute, Some((name, hash))) = (window, command) {
                charge(slot.kubectl_commands.row(name, hash, hasher, turn));
            }
            if let (Window::Minute, Some((key, hash))) = (window, &level) {
                let row = slot.by_level.row(key, *hash, hasher, turn);
                charge(row);
                row.requests += 1;
            }
        }
    }

    /// The table over `window`, the `n` largest of each list by `sort`.
    pub fn report(&self, window: Window, sort: SortBy, n: usize) -> Report {
        self.report_at(Instant::now(), window, sort, n)
    }

    fn report_at(&self, now: Instant, window: Window, sort: SortBy, n: usize) -> Report {
        let since = now.duration_since(self.epoch);
        let tables = self.tables();
        let slots = tables.live(window, since);
        let rows = |sums: HashMap<&str, Cost>,
                    open: &HashMap<Box<str>, u64>,
                    keyed: bool,
                    sort: SortBy| {
            let mut names: HashMap<&str, (Cost, u64)> =
                sums.into_iter().map(|(k, c)| (k, (c, 0))).collect();
            for (name, watches) in open {
                names.entry(name).or_default().1 = *watches;
            }
            // Ordered before any name is copied: only the rows shown are.
            let mut rows: Vec<(&str, Cost, u64)> =
                names.into_iter().map(|(k, (c, w))| (k, c, w)).collect();
            let key = |(_, cost, watches): &(&str, Cost, u64)| sort.key(cost, *watches);
            rows.sort_unstable_by(|a, b| {
                key(b)
                    .cmp(&key(a))
                    .then(b.1.requests.cmp(&a.1.requests))
                    .then(a.0.cmp(b.0))
            });
            rows.truncate(n);
            rows.into_iter()
                .map(|(key, cost, open_watches)| {
                    let (kind, name) = match (key == FOLDED, keyed) {
                        (true, _) => (None, OTHERS),
                        (false, true) => split_key(key),
                        (false, false) => (None, key),
                    };
                    Row {
                        name: name.to_string(),
                        identity: kind.map(SenderKind::as_str),
                        cost,
                        open_watches,
                    }
                })
                .collect::<Vec<Row>>()
        };
        // Only minute slots count commands: over the last minute whatever the window.
        let commands = sum(&tables.live(Window::Minute, since), |s| &s.kubectl_commands);
        let commands = rows(commands, &HashMap::new(), false, SortBy::Requests);
        Report {
            window,
            sort,
            senders: rows(
                sum(&slots, |s| &s.senders),
                &tables.open_by_sender,
                true,
                sort,
            ),
            user_agents: rows(
                sum(&slots, |s| &s.user_agents),
                &tables.open_by_agent,
                false,
                sort,
            ),
            kubectl_commands: commands,
        }
    }

    /// Names held now, over every slot (what the bound counts).
    pub fn names_held(&self) -> usize {
        let tables = self.tables();
        let slot = |s: &Slot| {
            s.senders.len() + s.user_agents.len() + s.kubectl_commands.len() + s.by_level.len()
        };
        tables.minute.iter().map(slot).sum::<usize>() + tables.ten.iter().map(slot).sum::<usize>()
    }
}

impl Tables {
    /// The slots of `window` that are within it at `since`.
    fn live(&self, window: Window, since: Duration) -> Vec<&Slot> {
        let (length, count) = window.slots();
        let newest = period(since, length);
        let slots: &[Slot] = match window {
            Window::Minute => &self.minute,
            Window::TenMinutes => &self.ten,
        };
        slots
            .iter()
            .filter(|s| s.period != 0 && s.period + count as u64 > newest)
            .collect()
    }
}

/// Each name's cost summed over `slots`' `table`.
fn sum<'a>(slots: &[&'a Slot], table: fn(&Slot) -> &Table) -> HashMap<&'a str, Cost> {
    let mut sums: HashMap<&str, Cost> = HashMap::new();
    for slot in slots {
        for (name, cost) in table(slot).iter() {
            sums.entry(name).or_default().add(cost);
        }
    }
    sums
}

/// The slot of `slots` (each `window`'s length) for `since`, emptied if it held an older one.
fn current(window: Window, slots: &mut [Slot], since: Duration) -> &mut Slot {
    let (length, count) = window.slots();
    let period = period(since, length);
    let slot = &mut slots[(period % count as u64) as usize];
    if slot.period != period {
        *slot = Slot {
            period,
            ..Slot::default()
        };
    }
    slot
}

/// Which slot of `length` `since` falls in, counted from 1 (0 marks a slot never used).
fn period(since: Duration, length: Duration) -> u64 {
    since.as_secs() / length.as_secs() + 1
}

impl Payer {
    /// Charged by priority level too: a sender `terminate.auto_shed` may hold back.
    pub fn by_level(mut self) -> Payer {
        self.by_level = true;
        self
    }

    /// A request was sent upstream or joined to another's (a LIST if `list`), from kubectl's
    /// `command` if it says one.
    pub fn sent(&self, list: bool, command: Option<&str>) {
        self.sent_at(Instant::now(), list, command)
    }

    fn sent_at(&self, now: Instant, list: bool, command: Option<&str>) {
        self.costs.charge(now, self, command, None, |c| {
            c.requests += 1;
            c.lists += u64::from(list);
        });
    }

    /// A request's hold on a replica ended: `held` for as long (none counted for a
    /// long-running one), the replica having sent `bytes`; of priority `level` when known
    /// (charged to the level too, as one request).
    pub fn held(&self, level: Option<&str>, held: Option<Duration>, bytes: u64) {
        self.held_at(Instant::now(), level, held, bytes)
    }

    fn held_at(&self, now: Instant, level: Option<&str>, held: Option<Duration>, bytes: u64) {
        let level = level.filter(|_| self.by_level);
        let micros = held.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        self.costs.charge(now, self, None, level, |c| {
            c.apiserver_micros = c.apiserver_micros.saturating_add(micros);
            c.bytes = c.bytes.saturating_add(bytes);
        });
    }

    /// A replica's flow control rejected one of its requests, of priority `level` when known.
    pub fn rejected(&self, level: Option<&str>) {
        let level = level.filter(|_| self.by_level);
        self.costs
            .charge(Instant::now(), self, None, level, |c| c.rejections += 1);
    }

    /// An upstream watch of it opened on a replica.
    pub fn watch_opened(&self) {
        let mut tables = self.costs.tables();
        *tables
            .open_by_sender
            .entry(self.sender.name.clone())
            .or_default() += 1;
        *tables
            .open_by_agent
            .entry(self.user_agent.name.clone())
            .or_default() += 1;
    }

    /// One of its upstream watches ended.
    pub fn watch_closed(&self) {
        let mut tables = self.costs.tables();
        let Tables {
            open_by_sender,
            open_by_agent,
            ..
        } = &mut *tables;
        for (map, key) in [
            (open_by_sender, &self.sender.name),
            (open_by_agent, &self.user_agent.name),
        ] {
            if let Some(n) = map.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(costs: &Costs, secs: u64) -> Instant {
        costs.epoch + Duration::from_secs(secs)
    }

    #[test]
    fn the_costliest_come_first_by_each_figure() {
        let costs = Arc::new(Costs::default());
        let now = at(&costs, 1);
        let runaway = costs.payer(
            SenderKind::Token,
            "system:serviceaccount:tel:agent",
            "agent/1",
        );
        let kubectl = costs.payer(SenderKind::Certificate, "alice", "kubectl/v1.35");
        for _ in 0..3 {
            runaway.sent_at(now, true, None);
            runaway.held_at(now, None, Some(Duration::from_millis(400)), 4 << 20);
        }
        for _ in 0..5 {
            kubectl.sent_at(now, false, Some("kubectl get"));
            kubectl.held_at(now, None, Some(Duration::from_millis(2)), 1000);
        }
        kubectl.watch_opened();
        let by_time = costs.report_at(now, Window::Minute, SortBy::Time, 10);
        let first = &by_time.senders[0];
        assert_eq!(first.name, "system:serviceaccount:tel:agent");
        assert_eq!(first.identity, Some("bearer_token"));
        assert_eq!(
            first.cost,
            Cost {
                requests: 3,
                lists: 3,
                apiserver_micros: 1_200_000,
                bytes: 12 << 20,
                rejections: 0
            }
        );
        let by_requests = costs.report_at(now, Window::Minute, SortBy::Requests, 10);
        assert_eq!(by_requests.senders[0].name, "alice");
        let by_watches = costs.report_at(now, Window::Minute, SortBy::Watches, 10);
        assert_eq!(by_watches.user_agents[0].name, "kubectl/v1.35");
        assert_eq!(by_watches.user_agents[0].open_watches, 1);
        assert_eq!(by_time.kubectl_commands[0].name, "kubectl get");
        assert_eq!(by_time.kubectl_commands[0].cost.requests, 5);
        kubectl.watch_closed();
        let closed = costs.report_at(now, Window::Minute, SortBy::Watches, 10);
        assert!(
            closed.senders.iter().all(|r| r.open_watches == 0),
            "{closed:?}"
        );
    }

    #[test]
    fn the_minute_forgets_before_the_ten_minutes() {
        let costs = Arc::new(Costs::default());
        let payer = costs.payer(SenderKind::Anonymous, "10.0.0.5", "curl/8");
        payer.sent_at(at(&costs, 1), false, Some("kubectl get"));
        payer.rejected(None);
        let later = at(&costs, 1 + 90);
        let minute = costs.report_at(later, Window::Minute, SortBy::Requests, 10);
        assert!(
            minute.senders.is_empty() && minute.kubectl_commands.is_empty(),
            "{minute:?}"
        );
        let ten = costs.report_at(later, Window::TenMinutes, SortBy::Requests, 10);
        assert_eq!(ten.senders[0].name, "10.0.0.5");
        assert_eq!(ten.senders[0].identity, Some("anonymous"));
        assert_eq!(ten.senders[0].cost.requests, 1);
        let gone = costs.report_at(
            at(&costs, 1 + 11 * 60),
            Window::TenMinutes,
            SortBy::Requests,
            10,
        );
        assert!(gone.senders.is_empty(), "{gone:?}");
    }

    #[test]
    fn one_name_two_ways_of_authenticating_are_two_senders() {
        let costs = Arc::new(Costs::default());
        let now = at(&costs, 1);
        costs
            .payer(SenderKind::Certificate, "10.0.0.5", "a")
            .sent_at(now, false, None);
        costs
            .payer(SenderKind::Anonymous, "10.0.0.5", "a")
            .sent_at(now, false, None);
        let report = costs.report_at(now, Window::Minute, SortBy::Requests, 10);
        assert_eq!(report.senders.len(), 2, "{report:?}");
        assert_eq!(report.user_agents.len(), 1);
    }

    #[test]
    fn long_names_are_cut_and_counted_as_one() {
        let costs = Arc::new(Costs::default());
        let now = at(&costs, 1);
        let base = "é".repeat(40_000);
        for i in 0..3 {
            costs
                .payer(SenderKind::Anonymous, "10.0.0.1", &format!("{base}{i}"))
                .sent_at(now, false, None);
        }
        let agents = costs
            .report_at(now, Window::Minute, SortBy::Requests, 10)
            .user_agents;
        assert_eq!(agents.len(), 1, "cut to the same {NAME_BYTES} bytes");
        assert_eq!(agents[0].cost.requests, 3);
        assert!(agents[0].name.len() <= NAME_BYTES);
        assert_eq!(bounded("kubectl/v1.35"), "kubectl/v1.35");
    }

    /// A flood of distinct names past the bound: the table stays within it, what is folded
    /// away is counted as others, and a heavy sender seen before and during the flood is still
    /// named first.
    #[test]
    fn a_flood_of_names_stays_bounded_and_the_heavy_sender_stays_named() {
        let costs = Arc::new(Costs::default());
        let now = at(&costs, 1);
        let heavy = costs.payer(SenderKind::Token, "runaway", "runaway/1");
        // Few requests, each a large answer: weighed by what it cost, not by its count.
        let bulky = costs.payer(SenderKind::Certificate, "exporter", "(others)");
        bulky.sent_at(now, true, None);
        bulky.held_at(now, None, Some(Duration::from_millis(900)), 64 << 20);
        for i in 0..5 * NAMES {
            if i % 10 == 0 {
                heavy.sent_at(now, true, None);
            }
            costs
                .payer(
                    SenderKind::Anonymous,
                    &format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
                    &format!("flood/{i}"),
                )
                .sent_at(now, false, Some(&format!("kubectl get {i}")));
        }
        // Two windows' slots, three tables each, each at most NAMES names plus others.
        assert!(
            costs.names_held() <= 2 * 3 * (NAMES + 1),
            "{}",
            costs.names_held()
        );
        let report = costs.report_at(now, Window::Minute, SortBy::Lists, 3);
        assert_eq!(report.senders[0].name, "runaway");
        assert_eq!(report.senders[0].cost.lists, (5 * NAMES / 10) as u64);
        let by_requests = costs.report_at(now, Window::Minute, SortBy::Requests, 2);
        assert_eq!(by_requests.senders[0].name, OTHERS);
        assert_eq!(by_requests.senders[0].identity, None);
        let by_bytes = costs.report_at(now, Window::Minute, SortBy::Bytes, 1);
        assert_eq!(by_bytes.senders[0].name, "exporter", "{by_bytes:?}");
        // A user agent that calls itself "(others)" is its own row, not the folded one.
        let agents = costs
            .report_at(now, Window::Minute, SortBy::Bytes, usize::MAX)
            .user_agents;
        let named_others: Vec<&Row> = agents.iter().filter(|r| r.name == OTHERS).collect();
        assert_eq!(named_others.len(), 2, "{named_others:?}");
        assert!(named_others
            .iter()
            .any(|r| r.cost.requests == 1 && r.cost.bytes == 64 << 20));
        let counted: u64 = costs
            .report_at(now, Window::Minute, SortBy::Requests, usize::MAX)
            .senders
            .iter()
            .map(|r| r.cost.requests)
            .sum();
        assert_eq!(
            counted,
            (5 * NAMES + 5 * NAMES / 10 + 1) as u64,
            "nothing lost"
        );
    }
}
