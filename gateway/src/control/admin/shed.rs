//! `POST /shed` (a rule that rejects, as JSON in the `dispatch` vocabulary), `POST
//! /unshed/NAME` and `GET /debug/shed`: the run-time rules (`control::shed`) over the admin
//! endpoint, held to what a drain is held to (`drain::Caller`). They work with no apiserver
//! reachable: the rules are the gateway's own.

use super::drain::Caller;
use super::respond::{json, text};
use crate::control::shed;
use crate::state::Gateway;
use crate::terminate::TerminatePlane;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use kubegate_config::DispatchRule;

/// The largest rule read: a rule is a few hundred bytes.
const MAX_BODY: usize = 64 * 1024;

/// One of these calls.
pub enum Call {
    /// `POST /shed`.
    Shed,
    /// `POST /unshed/NAME`, the name decoded.
    Unshed(String),
}

impl Call {
    /// The call `path` names, if any.
    pub fn of(path: &str) -> Option<Call> {
        if path == "/shed" {
            return Some(Call::Shed);
        }
        let name = path.strip_prefix("/unshed/").filter(|n| !n.is_empty())?;
        // A name the path cannot carry as written is kept as written: no rule has it.
        let name = kubegate_wire::target::path(name).map_or(name.to_string(), |n| n.into_owned());
        Some(Call::Unshed(name))
    }
}

/// Carries out `call` for `caller`.
pub async fn handle(
    gw: &Gateway,
    caller: Caller,
    req: Request<Incoming>,
    call: Call,
) -> Response<Full<Bytes>> {
    let what = match call {
        Call::Shed => "a shed",
        Call::Unshed(_) => "an unshed",
    };
    if let Err(refused) = caller.may_change(gw, req.headers(), what) {
        return *refused;
    }
    match call {
        Call::Unshed(name) => match shed::remove(gw, &name) {
            Some(rules) => json(&rules),
            None => text(
                StatusCode::NOT_FOUND,
                format!("no run-time rule is named {name:?}\n"),
            ),
        },
        Call::Shed => {
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!("the rule did not arrive whole within {MAX_BODY} bytes\n"),
                    )
                }
            };
            let rule: DispatchRule = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => return text(StatusCode::BAD_REQUEST, format!("not a rule: {e}\n")),
            };
            match shed::put(gw, rule) {
                Ok(rules) => json(&rules),
                Err(why) => text(StatusCode::UNPROCESSABLE_ENTITY, format!("{why}\n")),
            }
        }
    }
}

/// `GET /debug/shed`: the rules in force at run time (not those expired), by source, and the
/// senders `terminate.auto_shed` holds back, by cluster.
pub fn debug(gw: &Gateway) -> Response<Full<Bytes>> {
    #[derive(serde::Serialize)]
    struct Shown {
        #[serde(flatten)]
        rules: crate::state::ShedInForce,
        auto: std::collections::BTreeMap<String, Vec<crate::state::HeldBackShown>>,
    }
    json(&Shown {
        rules: gw.shed().in_force(std::time::SystemTime::now()),
        auto: (*gw.shed().auto()).clone(),
    })
}

/// `GET /debug/shed/auto[?factor=N&min_share_percent=P]`: who `terminate.auto_shed` (the
/// configuration in force, or these settings) would hold back in each priority level were it
/// troubled now (`kubegate check --auto-shed`).
pub fn auto_preview(
    gw: &Gateway,
    plane: &TerminatePlane,
    uri: &http::Uri,
) -> Response<Full<Bytes>> {
    let mut settings = gw.config().load().terminate.auto_shed;
    for (key, value) in url_pairs(uri.query().unwrap_or("")) {
        let parsed = value.parse::<u32>();
        match (key, parsed) {
            ("factor", Ok(n)) if n >= 2 => settings.factor = n,
            ("min_share_percent", Ok(n)) if (1..=100).contains(&n) => {
                settings.min_share_percent = n
            }
            _ => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "{}: factor (2 or more) and min_share_percent (1 to 100) are read\n",
                        key.escape_debug()
                    ),
                )
            }
        }
    }
    let served: Vec<_> = plane.upstreams().into_values().collect();
    json(&crate::terminate::auto_shed_preview(gw, &served, &settings))
}

/// `key=value` pairs of a query (values here are numbers: nothing to decode).
fn url_pairs(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

/// The status page's "Turned away now": the rules in force at run time (the gateway's own,
/// each cluster's shed object's) and the senders `terminate.auto_shed` holds back; nothing
/// when there are none.
pub fn section(page: &mut String, gw: &Gateway, esc: fn(&str) -> String) {
    use std::fmt::Write as _;
    let rules = gw.shed().in_force(std::time::SystemTime::now());
    let auto = gw.shed().auto();
    let from_clusters = rules
        .clusters
        .iter()
        .flat_map(|(c, r)| r.iter().map(move |r| (Some(c), r)));
    let all: Vec<(Option<&String>, &DispatchRule)> = rules
        .gateway
        .iter()
        .map(|r| (None, r))
        .chain(from_clusters)
        .collect();
    if all.is_empty() && auto.is_empty() {
        return;
    }
    page.push_str("<h2 id=shed>Turned away now</h2>");
    if !all.is_empty() {
        page.push_str("<table><tr><th>Rule<th>From<th>Takes<th>Until</tr>");
        for (cluster, rule) in all {
            let from = match cluster {
                None => "this gateway (kubegate shed --admin)".to_string(),
                Some(c) => format!("cluster {}'s shed object", esc(c)),
            };
            let until = rule
                .expires
                .map(|t| humantime::format_rfc3339_seconds(t).to_string())
                .unwrap_or_default();
            let _ = write!(
                page,
                "<tr><td>{}<td>{from}<td>{}<td>{until}</tr>",
                esc(rule.name.as_deref().unwrap_or("-")),
                esc(&serde_json::to_string(&rule.matches).unwrap_or_default()),
            );
        }
        page.push_str("</table>");
    }
    if !auto.is_empty() {
        page.push_str(
            "<p></p><table><tr><th>Held back (auto_shed)<th>Cluster<th>Priority level\
             <th>Share turned away<th>Its share of the level<th>Since<th>429s</tr>",
        );
        for (cluster, held) in auto.iter() {
            for h in held {
                let _ = write!(
                    page,
                    "<tr><td>{}<td>{}<td>{}<td class=n>{:.0}%<td class=n>{:.0}%<td>{}<td class=n>{}</tr>",
                    esc(&h.sender),
                    esc(cluster),
                    esc(&h.level),
                    h.share * 100.0,
                    h.cost_share * 100.0,
                    esc(&h.since),
                    h.rejected,
                );
            }
        }
        page.push_str("</table>");
    }
}
