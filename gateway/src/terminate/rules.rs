//! `dispatch:` compiled: which rule a request falls under, which backends it may go to, and
//! whether its rule's limits let it through. Compiled once per configuration (the metric
//! series of each rule resolved then); matching a request allocates nothing.
//!
//! Who sends a request is what its verified client certificate says (CN, O), or what a
//! TokenReview said of its bearer token (`tokens`); as in RBAC, every named sender is also in
//! `system:authenticated`, and a service account in `system:serviceaccounts` and
//! `system:serviceaccounts:NAMESPACE`. A request kubegate cannot name the sender of
//! (anonymous, a token not reviewed) never matches a rule that names users, groups or service
//! accounts, whatever their `-` exclusions say. Verbs are RBAC's: a resource request's
//! (`get`, `list`, `watch`, ..., `proxy`), a non-resource request's method in lower case.
//! kubectl's command and session are its headers' (`Kubectl-Command`, `Kubectl-Session`), as
//! the client wrote them.

use crate::telemetry::TerminateMetrics;
use kubegate_config::{DispatchRule, Fallback};
use kubegate_wire::classify::RequestInfo;
use kubegate_wire::identity::UserInfo;
use prometheus::{IntCounter, IntGauge};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The compiled rules of one configuration.
#[derive(Default)]
pub struct Rules {
    rules: Vec<Arc<Rule>>,
    /// Some rule names users, groups or service accounts.
    names_senders: bool,
    /// Some rule names kubectl's commands or sessions.
    reads_kubectl: bool,
}

/// One compiled rule.
pub struct Rule {
    /// Its name (`rule-N` when the configuration gives none).
    pub name: String,
    matcher: Matcher,
    /// The backends its requests may go to, by name; empty: all.
    pub backends: Vec<String>,
    /// Where its requests go when none of `backends` is ready.
    pub fallback: Fallback,
    limiter: Option<Limiter>,
    /// It refuses every request it takes, telling the client to come back after this long.
    reject: Option<Duration>,
    /// When it stops taking requests.
    expires: Option<SystemTime>,
    series: Series,
}

struct Series {
    requests: IntCounter,
    limited_in_flight: IntCounter,
    limited_rate: IntCounter,
    rejected: IntCounter,
    in_flight: IntGauge,
    /// Requests sent to the whole pool because none of the rule's backends was ready.
    fallback: IntCounter,
}

/// A request, as the rules see it.
pub struct Facts<'a> {
    /// Verb and target, read as the apiserver reads them.
    pub info: RequestInfo<'a>,
    /// The decoded path (for non-resource rules).
    pub path: &'a str,
    /// Who sent it, when kubegate can name the sender.
    pub sender: Option<&'a UserInfo>,
    /// Its `Kubectl-Command` and `Kubectl-Session`, when it carries them (as text).
    pub kubectl: Kubectl<'a>,
}

/// What kubectl says of a request it sends (KEP-859): the command, and the invocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Kubectl<'a> {
    /// `Kubectl-Command`: `kubectl get`, `kubectl create secret generic`.
    pub command: Option<&'a str>,
    /// `Kubectl-Session`: one UUID per run of kubectl.
    pub session: Option<&'a str>,
}

impl<'a> Kubectl<'a> {
    /// The headers of `headers` (the first of each, if it is visible ASCII, as the status page
    /// counts it too).
    pub fn of(headers: &'a http::HeaderMap) -> Kubectl<'a> {
        let text = |name| kubectl_header(headers, name).and_then(|v| v.to_str().ok());
        Kubectl {
            command: text(KUBECTL_COMMAND),
            session: text(KUBECTL_SESSION),
        }
    }
}

/// kubectl's command header.
pub const KUBECTL_COMMAND: &str = "kubectl-command";
/// kubectl's session header.
pub const KUBECTL_SESSION: &str = "kubectl-session";

/// The first `name` header of a request, unless its HTTP/1.1 `Connection` names it (then it
/// goes no further than kubegate, and is not the request's): one reading for the rules, the
/// access log and the status page.
pub fn kubectl_header<'a>(
    headers: &'a http::HeaderMap,
    name: &str,
) -> Option<&'a http::HeaderValue> {
    headers
        .get(name)
        .filter(|_| !kubegate_wire::hop::names(headers, name))
}

/// Why a request was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The rule's `max_in_flight` requests are in flight.
    InFlight,
    /// The rule's rate is spent: a token comes back in `retry_after`.
    Rate {
        /// When to try again.
        retry_after: Duration,
    },
    /// The rule rejects what it takes (`reject`).
    Rejected {
        /// When to try again.
        retry_after: Duration,
    },
}

/// A request's place under its rule's `max_in_flight`; given back when dropped.
pub struct Slot {
    rule: Arc<Rule>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(l) = &self.rule.limiter {
            l.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        self.rule.series.in_flight.dec();
    }
}

impl Rules {
    /// Removes the metric series of `cluster`'s rules named `names` (run-time rules no longer
    /// in force: their names come and go, and their series must not pile up).
    pub fn forget(cluster: &str, names: &[&str], metrics: &TerminateMetrics) {
        for name in names {
            let _ = metrics
                .dispatch_requests
                .remove_label_values(&[cluster, name]);
            for limit in ["in_flight", "rate", "rejected"] {
                let _ = metrics
                    .dispatch_limited
                    .remove_label_values(&[cluster, name, limit]);
            }
            let _ = metrics
                .dispatch_in_flight
                .remove_label_values(&[cluster, name]);
            let _ = metrics
                .dispatch_fallback
                .remove_label_values(&[cluster, name]);
        }
    }

    /// Compiles `cluster`'s `rules`, their metric series in `metrics` (labelled by `cluster`:
    /// two clusters' rules of one name count apart).
    pub fn compile(cluster: &str, rules: &[DispatchRule], metrics: &TerminateMetrics) -> Rules {
        let rules: Vec<Arc<Rule>> = rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let name = r.name.clone().unwrap_or_else(|| format!("rule-{}", i + 1));
                let series = Series {
                    requests: metrics
                        .dispatch_requests
                        .with_label_values(&[cluster, &name]),
                    limited_in_flight: metrics.dispatch_limited.with_label_values(&[
                        cluster,
                        &name,
                        "in_flight",
                    ]),
                    limited_rate: metrics
                        .dispatch_limited
                        .with_label_values(&[cluster, &name, "rate"]),
                    rejected: metrics
                        .dispatch_limited
                        .with_label_values(&[cluster, &name, "rejected"]),
                    in_flight: metrics
                        .dispatch_in_flight
                        .with_label_values(&[cluster, &name]),
                    fallback: metrics
                        .dispatch_fallback
                        .with_label_values(&[cluster, &name]),
                };
                Arc::new(Rule {
                    name,
                    matcher: Matcher::new(r),
                    backends: r.backends.clone(),
                    fallback: r.fallback,
                    limiter: r.limit.as_ref().map(Limiter::new),
                    reject: r.reject.as_ref().map(|r| r.retry_after),
                    expires: r.expires,
                    series,
                })
            })
            .collect();
        let names_senders = rules.iter().any(|r| r.matcher.names_sender);
        let reads_kubectl = rules
            .iter()
            .any(|r| r.matcher.kubectl_commands.given || r.matcher.kubectl_sessions.given);
        Rules {
            rules,
            names_senders,
            reads_kubectl,
        }
    }

    /// Whether some rule names users, groups or service accounts: an unnamed sender's
    /// request may be one it would take.
    pub fn names_senders(&self) -> bool {
        self.names_senders
    }

    /// Whether some rule names kubectl's commands or sessions: only then are a request's
    /// kubectl headers read.
    pub fn reads_kubectl(&self) -> bool {
        self.reads_kubectl
    }

    /// The rules' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.name.as_str())
    }

    /// The first rule that matches `facts`.
    pub fn rule_for(&self, facts: &Facts<'_>) -> Option<&Arc<Rule>> {
        self.matching(facts).next().map(|(_, rule)| rule)
    }

    /// The rules that match `facts` and have not expired, in order, with their positions.
    pub fn matching<'s, 'f>(
        &'s self,
        facts: &'f Facts<'f>,
    ) -> impl Iterator<Item = (usize, &'s Arc<Rule>)> + use<'s, 'f> {
        let who = Who::of(facts.sender);
        // The clock is read only when a rule that matches can expire.
        let mut now = None;
        self.rules.iter().enumerate().filter(move |(_, r)| {
            r.matcher.matches(facts, &who)
                && r.expires
                    .is_none_or(|at| *now.get_or_insert_with(SystemTime::now) < at)
        })
    }
}

impl Rule {
    /// Counts the request and lets it through, or says why not.
    pub fn admit(self: &Arc<Rule>, now: Instant) -> Result<Slot, Refusal> {
        self.series.requests.inc();
        if let Some(retry_after) = self.reject {
            self.series.rejected.inc();
            return Err(Refusal::Rejected { retry_after });
        }
        if let Some(l) = &self.limiter {
            if let Some(max) = l.max_in_flight {
                let taken = l
                    .in_flight
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                        (n < max).then_some(n + 1)
                    });
                if taken.is_err() {
                    self.series.limited_in_flight.inc();
                    return Err(Refusal::InFlight);
                }
            } else {
                l.in_flight.fetch_add(1, Ordering::AcqRel);
            }
            if let Some(bucket) = &l.bucket {
                let mut b = bucket.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(wait) = b.take(now) {
                    drop(b);
                    l.in_flight.fetch_sub(1, Ordering::AcqRel);
                    self.series.limited_rate.inc();
                    return Err(Refusal::Rate { retry_after: wait });
                }
            }
        }
        self.series.in_flight.inc();
        Ok(Slot { rule: self.clone() })
    }

    /// Whether it refuses every request it takes (`reject`).
    pub fn rejects(&self) -> bool {
        self.reject.is_some()
    }

    /// Counts a request sent to the whole pool because none of the rule's backends was ready.
    pub fn fell_back(&self) {
        self.series.fallback.inc();
    }
}

/// Who sent the request, as the rules compare it.
struct Who<'a> {
    user: Option<&'a str>,
    groups: &'a [String],
    /// `namespace`, `name` of a service account user.
    service_account: Option<(&'a str, &'a str)>,
}

impl<'a> Who<'a> {
    fn of(sender: Option<&'a UserInfo>) -> Who<'a> {
        let user = sender.map(|i| i.user.as_str());
        Who {
            user,
            groups: sender.map_or(&[], |i| i.groups.as_slice()),
            service_account: user
                .and_then(|u| u.strip_prefix("system:serviceaccount:"))
                .and_then(|rest| rest.split_once(':')),
        }
    }

    /// Whether the sender is in `group`, its own groups or those RBAC adds: every named
    /// sender is `system:authenticated`; a service account is in `system:serviceaccounts` and
    /// `system:serviceaccounts:NAMESPACE`. No allocation.
    fn in_group(&self, group: &str) -> bool {
        if self.user.is_none() {
            return false;
        }
        if group == "system:authenticated" || self.groups.iter().any(|g| g == group) {
            return true;
        }
        match self.service_account {
            Some((ns, _)) => {
                group == "system:serviceaccounts"
                    || group.strip_prefix("system:serviceaccounts:") == Some(ns)
            }
            None => false,
        }
    }
}

/// One list of a match: values, `*`, and `-value` exclusions. Not given: anything.
struct Values {
    given: bool,
    any: bool,
    include: Vec<String>,
    exclude: Vec<String>,
}

impl Values {
    fn new(list: &[String]) -> Values {
        let (exclude, include): (Vec<&String>, Vec<&String>) =
            list.iter().partition(|v| v.starts_with('-'));
        Values {
            given: !list.is_empty(),
            // Only exclusions: everything else.
            any: include.is_empty() || include.iter().any(|v| *v == "*"),
            include: include.into_iter().cloned().collect(),
            exclude: exclude.into_iter().map(|v| v[1..].to_string()).collect(),
        }
    }

    fn matches(&self, value: &str) -> bool {
        !self.given
            || ((self.any || self.include.iter().any(|v| v == value))
                && !self.exclude.iter().any(|v| v == value))
    }

    fn matches_with(&self, one: impl Fn(&str) -> bool) -> bool {
        !self.given
            || ((self.any || self.include.iter().any(|v| one(v)))
                && !self.exclude.iter().any(|v| one(v)))
    }
}

struct Matcher {
    verbs: Values,
    api_groups: Values,
    resources: Values,
    namespaces: Values,
    users: Values,
    groups: Values,
    service_accounts: Values,
    non_resource_urls: Values,
    kubectl_commands: Values,
    kubectl_sessions: Values,
    /// Takes only resource requests (it names groups, resources or namespaces).
    resource_only: bool,
    /// Names who sends: a request from nobody kubegate can name does not match.
    names_sender: bool,
}

impl Matcher {
    fn new(r: &DispatchRule) -> Matcher {
        let m = &r.matches;
        Matcher {
            verbs: Values::new(&m.verbs),
            api_groups: Values::new(&m.api_groups),
            resources: Values::new(&m.resources),
            namespaces: Values::new(&m.namespaces),
            users: Values::new(&m.users),
            groups: Values::new(&m.groups),
            service_accounts: Values::new(&m.service_accounts),
            non_resource_urls: Values::new(&m.non_resource_urls),
            kubectl_commands: Values::new(&m.kubectl_commands),
            kubectl_sessions: Values::new(&m.kubectl_sessions),
            resource_only: !(m.api_groups.is_empty()
                && m.resources.is_empty()
                && m.namespaces.is_empty()),
            names_sender: !(m.users.is_empty()
                && m.groups.is_empty()
                && m.service_accounts.is_empty()),
        }
    }

    fn matches(&self, f: &Facts<'_>, who: &Who<'_>) -> bool {
        let target = &f.info.target;
        let resource_request = f.info.is_resource_request();
        if (self.resource_only && !resource_request)
            || (self.non_resource_urls.given && resource_request)
            || (self.names_sender && who.user.is_none())
            // As RBAC: `service_accounts` (even `*`, even only exclusions) takes service
            // accounts only.
            || (self.service_accounts.given && who.service_account.is_none())
            // Only kubectl's requests say what kubectl runs.
            || !given_and(&self.kubectl_commands, f.kubectl.command)
            || !given_and(&self.kubectl_sessions, f.kubectl.session)
        {
            return false;
        }
        if !self.verbs.matches(f.info.rbac_verb) {
            return false;
        }
        if resource_request {
            let group = target.api_group.unwrap_or("");
            let resource = target.resource.unwrap_or("");
            let sub = target.subresource;
            if !self.api_groups.matches(group)
                || !self
                    .resources
                    .matches_with(|rule| resource_matches(rule, resource, sub))
                || !self.namespaces.matches(target.namespace.unwrap_or(""))
            {
                return false;
            }
        } else if !self
            .non_resource_urls
            .matches_with(|rule| url_matches(rule, f.path))
        {
            return false;
        }
        self.users.matches(who.user.unwrap_or(""))
            && self.groups.matches_with(|group| who.in_group(group))
            && self
                .service_accounts
                .matches_with(|rule| match who.service_account {
                    Some((ns, name)) => rule
                        .split_once(':')
                        .is_some_and(|(rns, rname)| rns == ns && (rname == "*" || rname == name)),
                    None => false,
                })
    }
}

/// Whether `value` matches `list`, a list not given matching anything and a value not
/// carried nothing of a list that is.
fn given_and(list: &Values, value: Option<&str>) -> bool {
    match value {
        Some(v) => list.matches(v),
        None => !list.given,
    }
}

/// `pods`, `pods/log`, `*/status`, `pods/*`, `*` against a resource and subresource.
fn resource_matches(rule: &str, resource: &str, sub: Option<&str>) -> bool {
    if rule == "*" {
        return true;
    }
    match (rule.split_once('/'), sub) {
        (None, None) => rule == resource,
        (Some((r, s)), Some(sub)) => (r == "*" || r == resource) && (s == "*" || s == sub),
        _ => false,
    }
}

/// `/version` exactly, or `/apis/*` as a prefix.
fn url_matches(rule: &str, path: &str) -> bool {
    match rule.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => rule == path,
    }
}

/// A rule's limits.
struct Limiter {
    max_in_flight: Option<u32>,
    in_flight: AtomicU32,
    bucket: Option<Mutex<Bucket>>,
}

impl Limiter {
    fn new(l: &kubegate_config::RuleLimit) -> Limiter {
        Limiter {
            max_in_flight: l.max_in_flight,
            in_flight: AtomicU32::new(0),
            bucket: l.rate.map(|rate| {
                let burst = f64::from(l.burst.unwrap_or(0)).max(rate.ceil()).max(1.0);
                Mutex::new(Bucket {
                    rate,
                    burst,
                    tokens: burst,
                    last: None,
                })
            }),
        }
    }
}

/// A token bucket: `rate` tokens a second, at most `burst` saved.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl Bucket {
    /// Takes a token, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if let Some(last) = self.last {
            let earned = now.saturating_duration_since(last).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + earned).min(self.burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            // Validation bounds the rate; a wait that still does not fit a Duration is "a
            // long time", never a panic.
            Err(Duration::try_from_secs_f64((1.0 - self.tokens) / self.rate)
                .unwrap_or(Duration::MAX))
        }
    }
}

/// What the rules read of `method path` from `user` (`name/group/...`), handed to `f`: the
/// tests' way to ask a rule table about a request.
#[cfg(test)]
pub(crate) fn with_facts<R>(
    method: &str,
    path: &str,
    user: Option<&str>,
    kubectl: Kubectl<'_>,
    f: impl FnOnce(&Facts<'_>) -> R,
) -> R {
    let uri: http::Uri = path.parse().unwrap();
    let method: http::Method = method.parse().unwrap();
    let sender = user.map(|u| {
        let mut parts = u.split('/');
        UserInfo {
            user: parts.next().unwrap().to_string(),
            groups: parts.map(str::to_string).collect(),
            uid: None,
            extra: Default::default(),
        }
    });
    let read = kubegate_wire::classify::ReadTarget::of(&uri).unwrap();
    f(&Facts {
        info: read.info(&method),
        path: read.path(),
        sender: sender.as_ref(),
        kubectl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Rules {
        let rules: Vec<DispatchRule> = serde_yaml_ng::from_str(yaml).unwrap();
        let metrics = TerminateMetrics::new(&prometheus::Registry::new());
        Rules::compile("default", &rules, &metrics)
    }

    /// The name of the rule `method path` from `user` (groups after `/`) falls under.
    fn rule_of(rules: &Rules, method: &str, path: &str, user: Option<&str>) -> Option<String> {
        rule_of_kubectl(rules, method, path, user, Kubectl::default())
    }

    /// The same, for a request that carries `kubectl`'s headers.
    fn rule_of_kubectl(
        rules: &Rules,
        method: &str,
        path: &str,
        user: Option<&str>,
        kubectl: Kubectl<'_>,
    ) -> Option<String> {
        with_facts(method, path, user, kubectl, |facts| {
            rules.rule_for(facts).map(|r| r.name.clone())
        })
    }

    #[test]
    fn kubectls_command_and_session_match_only_requests_that_carry_them() {
        let rules = rules(
            r#"
- name: deletes
  match: {kubectl_commands: ["kubectl delete"], users: [dev]}
  limit: {rate: 1}
- name: not-gets
  match: {kubectl_commands: ["*", "-kubectl get"]}
  backends: [a]
- name: one-run
  match: {kubectl_sessions: [67b540bf-d219-4868-abd8-b08c77fefeca]}
  backends: [b]
"#,
        );
        let said = |command, session| Kubectl {
            command: Some(command),
            session,
        };
        let pods = "/api/v1/namespaces/a/pods/x";
        let of = |user, kubectl| rule_of_kubectl(&rules, "DELETE", pods, user, kubectl);
        assert_eq!(
            of(Some("dev"), said("kubectl delete", None)).as_deref(),
            Some("deletes")
        );
        // Another user's delete, and any other command but get: the second rule.
        assert_eq!(
            of(Some("ops"), said("kubectl delete", None)).as_deref(),
            Some("not-gets")
        );
        assert_eq!(
            of(None, said("kubectl apply", None)).as_deref(),
            Some("not-gets")
        );
        let uuid = "67b540bf-d219-4868-abd8-b08c77fefeca";
        let session = Some(uuid);
        assert_eq!(
            of(None, said("kubectl get", session)).as_deref(),
            Some("one-run")
        );
        assert_eq!(of(None, said("kubectl get", None)), None);
        // A request without the headers (client-go, curl) is none of kubectl's.
        assert_eq!(of(Some("dev"), Kubectl::default()), None);
        let mut headers = http::HeaderMap::new();
        headers.insert("kubectl-command", "kubectl delete".parse().unwrap());
        headers.insert("kubectl-session", uuid.parse().unwrap());
        let read = Kubectl::of(&headers);
        assert_eq!(
            (read.command, read.session),
            (Some("kubectl delete"), session)
        );
        // An HTTP/1.1 request whose `Connection` names the header does not carry it on.
        headers.insert("connection", "Kubectl-Command".parse().unwrap());
        let read = Kubectl::of(&headers);
        assert_eq!((read.command, read.session), (None, session));
    }

    const RULES: &str = r#"
- name: kcm-reads
  match: {verbs: [list, watch], users: [system:kube-controller-manager]}
  backends: [a]
- name: not-kube-system-pods
  match: {resources: [pods], namespaces: ["-kube-system"]}
  backends: [b]
- name: status
  match: {resources: ["*/status"], verbs: ["*", "-get"]}
  backends: [a]
- name: logs
  match: {resources: ["pods/*"]}
  backends: [b]
- name: ci
  match: {service_accounts: ["ci:*"]}
  limit: {max_in_flight: 1}
- name: masters-not
  match: {groups: ["-system:masters"], api_groups: [apps]}
  backends: [a]
- name: version
  match: {non_resource_urls: [/version, /openapi/*]}
  backends: [b]
"#;

    #[test]
    fn the_first_matching_rule_decides() {
        let r = rules(RULES);
        let kcm = Some("system:kube-controller-manager");
        let (ci, prod) = (
            Some("system:serviceaccount:ci:runner"),
            Some("system:serviceaccount:prod:runner"),
        );
        #[rustfmt::skip]
        let cases = [
            ("GET", "/api/v1/pods", kcm, Some("kcm-reads")),
            ("GET", "/api/v1/pods?watch=1", kcm, Some("kcm-reads")),
            // A get is not a list: the next rule takes it.
            ("GET", "/api/v1/namespaces/x/pods/p", kcm, Some("not-kube-system-pods")),
            // Excluded namespace.
            ("GET", "/api/v1/namespaces/kube-system/pods/p", kcm, None),
            // Subresources: */status for every verb but get; pods/* for any pod subresource.
            ("PUT", "/api/v1/namespaces/x/pods/p/status", None, Some("status")),
            ("GET", "/api/v1/namespaces/x/pods/p/status", None, Some("logs")),
            ("GET", "/api/v1/namespaces/x/pods/p/log", None, Some("logs")),
            // Service accounts, by namespace.
            ("GET", "/api/v1/namespaces/x/configmaps", ci, Some("ci")),
            ("GET", "/api/v1/namespaces/x/configmaps", prod, None),
            // Group exclusion: anyone but a master, and only with an identity kubegate knows.
            ("GET", "/apis/apps/v1/deployments", Some("alice/dev"), Some("masters-not")),
            ("GET", "/apis/apps/v1/deployments", Some("root/system:masters"), None),
            ("GET", "/apis/apps/v1/deployments", None, None),
            // Non-resource paths, exact and by prefix; a resource rule never takes them.
            ("GET", "/version", None, Some("version")),
            ("GET", "/openapi/v3", None, Some("version")),
            ("GET", "/healthz", None, None),
        ];
        for (method, path, user, rule) in cases {
            let at = rule_of(&r, method, path, user);
            assert_eq!(at.as_deref(), rule, "{method} {path} as {user:?}");
        }
    }

    #[test]
    fn rules_take_what_the_apiserver_reads_not_the_raw_bytes() {
        let r = rules(concat!(
            "- {name: secrets, match: {resources: [secrets]}, backends: [a]}\n",
            "- {name: watches, match: {verbs: [watch]}, backends: [a]}\n",
            "- {name: deletes, match: {verbs: [delete]}, backends: [a]}\n",
            "- {name: not-system, match: {namespaces: [\"-kube-system\"], resources: [pods]}, backends: [a]}\n",
            "- {name: version, match: {non_resource_urls: [/version]}, backends: [a]}\n",
        ));
        #[rustfmt::skip]
        let cases = [
            ("GET", "/api/v1/namespaces/default/secret%73", Some("secrets")),
            ("GET", "/api/v1/namespaces/d/configmaps?watch=yes", Some("watches")),
            ("GET", "/api/v1/namespaces/d/configmaps?w%61tch=1", Some("watches")),
            // A named GET with ?watch is a get.
            ("GET", "/api/v1/namespaces/d/configmaps/c?watch=1", None),
            ("GET", "/api/v1/namespaces/kube%2Dsystem/pods", None),
            ("DELETE", "/api/v1/namespaces/d/pods%2Fp", Some("deletes")),
            ("GET", "/vers%69on", Some("version")),
        ];
        for (method, path, rule) in cases {
            let at = rule_of(&r, method, path, None);
            assert_eq!(at.as_deref(), rule, "{method} {path}");
        }
    }

    #[test]
    fn service_account_lists_take_service_accounts_only_as_rbac() {
        let r = rules("- {name: any-sa, match: {service_accounts: [\"*\"]}, backends: [a]}\n");
        let at = |u| rule_of(&r, "GET", "/api/v1/pods", Some(u));
        assert_eq!(at("system:serviceaccount:ci:x").as_deref(), Some("any-sa"));
        assert_eq!(
            at("alice"),
            None,
            "a certificate user is no service account"
        );
        let r = rules("- {name: not-ci, match: {service_accounts: [\"-ci:*\"]}, backends: [a]}\n");
        let at = |u| rule_of(&r, "GET", "/api/v1/pods", Some(u));
        assert_eq!(
            at("system:serviceaccount:prod:x").as_deref(),
            Some("not-ci")
        );
        assert_eq!(at("system:serviceaccount:ci:x"), None);
        assert_eq!(at("alice"), None);
    }

    #[test]
    fn groups_rbac_adds_are_matched() {
        let r = rules(concat!(
            "- {name: ci-sas, match: {groups: [\"system:serviceaccounts:ci\"]}, backends: [a]}\n",
            "- {name: all-sas, match: {groups: [system:serviceaccounts]}, backends: [a]}\n",
            "- {name: named, match: {groups: [system:authenticated]}, backends: [a]}\n",
        ));
        let at = |u| rule_of(&r, "GET", "/api/v1/pods", u);
        assert_eq!(
            at(Some("system:serviceaccount:ci:x")).as_deref(),
            Some("ci-sas")
        );
        assert_eq!(
            at(Some("system:serviceaccount:prod:x")).as_deref(),
            Some("all-sas")
        );
        assert_eq!(at(Some("alice/dev")).as_deref(), Some("named"));
        assert_eq!(at(None), None);
    }

    #[test]
    fn non_resource_verbs_are_methods() {
        let r = rules("- {name: posts, match: {verbs: [post], non_resource_urls: [\"/x/*\"]}, backends: [a]}\n- {name: proxies, match: {verbs: [proxy]}, backends: [a]}\n");
        assert_eq!(rule_of(&r, "POST", "/x/y", None).as_deref(), Some("posts"));
        assert_eq!(rule_of(&r, "GET", "/x/y", None), None);
        assert_eq!(
            rule_of(&r, "GET", "/api/v1/proxy/namespaces/d/pods/p", None).as_deref(),
            Some("proxies")
        );
    }

    #[test]
    fn a_tiny_rate_waits_long_and_never_panics() {
        let mut b = Bucket {
            rate: 1e-300,
            burst: 1.0,
            tokens: 0.0,
            last: None,
        };
        assert_eq!(b.take(Instant::now()), Err(Duration::MAX));
    }

    #[test]
    fn no_rule_no_match() {
        assert!(rule_of(&Rules::default(), "GET", "/api/v1/pods", None).is_none());
    }

    #[test]
    fn max_in_flight_counts_until_the_slot_is_given_back() {
        let r = rules("- match: {verbs: ['*']}\n  limit: {max_in_flight: 2}");
        let rule = r.rules[0].clone();
        let now = Instant::now();
        let a = rule.admit(now).unwrap();
        let _b = rule.admit(now).unwrap();
        assert_eq!(rule.admit(now).err(), Some(Refusal::InFlight));
        drop(a);
        assert!(rule.admit(now).is_ok());
    }

    #[test]
    fn the_rate_lets_a_burst_through_then_one_per_interval() {
        let r = rules("- match: {verbs: ['*']}\n  limit: {rate: 2, burst: 3}");
        let rule = r.rules[0].clone();
        let t0 = Instant::now();
        for _ in 0..3 {
            drop(rule.admit(t0).unwrap());
        }
        match rule.admit(t0) {
            Err(Refusal::Rate { retry_after }) => {
                assert!(
                    retry_after > Duration::from_millis(400)
                        && retry_after <= Duration::from_millis(500),
                    "{retry_after:?}"
                )
            }
            other => panic!("{:?}", other.err()),
        }
        // Half a second later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(500);
        drop(rule.admit(t1).unwrap());
        assert!(matches!(rule.admit(t1), Err(Refusal::Rate { .. })));
    }

    #[test]
    fn a_rule_that_rejects_refuses_with_its_retry_after_until_it_expires() {
        let r = rules(
            "- name: shed\n  match: {users: [agent]}\n  reject: {retry_after: 30s}\n- name: rest\n  match: {verbs: [\"*\"]}\n  limit: {max_in_flight: 5}",
        );
        let list = "/api/v1/pods";
        assert_eq!(
            rule_of(&r, "GET", list, Some("agent")).as_deref(),
            Some("shed")
        );
        let shed = r.rules[0].clone();
        assert!(matches!(
            shed.admit(Instant::now()),
            Err(Refusal::Rejected { retry_after }) if retry_after == Duration::from_secs(30)
        ));
        assert_eq!(
            rule_of(&r, "GET", list, Some("alice")).as_deref(),
            Some("rest")
        );
        let expired = rules(&format!(
            "- name: shed\n  match: {{users: [agent]}}\n  reject: {{}}\n  expires: \"{}\"\n- name: rest\n  match: {{verbs: [\"*\"]}}\n  limit: {{max_in_flight: 5}}",
            humantime::format_rfc3339_seconds(SystemTime::now() - Duration::from_secs(1))
        ));
        assert_eq!(
            rule_of(&expired, "GET", list, Some("agent")).as_deref(),
            Some("rest"),
            "an expired rule takes nothing: the next one decides"
        );
    }
}
