//! `dispatch:` — terminate mode's routing rules, in the shape of RBAC's `PolicyRule` (as
//! KubeGateway has them): an ordered list, each a match on what a request is and who sends it,
//! and what to do with the requests it matches — send them only to some backends, and/or limit
//! them. The first rule that matches a request decides; a request no rule matches goes to the
//! whole pool, unlimited.
//!
//! ```yaml
//! dispatch:
//!   - name: controllers-lists          # for metrics and logs (default rule-N)
//!     match:
//!       verbs: [list, watch]
//!       users: [system:kube-controller-manager]
//!     backends: [cp-3]                 # only these, by name
//!     fallback: all                    # when none of them is ready: all (default) | none
//!   - match:
//!       service_accounts: ["ci:*"]
//!       verbs: ["*", "-watch"]         # "-" excludes
//!     limit: {max_in_flight: 20, rate: 50, burst: 100}
//! ```

use serde::{Deserialize, Serialize};

/// One rule.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchRule {
    /// Its name in metrics and logs; `rule-N` (N from 1) when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which requests it takes.
    #[serde(rename = "match")]
    pub matches: RuleMatch,
    /// The backends (by name) its requests go to; empty: the whole pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<String>,
    /// Where its requests go when none of `backends` is ready.
    #[serde(default)]
    pub fallback: Fallback,
    /// How much of its traffic is let through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<RuleLimit>,
    /// Refuse every request it takes: 429 with `Retry-After`, as a limit refuses one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject: Option<RuleReject>,
    /// When the rule stops taking requests (RFC 3339, `2026-12-05T18:00:00Z`): a shed written
    /// in an incident ends on its own.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timestamp::optional"
    )]
    pub expires: Option<std::time::SystemTime>,
}

/// A rule that refuses what it takes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleReject {
    /// What the 429's `Retry-After` says (whole seconds, at least 1).
    #[serde(default = "default_reject_retry_after", with = "crate::duration")]
    pub retry_after: std::time::Duration,
}

fn default_reject_retry_after() -> std::time::Duration {
    std::time::Duration::from_secs(10)
}

impl Default for RuleReject {
    fn default() -> Self {
        RuleReject {
            retry_after: default_reject_retry_after(),
        }
    }
}

/// The longest `reject.retry_after`: a client told to wait longer may as well be told no.
pub const MAX_REJECT_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// What a request must be for a rule to take it. Each list is a set of values, `*` for any,
/// and `-value` for "not this one"; a list left out matches anything. A request matches when
/// every list given matches it.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleMatch {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verbs: Vec<String>,
    /// API groups (`""` is the core group, `apps`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources, with a subresource after `/`: `pods`, `pods/log`, `*/status`, `pods/*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Namespaces (`""`: cluster-scoped requests).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Users, as the client certificate names them (its CN).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Groups, as the client certificate names them (its O).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Service accounts as `namespace:name` (`namespace:*` for all of a namespace): the user
    /// `system:serviceaccount:namespace:name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<String>,
    /// Paths of non-resource requests (`/version`, `/healthz`); a trailing `*` matches a
    /// prefix. A rule that names them takes only non-resource requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_resource_urls: Vec<String>,
    /// kubectl's commands, as its `Kubectl-Command` header names them (`kubectl delete`,
    /// `kubectl create secret generic`). A rule that names them takes only requests that carry
    /// the header. The client writes it: a rule that must hold against a hostile client names
    /// who sends as well.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubectl_commands: Vec<String>,
    /// kubectl invocations, as its `Kubectl-Session` header names them (one UUID per run of
    /// kubectl, on each of its requests). A rule that names them takes only requests that carry
    /// the header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubectl_sessions: Vec<String>,
}

impl RuleMatch {
    /// Every list, with its key.
    pub fn lists(&self) -> [(&'static str, &Vec<String>); 10] {
        [
            ("verbs", &self.verbs),
            ("api_groups", &self.api_groups),
            ("resources", &self.resources),
            ("namespaces", &self.namespaces),
            ("users", &self.users),
            ("groups", &self.groups),
            ("service_accounts", &self.service_accounts),
            ("non_resource_urls", &self.non_resource_urls),
            ("kubectl_commands", &self.kubectl_commands),
            ("kubectl_sessions", &self.kubectl_sessions),
        ]
    }
}

/// Where a rule's requests go when none of its backends is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// To the whole pool.
    #[default]
    All,
    /// Nowhere: 503.
    None,
}

/// A rule's limits; a request beyond them is answered 429 with `Retry-After`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleLimit {
    /// Requests of the rule in flight at once. A watch or another long-running request counts
    /// only until its response starts, as the apiserver's own limits count it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Requests per second, on average.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Requests let through at once above `rate` (default: `rate`, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// The verbs of resource requests a rule may name (RBAC's).
pub const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "proxy",
];

/// The verbs of non-resource requests (`/version`, `/healthz`): the method in lower case, as
/// RBAC's `nonResourceURLs` rules name them.
pub const NON_RESOURCE_VERBS: &[&str] =
    &["get", "head", "post", "put", "patch", "delete", "options"];

/// The lowest `limit.rate`: one request in about 17 minutes. Lower rates are no limit an
/// operator means, and their refill times do not fit a `Retry-After`.
pub const MIN_RATE: f64 = 0.001;
/// The highest `limit.rate` and `limit.burst`.
pub const MAX_RATE: f64 = 1_000_000.0;

/// Checks `rules` against the configured backend `names` (`None`: backends are discovered, so
/// names are not known in advance); each finding is a path and what is wrong there.
pub fn validate(rules: &[DispatchRule], names: Option<&[String]>) -> Vec<(String, String)> {
    let mut findings = Vec::new();
    let mut seen_names = std::collections::HashSet::new();
    for (i, rule) in rules.iter().enumerate() {
        let at = |key: &str| format!("dispatch[{i}].{key}");
        if let Some(name) = &rule.name {
            if name.is_empty() {
                findings.push((at("name"), "a rule's name cannot be empty".into()));
            } else if !seen_names.insert(name.clone()) {
                findings.push((at("name"), format!("another rule is named {name:?}")));
            }
        }
        let m = &rule.matches;
        if m.lists().iter().all(|(_, l)| l.is_empty()) {
            findings.push((
                at("match"),
                "an empty match takes every request; name what it takes (verbs: [\"*\"] for everything)".into(),
            ));
        }
        for (j, verb) in m.verbs.iter().enumerate() {
            let bare = verb.strip_prefix('-').unwrap_or(verb);
            if !bare.is_empty()
                && bare != "*"
                && !VERBS.contains(&bare)
                && !NON_RESOURCE_VERBS.contains(&bare)
            {
                findings.push((
                    format!("dispatch[{i}].match.verbs[{j}]"),
                    format!(
                        "unknown verb {verb:?}; known: {} (resources), {} (non-resource paths), and *",
                        VERBS.join(", "),
                        NON_RESOURCE_VERBS.join(", ")
                    ),
                ));
            }
        }
        for (j, sa) in m.service_accounts.iter().enumerate() {
            let bare = sa.strip_prefix('-').unwrap_or(sa);
            if !bare.is_empty()
                && bare != "*"
                && bare
                    .split_once(':')
                    .is_none_or(|(ns, n)| ns.is_empty() || n.is_empty())
            {
                findings.push((
                    format!("dispatch[{i}].match.service_accounts[{j}]"),
                    format!("{sa:?} is not namespace:name (or namespace:*)"),
                ));
            }
        }
        let resource_keys =
            !m.api_groups.is_empty() || !m.resources.is_empty() || !m.namespaces.is_empty();
        if !m.non_resource_urls.is_empty() && resource_keys {
            findings.push((
                at("match.non_resource_urls"),
                "non_resource_urls takes only non-resource requests; api_groups, resources and namespaces only resource requests: write two rules".into(),
            ));
        }
        for (key, list) in m.lists() {
            for (j, v) in list.iter().enumerate() {
                if v == "-" || v == "-*" {
                    findings.push((
                        format!("dispatch[{i}].match.{key}[{j}]"),
                        format!("{v:?} excludes nothing or everything; name a value after -"),
                    ));
                }
            }
        }
        if rule.backends.is_empty() && rule.limit.is_none() && rule.reject.is_none() {
            findings.push((
                at("match"),
                "the rule does nothing: give it backends, a limit, or both; or reject".into(),
            ));
        }
        if let Some(reject) = &rule.reject {
            if !rule.backends.is_empty() || rule.limit.is_some() {
                findings.push((
                    at("reject"),
                    "a rule that rejects sends nothing anywhere: drop its backends and limit"
                        .into(),
                ));
            }
            let secs = reject.retry_after.as_secs();
            if secs < 1 || reject.retry_after > MAX_REJECT_RETRY_AFTER {
                findings.push((
                    at("reject.retry_after"),
                    format!(
                        "retry_after must be between 1s and {}s",
                        MAX_REJECT_RETRY_AFTER.as_secs()
                    ),
                ));
            }
        }
        if let Some(names) = names {
            for (j, b) in rule.backends.iter().enumerate() {
                if !names.contains(b) {
                    findings.push((
                        format!("dispatch[{i}].backends[{j}]"),
                        format!(
                            "no backend is named {b:?}; configured: {}",
                            names.join(", ")
                        ),
                    ));
                }
            }
        }
        if let Some(limit) = &rule.limit {
            if limit.max_in_flight.is_none() && limit.rate.is_none() {
                findings.push((
                    at("limit"),
                    "a limit needs max_in_flight, rate, or both".into(),
                ));
            }
            if limit.max_in_flight == Some(0) {
                findings.push((
                    at("limit.max_in_flight"),
                    "max_in_flight must be at least 1 (to refuse every request, route them nowhere: backends with fallback: none)".into(),
                ));
            }
            if let Some(rate) = limit.rate {
                if !(MIN_RATE..=MAX_RATE).contains(&rate) {
                    findings.push((
                        at("limit.rate"),
                        format!(
                            "rate must be between {MIN_RATE} and {MAX_RATE} requests per second, not {rate}"
                        ),
                    ));
                }
            }
            if limit.burst.is_some() && limit.rate.is_none() {
                findings.push((at("limit.burst"), "burst goes with rate".into()));
            }
            if limit.burst == Some(0) {
                findings.push((at("limit.burst"), "burst must be at least 1".into()));
            }
            if limit.burst.is_some_and(|b| f64::from(b) > MAX_RATE) {
                findings.push((
                    at("limit.burst"),
                    format!("burst must be at most {MAX_RATE}"),
                ));
            }
        }
    }
    findings
}

/// Rules that can never take a request, or that any client can make take it ahead of a limit,
/// each a path and why: `kubegate check` warns of them (the file is still valid).
pub fn warnings(rules: &[DispatchRule]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let included = |list: &[String]| -> Vec<String> {
        list.iter()
            .filter(|v| !v.starts_with('-'))
            .cloned()
            .collect()
    };
    for (i, rule) in rules.iter().enumerate() {
        let at = |key: &str| format!("dispatch[{i}].{key}");
        if rule
            .expires
            .is_some_and(|at| at <= std::time::SystemTime::now())
        {
            found.push((
                at("expires"),
                "this time has passed: the rule takes no request".into(),
            ));
        }
        let m = &rule.matches;
        let verbs = included(&m.verbs);
        let any_verb = verbs.is_empty() || verbs.iter().any(|v| v == "*");
        let resource_rule =
            !m.api_groups.is_empty() || !m.resources.is_empty() || !m.namespaces.is_empty();
        if !any_verb && !m.non_resource_urls.is_empty() {
            if verbs
                .iter()
                .all(|v| !NON_RESOURCE_VERBS.contains(&v.as_str()))
            {
                found.push((
                    at("match.verbs"),
                    format!(
                        "a non-resource request's verb is its method in lower case ({}): this rule never matches",
                        NON_RESOURCE_VERBS.join(", ")
                    ),
                ));
            }
        } else if !any_verb && resource_rule && verbs.iter().all(|v| !VERBS.contains(&v.as_str())) {
            found.push((
                at("match.verbs"),
                format!(
                    "a resource request's verb is one of {}: this rule never matches",
                    VERBS.join(", ")
                ),
            ));
        }
        let resources = included(&m.resources);
        // `pods/log`, `*/status`, `pods/*` take only subresource requests.
        let only_subresources = !resources.is_empty() && resources.iter().all(|r| r.contains('/'));
        if only_subresources
            && !any_verb
            && verbs
                .iter()
                .all(|v| matches!(v.as_str(), "list" | "watch" | "deletecollection"))
        {
            found.push((
                at("match.resources"),
                "a request for a subresource always names its object, so it is never a list, watch or deletecollection: this rule never matches".into(),
            ));
        }
        let users = included(&m.users);
        if !m.service_accounts.is_empty()
            && !users.is_empty()
            && users
                .iter()
                .all(|u| u != "*" && !u.starts_with("system:serviceaccount:"))
        {
            found.push((
                at("match.users"),
                "service_accounts takes only service accounts (system:serviceaccount:NS:NAME), and none of these users is one: this rule never matches".into(),
            ));
        }
        for (j, g) in m.groups.iter().enumerate() {
            if g == "-system:authenticated" {
                found.push((
                    format!("dispatch[{i}].match.groups[{j}]"),
                    "every sender kubegate can name is in system:authenticated: this rule never matches".into(),
                ));
            }
        }
        // The client writes kubectl's headers: a rule keyed on them alone, ahead of a limit,
        // lets any client step past that limit by sending them.
        let by_kubectl = !m.kubectl_commands.is_empty() || !m.kubectl_sessions.is_empty();
        let names_senders =
            !m.users.is_empty() || !m.groups.is_empty() || !m.service_accounts.is_empty();
        if by_kubectl && !names_senders {
            if let Some(k) = rules[i + 1..].iter().position(|r| r.limit.is_some()) {
                found.push((
                    at("match"),
                    format!(
                        "any client can send kubectl's headers and be taken by this rule before rule {}'s limit: name who sends (users, groups, service_accounts) as well",
                        i + k + 2
                    ),
                ));
            }
        }
        if let Some(k) = rules[..i].iter().position(|r| r.matches == rule.matches) {
            found.push((
                at("match"),
                format!(
                    "rule {} has the same match and comes first: this rule never takes a request",
                    k + 1
                ),
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(yaml: &str) -> DispatchRule {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn findings(yaml: &str) -> Vec<(String, String)> {
        let names = vec!["a".to_string(), "b".to_string()];
        validate(&[rule(yaml)], Some(&names))
    }

    #[test]
    fn a_rule_that_rejects_alone_and_expires_is_read_and_checked() {
        let shed = rule(
            "match: {service_accounts: [\"telemetry:agent\"]}\nreject: {retry_after: 30s}\nexpires: \"2026-12-05T18:00:00Z\"",
        );
        assert_eq!(shed.reject.as_ref().unwrap().retry_after.as_secs(), 30);
        let expires = shed.expires.unwrap();
        assert_eq!(
            humantime::format_rfc3339_seconds(expires).to_string(),
            "2026-12-05T18:00:00Z"
        );
        assert_eq!(validate(std::slice::from_ref(&shed), None), vec![]);
        let mut past = shed;
        past.expires = humantime::parse_rfc3339("2020-01-01T00:00:00Z").ok();
        assert!(warnings(&[past])[0].1.contains("has passed"));
        assert_eq!(
            rule("match: {users: [x]}\nreject: {}")
                .reject
                .unwrap()
                .retry_after
                .as_secs(),
            10
        );
        let both = findings("match: {users: [x]}\nreject: {}\nlimit: {max_in_flight: 1}");
        assert_eq!(both[0].0, "dispatch[0].reject", "{both:?}");
        let long = findings("match: {users: [x]}\nreject: {retry_after: 2h}");
        assert_eq!(long[0].0, "dispatch[0].reject.retry_after", "{long:?}");
        let bad: Result<DispatchRule, _> =
            serde_yaml_ng::from_str("match: {users: [x]}\nreject: {}\nexpires: tomorrow");
        assert!(bad.unwrap_err().to_string().contains("RFC 3339"));
    }

    #[test]
    fn a_good_rule_has_no_finding() {
        assert_eq!(
            findings("match: {verbs: [list, watch], users: [x]}\nbackends: [a]\nfallback: none"),
            vec![]
        );
        assert_eq!(
            findings("match: {service_accounts: [\"ci:*\"], verbs: [\"*\", \"-watch\"]}\nlimit: {max_in_flight: 2, rate: 5, burst: 10}"),
            vec![]
        );
    }

    #[test]
    fn each_mistake_is_named_where_it_is() {
        let at =
            |yaml: &str| -> Vec<String> { findings(yaml).into_iter().map(|(p, _)| p).collect() };
        assert_eq!(at("match: {}\nbackends: [a]"), ["dispatch[0].match"]);
        assert_eq!(
            at("match: {verbs: [get, fetch]}\nbackends: [a]"),
            ["dispatch[0].match.verbs[1]"]
        );
        assert_eq!(
            at("match: {verbs: [get]}\nbackends: [a, c]"),
            ["dispatch[0].backends[1]"]
        );
        assert_eq!(at("match: {verbs: [get]}"), ["dispatch[0].match"]);
        assert_eq!(
            at("match: {verbs: [get]}\nlimit: {max_in_flight: 0}"),
            ["dispatch[0].limit.max_in_flight"]
        );
        assert_eq!(
            at("match: {verbs: [get]}\nlimit: {burst: 3}"),
            ["dispatch[0].limit", "dispatch[0].limit.burst"]
        );
        assert_eq!(
            at("match: {service_accounts: [ci]}\nbackends: [a]"),
            ["dispatch[0].match.service_accounts[0]"]
        );
        assert_eq!(
            at("match: {resources: [pods], non_resource_urls: [/version]}\nbackends: [a]"),
            ["dispatch[0].match.non_resource_urls"]
        );
        assert_eq!(
            at("match: {verbs: [\"-\"]}\nbackends: [a]"),
            ["dispatch[0].match.verbs[0]"]
        );
    }

    #[test]
    fn rates_out_of_bounds_are_refused() {
        let at =
            |yaml: &str| -> Vec<String> { findings(yaml).into_iter().map(|(p, _)| p).collect() };
        assert_eq!(
            at("match: {verbs: [get]}\nlimit: {rate: 1e-20}"),
            ["dispatch[0].limit.rate"]
        );
        assert_eq!(
            at("match: {verbs: [get]}\nlimit: {rate: 1e9}"),
            ["dispatch[0].limit.rate"]
        );
        assert_eq!(
            at("match: {verbs: [get]}\nlimit: {rate: 5, burst: 4000000000}"),
            ["dispatch[0].limit.burst"]
        );
        assert!(at("match: {verbs: [get]}\nlimit: {rate: 0.001, burst: 1}").is_empty());
    }

    #[test]
    fn a_rule_any_client_can_opt_into_ahead_of_a_limit_is_warned_of() {
        let warned = |yaml: &str| -> Vec<String> {
            let rules: Vec<DispatchRule> = serde_yaml_ng::from_str(yaml).unwrap();
            warnings(&rules).into_iter().map(|(p, _)| p).collect()
        };
        let limit = "- {match: {users: [ci]}, limit: {rate: 1}}";
        let gets = "- {match: {kubectl_commands: [kubectl get]}, backends: [a]}";
        assert_eq!(warned(&format!("{gets}\n{limit}")), ["dispatch[0].match"]);
        // Behind the limit, or naming who sends: nothing to step past.
        assert!(warned(&format!("{limit}\n{gets}")).is_empty());
        let named = "- {match: {kubectl_commands: [kubectl get], users: [dev]}, backends: [a]}";
        assert!(warned(&format!("{named}\n{limit}")).is_empty());
    }

    #[test]
    fn rules_that_can_never_match_are_warned_of() {
        let warned = |yaml: &str| -> Vec<String> {
            let rules: Vec<DispatchRule> = serde_yaml_ng::from_str(yaml).unwrap();
            warnings(&rules).into_iter().map(|(p, _)| p).collect()
        };
        let none: Vec<String> = Vec::new();
        assert_eq!(
            warned("- {match: {verbs: [list], resources: [pods]}, backends: [a]}"),
            none
        );
        assert_eq!(
            warned("- {match: {verbs: [post], non_resource_urls: [/x]}, backends: [a]}"),
            none
        );
        assert_eq!(
            warned("- {match: {verbs: [list], non_resource_urls: [/version]}, backends: [a]}"),
            ["dispatch[0].match.verbs"]
        );
        assert_eq!(
            warned("- {match: {verbs: [post], resources: [pods]}, backends: [a]}"),
            ["dispatch[0].match.verbs"]
        );
        assert_eq!(
            warned("- {match: {verbs: [watch], resources: [pods/log]}, backends: [a]}"),
            ["dispatch[0].match.resources"]
        );
        assert_eq!(
            warned("- {match: {users: [alice], service_accounts: [\"ci:*\"]}, backends: [a]}"),
            ["dispatch[0].match.users"]
        );
        assert_eq!(
            warned("- {match: {groups: [\"-system:authenticated\"]}, backends: [a]}"),
            ["dispatch[0].match.groups[0]"]
        );
        assert_eq!(
            warned("- {match: {verbs: [get]}, backends: [a]}\n- {match: {verbs: [get]}, backends: [b]}"),
            ["dispatch[1].match"]
        );
    }

    #[test]
    fn with_discovered_backends_names_are_not_checked() {
        assert_eq!(
            validate(&[rule("match: {verbs: [get]}\nbackends: [later]")], None),
            vec![]
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(
            serde_yaml_ng::from_str::<DispatchRule>("match: {verb: [get]}\nbackends: [a]").is_err()
        );
        assert!(
            serde_yaml_ng::from_str::<DispatchRule>("match: {verbs: [get]}\nfallback: some")
                .is_err()
        );
    }
}
