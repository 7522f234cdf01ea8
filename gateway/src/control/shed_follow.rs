//! Each cluster's shed object (`terminate.shed_object`) followed by every kubegate in front of
//! it: listed, then watched, through terminate mode's own upstream connections as kubegate
//! (`terminate::send_own`), so the rules an operator writes to the cluster are in force at
//! every gateway as soon as the watch event arrives — the cluster's own store is the only
//! one. The rules last read stay in force through an apiserver outage (and, written to
//! `terminate.shed_state_file`, a restart of kubegate during one) until they expire; an
//! object that is gone, or empty, puts none in force. A watch moves off a replica that begins
//! to drain, as a client's does.

use crate::control::shed;
use crate::control::shed_object::{rules_of, ObjectRules};
use crate::state::{Gateway, MAX_SHED_RULES};
use crate::terminate::{send_own, OwnAnswer, TerminateMode, Unanswered};
use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use kubegate_config::ObjectName;
use kubegate_wire::classify::{LongRunning, RequestClass, Verb};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// A watch ends after this long and is opened again, so a silent connection cannot hide
/// changes forever.
const WATCH_SECONDS: u64 = 300;
/// The longest pause between attempts while the object cannot be read: the rules written
/// during an outage arrive within this of its end.
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// Refused entries said at one read, at most (a hand-written object of thousands of bad keys
/// must not flood the log at every gateway).
const SAY_REFUSED: usize = 10;
/// How long reading fails before it is said.
const SAY_AFTER: Duration = Duration::from_secs(10);
/// How often a configuration change of the object's name is looked for while watching.
const LOOK: Duration = Duration::from_secs(2);
/// The largest answer read: a ConfigMap holds at most 1 MiB.
const MAX_ANSWER: usize = 4 << 20;

/// Follows the shed object of `mode`'s cluster until the task is ended with the cluster.
pub async fn follow(gw: Arc<Gateway>, mode: Arc<TerminateMode>) {
    let cluster = mode.cluster().name().to_string();
    let errors = gw
        .metrics()
        .control
        .shed_object_errors
        .with_label_values(&[&cluster]);
    let mut follower = Follower {
        gw: gw.clone(),
        mode,
        cluster,
        version: None,
        failing: None,
        refused: Vec::new(),
    };
    let mut pause = Duration::from_millis(500);
    let mut failing_since: Option<Instant> = None;
    loop {
        let Some(object) = follower.object() else {
            // Not configured (or no longer): no rules from the cluster.
            if follower.version.take().is_some() || !follower.refused.is_empty() {
                follower.apply(ObjectRules::default(), None);
            }
            // Rules read back from the state file for a cluster no longer following its object.
            if follower
                .gw
                .shed()
                .all()
                .clusters
                .contains_key(&follower.cluster)
            {
                shed::set_cluster(&follower.gw, &follower.cluster, Vec::new());
            }
            tokio::time::sleep(LOOK).await;
            continue;
        };
        match follower.read(&object).await {
            Ok(()) => {
                pause = Duration::from_millis(500);
                failing_since = None;
                if follower.failing.take().is_some() {
                    tracing::info!(cluster = follower.cluster, object = %object, "shed object: read again");
                }
            }
            Err(why) => {
                errors.inc();
                // Said once a failure has lasted (not while the replicas are first found
                // ready), then once per kind of failure, not at every attempt of an outage.
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= SAY_AFTER && follower.failing.as_deref() != Some(why.as_str())
                {
                    tracing::warn!(cluster = follower.cluster, object = %object, error = %why, "shed object: cannot read it; the rules last read stay in force until they expire");
                    follower.failing = Some(why);
                }
                follower.version = None;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

struct Follower {
    gw: Arc<Gateway>,
    mode: Arc<TerminateMode>,
    cluster: String,
    /// The object's collection's resourceVersion last seen; `None`: list first.
    version: Option<String>,
    /// The last failure said, while they go on.
    failing: Option<String>,
    /// The entries refused at the last read (said again only when they change).
    refused: Vec<(String, String)>,
}

impl Follower {
    /// The object the configuration in force names.
    fn object(&self) -> Option<ObjectName> {
        let config = self.gw.config().load();
        let name = config.terminate.shed_object.as_deref()?;
        ObjectName::parse(name).ok()
    }

    /// Lists the object if it must, then watches it until the watch ends (Ok) or fails.
    async fn read(&mut self, object: &ObjectName) -> Result<(), String> {
        let collection = format!(
            "/api/v1/namespaces/{}/configmaps?fieldSelector=metadata.name%3D{}",
            object.namespace, object.name
        );
        let version = match self.version.clone() {
            Some(v) => v,
            None => {
                let list = self.get(&collection, false).await?;
                let list: Value = serde_json::from_slice(&list.whole(MAX_ANSWER).await?)
                    .map_err(|e| format!("the list: {e}"))?;
                let found = list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|o| names(o, object));
                let read =
                    found.map_or_else(ObjectRules::default, |o| rules_of(o, SystemTime::now()));
                self.apply(read, Some(object));
                let v = list["metadata"]["resourceVersion"]
                    .as_str()
                    .ok_or("the list has no resourceVersion")?
                    .to_string();
                self.version = Some(v.clone());
                v
            }
        };
        let path = format!(
            "{collection}&watch=1&allowWatchBookmarks=true&resourceVersion={version}&timeoutSeconds={WATCH_SECONDS}"
        );
        let opened = tokio::time::Instant::now();
        let mut watch = self.get(&path, true).await?;
        let mut drains = watch.drains();
        let mut buf = Vec::new();
        let silence = Duration::from_secs(WATCH_SECONDS + 30);
        let mut quiet = tokio::time::Instant::now();
        let mut look = tokio::time::interval(LOOK);
        loop {
            let data = tokio::select! {
                data = watch.next() => data,
                _ = async {
                    match &mut drains {
                        Some(d) => { let _ = d.changed().await; }
                        None => std::future::pending().await,
                    }
                } => {
                    // Its replica drains: on to another, from where this one was.
                    return Ok(());
                }
                _ = look.tick() => {
                    if self.object().as_ref() != Some(object) {
                        self.version = None;
                        return Ok(());
                    }
                    if quiet.elapsed() > silence {
                        return Err("the watch went silent".into());
                    }
                    continue;
                }
            };
            let Some(data) = data else {
                // A watch the replica ends at once, again and again (shutting down, or
                // hostile), is not asked again at once.
                return match opened.elapsed() < Duration::from_secs(1) {
                    true => Err("the watch ended as soon as it began".into()),
                    false => Ok(()),
                };
            };
            quiet = tokio::time::Instant::now();
            buf.extend_from_slice(&data?);
            if buf.len() > MAX_ANSWER {
                return Err(format!("a watch event over {MAX_ANSWER} bytes"));
            }
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                if event["type"] == "ERROR" {
                    // 410 Gone: the version is too old, list again. Anything else is a
                    // failure, waited out as any.
                    self.version = None;
                    return match event["object"]["code"].as_u64() {
                        Some(410) => Ok(()),
                        code => Err(format!("the watch ended with an error (code {code:?})")),
                    };
                }
                let o = &event["object"];
                if let Some(v) = o["metadata"]["resourceVersion"].as_str() {
                    self.version = Some(v.to_string());
                }
                match event["type"].as_str() {
                    Some("ADDED" | "MODIFIED") if names(o, object) => {
                        self.apply(rules_of(o, SystemTime::now()), Some(object))
                    }
                    Some("DELETED") if names(o, object) => {
                        self.apply(ObjectRules::default(), Some(object))
                    }
                    _ => {}
                }
            }
        }
    }

    /// One GET of kubegate's own (a watch if `watch`), answered 200.
    async fn get(&self, path: &str, watch: bool) -> Result<OwnAnswer, String> {
        let uri: Uri = path.parse().map_err(|e| format!("{path}: {e}"))?;
        let class = match watch {
            true => RequestClass {
                verb: Verb::Watch,
                long_running: Some(LongRunning::Watch),
            },
            false => RequestClass {
                verb: Verb::List,
                long_running: None,
            },
        };
        let upstreams = self.mode.live_upstreams().load();
        let answer = send_own(&self.gw, &upstreams, Method::GET, uri, Bytes::new(), class)
            .await
            .map_err(|e| match e {
                Unanswered::NoIdentity => "no front-proxy certificate (upstream.front_proxy): kubegate reads the object as itself".to_string(),
                Unanswered::Transient(why) => why,
            })?;
        match answer.status {
            StatusCode::OK => Ok(answer),
            StatusCode::FORBIDDEN => Err("the apiserver answered 403: kubegate's user needs get, list and watch of the object (deploy/rbac/kubegate-shed.yaml)".into()),
            other => Err(format!("the apiserver answered {other}")),
        }
    }

    /// Puts the rules `read` (of `object`) in force for the cluster, saying what changed and
    /// what was refused (each time the refused entries change, the first few).
    fn apply(&mut self, mut read: ObjectRules, object: Option<&ObjectName>) {
        let object = object.map(ToString::to_string).unwrap_or_default();
        if read.rules.len() > MAX_SHED_RULES {
            let left: Vec<String> = read.rules[MAX_SHED_RULES..]
                .iter()
                .filter_map(|r| r.name.clone())
                .collect();
            tracing::warn!(cluster = self.cluster, object, kept = MAX_SHED_RULES, left_out = ?left, "shed object: more rules than are kept in force; the first by name kept");
            read.rules.truncate(MAX_SHED_RULES);
        }
        let control = &self.gw.metrics().control;
        let labels = [self.cluster.as_str()];
        control
            .shed_object_rules
            .with_label_values(&labels)
            .set(read.rules.len() as i64);
        control
            .shed_object_refused
            .with_label_values(&labels)
            .set(read.refused.len() as i64);
        if read.refused != self.refused {
            for (key, why) in read.refused.iter().take(SAY_REFUSED) {
                tracing::warn!(cluster = self.cluster, object, entry = %key.escape_debug(), why = %why.escape_debug(), "shed object: an entry not put in force");
            }
            if read.refused.len() > SAY_REFUSED {
                tracing::warn!(
                    cluster = self.cluster,
                    object,
                    more = read.refused.len() - SAY_REFUSED,
                    "shed object: more entries not put in force"
                );
            }
            self.refused = std::mem::take(&mut read.refused);
        }
        let names: Vec<String> = read.rules.iter().filter_map(|r| r.name.clone()).collect();
        if shed::set_cluster(&self.gw, &self.cluster, read.rules) {
            tracing::info!(cluster = self.cluster, object, rules = ?names, expired = read.expired, "shed object: rules from the cluster in force");
        }
    }
}

/// Whether `o` is `object` (the simulator, like a watch cache at some versions, may not apply
/// the field selector: every name is compared).
fn names(o: &Value, object: &ObjectName) -> bool {
    o["metadata"]["name"] == object.name.as_str()
        && o["metadata"]["namespace"] == object.namespace.as_str()
}
