//! API Priority and Fairness as a 1.33–1.35 apiserver runs it
//! (`k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go`): after authentication,
//! before authorization, every request but a long-running one other than a watch is
//! classified into a flow schema and a priority level; its response carries both UIDs
//! (`X-Kubernetes-PF-FlowSchema-UID`, `X-Kubernetes-PF-PriorityLevel-UID`), rejected or not.
//! It then takes seats of its level (a LIST by its size, a watch only while it initializes, a
//! write more for its watchers) or waits in the level's queues; a rejection is 429 "Too many
//! requests, please try again later." with the level's adapted `Retry-After`, before any
//! handler ran.
//!
//! Seats are per replica: `--max-requests-inflight` plus `--max-mutating-requests-inflight`,
//! shared among the limited levels by their shares.

mod bootstrap;
mod level;
mod report;
mod retry_after;

pub use bootstrap::Attributes;

use crate::respond::{http_error, Reply};
use bootstrap::{classify, Distinguisher, SchemaSpec, LEVELS};
use level::{Level, Seats};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The response header naming the flow schema's UID.
pub const FLOW_SCHEMA_UID: &str = "x-kubernetes-pf-flowschema-uid";
/// The response header naming the priority level's UID.
pub const PRIORITY_LEVEL_UID: &str = "x-kubernetes-pf-prioritylevel-uid";

/// Bytes of a LIST's answer one seat stands for (`SizeBasedListCostEstimate`, 1.34+).
const BYTES_PER_SEAT: usize = 100_000;
/// The most seats a request takes.
const MAX_SEATS: usize = 100;
/// A write takes one more seat per this many watchers...
const WATCHERS_PER_SEAT: usize = 10;
/// ...up to this many more.
const MAX_WATCHER_SEATS: usize = 10;

/// The UID of the flow schema or priority level `name` (the same on every replica), as the
/// `X-Kubernetes-PF-*` headers carry it; also the UID of other objects every replica shows
/// alike (APIServices).
pub fn uid_of(name: &str) -> String {
    bootstrap::uid(name)
}

/// A replica's priority levels and what it knows of LIST sizes.
pub struct FlowControl {
    levels: Vec<Arc<Level>>,
    /// The last answer's size of a LIST of each resource (the apiserver estimates from its
    /// storage's object counts and sizes; the simulator's storage is what it answered).
    list_bytes: Mutex<HashMap<String, usize>>,
}

/// What a request costs, in seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// A LIST: by the size of its resource's last answer.
    List,
    /// A watch, while it initializes.
    Watch,
    /// A create, update, patch or delete, with this many watchers to notify.
    Write {
        /// Open watches.
        watchers: usize,
    },
    /// Anything else.
    Other,
}

/// A classified request: its schema and level, and the seats it holds until dropped.
pub struct Admitted {
    schema: &'static SchemaSpec,
    level_uid: String,
    _seats: Option<Seats>,
}

impl Admitted {
    /// Adds the two headers every classified response carries, ahead of the handler's: the
    /// filter sets them before the handler runs, so a proxied answer's own (an extension
    /// server's) are second values.
    pub fn headers(&self, mut reply: Reply) -> Reply {
        let value = |v: &str| http::HeaderValue::from_str(v).expect("a UID is a header value");
        reply.headers.splice(
            0..0,
            [
                (
                    http::HeaderName::from_static(FLOW_SCHEMA_UID),
                    value(&bootstrap::uid(self.schema.name)),
                ),
                (
                    http::HeaderName::from_static(PRIORITY_LEVEL_UID),
                    value(&self.level_uid),
                ),
            ],
        );
        reply
    }
}

impl FlowControl {
    /// Levels sharing `max_seats` seats; a queued request waits at most `queue_wait`.
    pub fn new(max_seats: usize, queue_wait: Duration) -> FlowControl {
        let shares: u32 = LEVELS.iter().map(|l| l.shares).sum();
        let levels = LEVELS
            .iter()
            .map(|spec| {
                // nominalConcurrencyLimit = ceil(serverCL * shares / sum of shares).
                let seats = (max_seats * spec.shares as usize).div_ceil(shares as usize);
                Arc::new(Level::new(spec, seats, queue_wait))
            })
            .collect();
        FlowControl {
            levels,
            list_bytes: Mutex::new(HashMap::new()),
        }
    }

    /// Classifies the request and takes its seats: `Err` is the rejection to answer with.
    pub async fn admit(&self, attrs: &Attributes<'_>, work: Work) -> Result<Admitted, Reply> {
        let schema = classify(attrs);
        let level = self.level(schema.level).expect("a schema's level exists");
        let admitted = |seats| Admitted {
            schema,
            level_uid: level.uid.clone(),
            _seats: seats,
        };
        if level.spec.exempt {
            return Ok(admitted(None));
        }
        let mut flow = std::collections::hash_map::DefaultHasher::new();
        schema.name.hash(&mut flow);
        match schema.distinguisher {
            Distinguisher::ByUser => attrs.user.name.hash(&mut flow),
            Distinguisher::ByNamespace => attrs.namespace.hash(&mut flow),
        }
        let width = self.width(attrs, work);
        match level.admit(schema.name, flow.finish(), width).await {
            Ok(seats) => Ok(admitted(Some(seats))),
            Err(rejected) => {
                tracing::debug!(
                    level = level.spec.name,
                    reason = rejected.reason.as_str(),
                    "request rejected by priority and fairness"
                );
                Err(admitted(None).headers(
                    http_error(
                        http::StatusCode::TOO_MANY_REQUESTS,
                        "Too many requests, please try again later.",
                    )
                    .header("retry-after", &rejected.retry_after.to_string()),
                ))
            }
        }
    }

    /// Remembers the size of a LIST's answer, for the next LIST's cost.
    pub fn listed(&self, attrs: &Attributes<'_>, bytes: usize) {
        if let Some((group, resource)) = attrs.resource {
            self.list_bytes
                .lock()
                .expect("list sizes")
                .insert(format!("{group}/{resource}"), bytes);
        }
    }

    /// Starts (true) or ends the fault that saturates `level`, its rejections asking for
    /// `retry_after` seconds if given: `false` when there is no such level or it is exempt.
    pub fn saturate(&self, level: &str, saturated: bool, retry_after: Option<i64>) -> bool {
        match self.level(level) {
            Some(l) if !l.spec.exempt => {
                l.saturate(saturated, retry_after);
                true
            }
            _ => false,
        }
    }

    /// Makes each request of priority level `level` wait `wait` in its queues first
    /// (`None` ends it); false for an unknown or exempt level.
    pub fn queue(&self, level: &str, wait: Option<Duration>) -> bool {
        match self.level(level) {
            Some(l) if !l.spec.exempt => {
                l.queue(wait);
                true
            }
            _ => false,
        }
    }

    /// The `apiserver_flowcontrol_*` metrics, in Prometheus' text format.
    pub fn metrics(&self) -> String {
        report::metrics(&self.levels)
    }

    /// `/debug/api_priority_and_fairness/dump_priority_levels`.
    pub fn dump_priority_levels(&self) -> String {
        report::dump_priority_levels(&self.levels)
    }

    fn level(&self, name: &str) -> Option<&Arc<Level>> {
        self.levels.iter().find(|l| l.spec.name == name)
    }

    fn width(&self, attrs: &Attributes<'_>, work: Work) -> usize {
        match work {
            Work::List => {
                let bytes = attrs.resource.and_then(|(group, resource)| {
                    let sizes = self.list_bytes.lock().expect("list sizes");
                    sizes.get(&format!("{group}/{resource}")).copied()
                });
                bytes
                    .unwrap_or(0)
                    .div_ceil(BYTES_PER_SEAT)
                    .clamp(1, MAX_SEATS)
            }
            Work::Write { watchers } => {
                1 + watchers.div_ceil(WATCHERS_PER_SEAT).min(MAX_WATCHER_SEATS)
            }
            Work::Watch | Work::Other => 1,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::auth::User;

    /// An authenticated user of no particular group: `global-default`'s.
    pub(crate) fn someone() -> User {
        User {
            groups: vec!["system:authenticated".into()],
            ..User::anonymous()
        }
    }

    /// `verb` on the config maps of `default`, by `user`.
    pub(crate) fn on_config_maps<'a>(user: &'a User, verb: &'a str) -> Attributes<'a> {
        Attributes {
            user,
            verb,
            resource: Some(("", "configmaps")),
            namespace: Some("default"),
        }
    }

    #[tokio::test]
    async fn seats_are_shared_by_shares_and_a_rejection_reads_as_the_apiservers() {
        let fc = FlowControl::new(600, Duration::from_secs(15));
        let seats = |name| fc.level(name).unwrap().seats;
        // ceil(600 × shares / 245).
        assert_eq!(seats("workload-low"), 245);
        assert_eq!(seats("global-default"), 49);
        assert_eq!(seats("catch-all"), 13);
        let user = someone();
        let attrs = on_config_maps(&user, "list");
        let ok = fc.admit(&attrs, Work::List).await.ok().unwrap();
        let reply = ok.headers(Reply::new(http::StatusCode::OK, ""));
        let header = |r: &Reply, n: &str| {
            r.headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.to_str().unwrap().to_string())
        };
        assert_eq!(
            header(&reply, PRIORITY_LEVEL_UID),
            Some(bootstrap::uid("global-default"))
        );
        assert!(fc.saturate("global-default", true, None));
        let rejected = fc.admit(&attrs, Work::List).await.err().unwrap();
        assert_eq!(rejected.status, 429);
        assert_eq!(
            &rejected.body[..],
            b"Too many requests, please try again later.\n"
        );
        assert_eq!(header(&rejected, "retry-after").as_deref(), Some("1"));
        assert_eq!(
            header(&rejected, FLOW_SCHEMA_UID),
            Some(bootstrap::uid("global-default"))
        );
        assert!(!fc.saturate("exempt", true, None));
        assert!(!fc.saturate("no-such-level", true, None));
    }

    #[test]
    fn a_list_costs_by_its_size_and_a_write_by_its_watchers() {
        let fc = FlowControl::new(600, Duration::from_secs(15));
        let user = User::anonymous();
        let attrs = Attributes {
            user: &user,
            verb: "list",
            resource: Some(("", "pods")),
            namespace: None,
        };
        assert_eq!(fc.width(&attrs, Work::List), 1);
        fc.listed(&attrs, 2_500_000);
        assert_eq!(fc.width(&attrs, Work::List), 25);
        fc.listed(&attrs, 50_000_000);
        assert_eq!(fc.width(&attrs, Work::List), MAX_SEATS);
        assert_eq!(fc.width(&attrs, Work::Write { watchers: 0 }), 1);
        assert_eq!(fc.width(&attrs, Work::Write { watchers: 25 }), 4);
        assert_eq!(fc.width(&attrs, Work::Write { watchers: 5000 }), 11);
        assert_eq!(fc.width(&attrs, Work::Watch), 1);
    }
}
