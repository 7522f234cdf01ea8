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
}

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
}

impl RuleMatch {
    /// Every list, with its key.
    pub fn lists(&self) -> [(&'static str, &Vec<String>); 8] {
        [
            ("verbs", &self.verbs),
            ("api_groups", &self.api_groups),
            ("resources", &self.resources),
            ("namespaces", &self.namespaces),
            ("users", &self.users),
            ("groups", &self.groups),
            ("service_accounts", &self.service_accounts),
            ("non_resource_urls", &self.non_resource_urls),
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

/// The verbs a rule may name.
pub const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

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
            if !bare.is_empty() && bare != "*" && !VERBS.contains(&bare) {
                findings.push((
                    format!("dispatch[{i}].match.verbs[{j}]"),
                    format!("unknown verb {verb:?}; known: {}, and *", VERBS.join(", ")),
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
        if rule.backends.is_empty() && rule.limit.is_none() {
            findings.push((
                at("match"),
                "the rule does nothing: give it backends, a limit, or both".into(),
            ));
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
                if !(rate > 0.0 && rate.is_finite()) {
                    findings.push((
                        at("limit.rate"),
                        format!(
                            "rate must be a positive number of requests per second, not {rate}"
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
        }
    }
    findings
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
