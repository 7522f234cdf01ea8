//! `kubegate shed NAME` and `kubegate unshed NAME`: the admin endpoint's `POST /shed` and
//! `POST /unshed/NAME` (`control::shed`), for an operator in an incident: turn a runaway
//! client away at the gateway, for a bounded time, with no apiserver reachable if need be.

use crate::control::status::{call_with, AdminTarget};
use anyhow::Context;
use bytes::Bytes;
use http::Method;
use kubegate_config::{DispatchRule, Fallback, RuleMatch, RuleReject};
use std::time::{Duration, SystemTime};

pub use crate::control::shed::LONGEST;

/// How long one admin call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What `kubegate shed` was asked.
#[derive(Debug, Clone)]
pub struct ShedRequest {
    /// The rule's name.
    pub name: String,
    /// What it takes.
    pub matches: RuleMatch,
    /// What its 429s' `Retry-After` says.
    pub retry_after: Duration,
    /// How long it lasts.
    pub lasts: Duration,
}

impl ShedRequest {
    /// The rule it puts in force.
    pub fn rule(&self) -> DispatchRule {
        DispatchRule {
            name: Some(self.name.clone()),
            matches: self.matches.clone(),
            backends: Vec::new(),
            fallback: Fallback::All,
            limit: None,
            reject: Some(RuleReject {
                retry_after: self.retry_after,
            }),
            expires: Some(SystemTime::now() + self.lasts),
        }
    }
}

/// Puts `request`'s rule in force at `target` (or, with `None`, removes rule `name`), and
/// prints the rules in force then.
pub fn run(target: &AdminTarget, request: Option<&ShedRequest>, name: &str) -> anyhow::Result<()> {
    let (path, body) = match request {
        Some(r) => (
            "/shed".to_string(),
            Bytes::from(serde_json::to_vec(&r.rule()).expect("serializable")),
        ),
        None => (
            format!("/unshed/{}", kubegate_wire::target::escape_component(name)),
            Bytes::new(),
        ),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let answer = rt.block_on(async {
        tokio::time::timeout(CALL_TIMEOUT, call_with(target, Method::POST, &path, body))
            .await
            .with_context(|| format!("admin endpoint did not answer within {CALL_TIMEOUT:?}"))?
    })?;
    let rules: Vec<DispatchRule> =
        serde_json::from_slice(&answer).context("unexpected answer to the shed call")?;
    match request {
        Some(_) => println!("{name}: in force; {} run-time rules", rules.len()),
        None => println!("{name}: removed; {} run-time rules", rules.len()),
    }
    for rule in &rules {
        let until = rule
            .expires
            .map(|t| humantime::format_rfc3339_seconds(t).to_string())
            .unwrap_or_default();
        println!(
            "  {}  until {until}  {}",
            rule.name.as_deref().unwrap_or("-"),
            serde_json::to_string(&rule.matches).unwrap_or_default()
        );
    }
    Ok(())
}
