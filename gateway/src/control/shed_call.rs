//! `kubegate shed NAME` and `kubegate unshed NAME`, for an operator in an incident: turn a
//! runaway client away at the gateways, for a bounded time. Written to the cluster's shed
//! object (`control::shed_object`) with the operator's own kubeconfig — RBAC decides who may —
//! every kubegate watching it puts the rule in force; or, with `--admin`/`--config`, sent to
//! one gateway's admin endpoint (`POST /shed`, `POST /unshed/NAME`), which needs no apiserver.

use crate::control::discovery::{load_credentials, Credentials};
use crate::control::shed_object::{admissible, new_object, patch, rules_of};
use crate::control::status::{call_with, AdminTarget};
use anyhow::{bail, Context};
use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use kubegate_config::{DispatchRule, Fallback, ObjectName, RuleMatch, RuleReject};
use rustls::pki_types::ServerName;
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// The object `kubegate shed` writes unless told another: the one deploy/ configures.
pub const DEFAULT_OBJECT: &str = "kube-system/kubegate-shed";
/// The largest answer read: a ConfigMap holds at most 1 MiB.
const MAX_ANSWER: usize = 4 << 20;

/// Where a rule is put in force.
pub enum ShedTarget {
    /// One gateway's admin endpoint.
    Gateway(AdminTarget),
    /// The cluster's shed object, written with a kubeconfig's credentials.
    Cluster {
        /// The kubeconfig.
        kubeconfig: PathBuf,
        /// The object.
        object: ObjectName,
    },
}

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
/// prints the rules in force there then.
pub fn run(target: &ShedTarget, request: Option<&ShedRequest>, name: &str) -> anyhow::Result<()> {
    match target {
        ShedTarget::Gateway(admin) => at_gateway(admin, request, name),
        ShedTarget::Cluster { kubeconfig, object } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let rules = rt.block_on(async {
                tokio::time::timeout(
                    CALL_TIMEOUT * 3,
                    in_cluster(kubeconfig, object, request, name),
                )
                .await
                .with_context(|| {
                    format!("the apiserver did not answer within {:?}", CALL_TIMEOUT * 3)
                })?
            })?;
            match request {
                Some(_) => println!("{name}: written to {object}; in force at every kubegate that watches it; {} rules there", rules.len()),
                None => println!("{name}: removed from {object}; {} rules there", rules.len()),
            }
            print_rules(&rules);
            Ok(())
        }
    }
}

fn at_gateway(
    target: &AdminTarget,
    request: Option<&ShedRequest>,
    name: &str,
) -> anyhow::Result<()> {
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
    print_rules(&rules);
    Ok(())
}

/// `kubegate check --auto-shed`: what `settings` would do with `target`'s cost table now, each
/// priority level's runaways were it troubled, printed.
pub fn preview(
    target: &AdminTarget,
    settings: &kubegate_config::AutoShedConfig,
) -> anyhow::Result<()> {
    let path = format!(
        "/debug/shed/auto?factor={}&min_share_percent={}",
        settings.factor, settings.min_share_percent
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let answer = rt.block_on(async {
        tokio::time::timeout(
            CALL_TIMEOUT,
            call_with(target, Method::GET, &path, Bytes::new()),
        )
        .await
        .with_context(|| format!("admin endpoint did not answer within {CALL_TIMEOUT:?}"))?
    })?;
    let levels: Vec<Value> =
        serde_json::from_slice(&answer).context("unexpected answer to the preview")?;
    println!(
        "auto_shed ({}): factor {}, min_share_percent {}; the last 20 s of the cost table:",
        if settings.enabled { "on" } else { "off" },
        settings.factor,
        settings.min_share_percent
    );
    if levels.is_empty() {
        println!("  no request placed in a priority level yet");
    }
    for level in &levels {
        // The gateway's words reach a terminal: no control bytes.
        let shown = |v: &Value| -> String { v.as_str().unwrap_or("-").escape_debug().collect() };
        println!(
            "  level {}{}: {} senders",
            shown(&level["level"]),
            if level["troubled"] == true {
                " (troubled now)"
            } else {
                ""
            },
            level["senders"]
        );
        let held = level["would_hold_back"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if held.is_empty() {
            println!("    would hold back no one");
        }
        for h in &held {
            println!(
                "    would hold back {} ({:.0}% of the level's cost)",
                shown(&h[0]),
                h[1].as_f64().unwrap_or(0.0) * 100.0
            );
        }
    }
    Ok(())
}

/// One line per rule: its name, its end, what it takes.
fn print_rules(rules: &[DispatchRule]) {
    for rule in rules {
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
}

/// Writes (or with `None` removes) rule `name` in `object` through the kubeconfig's server; the
/// rules the object holds then.
async fn in_cluster(
    kubeconfig: &std::path::Path,
    object: &ObjectName,
    request: Option<&ShedRequest>,
    name: &str,
) -> anyhow::Result<Vec<DispatchRule>> {
    let creds = load_credentials(kubeconfig, None).map_err(anyhow::Error::msg)?;
    let api = Api::new(creds)?;
    let one = format!(
        "/api/v1/namespaces/{}/configmaps/{}",
        object.namespace, object.name
    );
    let merge = Some("application/merge-patch+json");
    let written = match request {
        Some(request) => {
            // Checked here as every gateway will check it: a rule they would refuse is never
            // written.
            let mut rule = request.rule();
            admissible(&mut rule, SystemTime::now()).map_err(anyhow::Error::msg)?;
            let body = patch(name, Some(&rule)).to_string();
            let (status, answer) = api.call(Method::PATCH, &one, merge, &body).await?;
            if status != StatusCode::NOT_FOUND {
                expect(status, &answer, &one)?
            } else {
                // The first rule makes the object; if another operator's made it meanwhile,
                // the patch goes to theirs.
                let collection = format!("/api/v1/namespaces/{}/configmaps", object.namespace);
                let body = new_object(object, &rule).to_string();
                let json = Some("application/json");
                let (status, answer) = api.call(Method::POST, &collection, json, &body).await?;
                match status {
                    StatusCode::FORBIDDEN => bail!(
                        "{object} does not exist and you may not make it: apply deploy/rbac/kubegate-shed.yaml (`kubegate init` writes it to kubegate-rbac.yaml), which makes it"
                    ),
                    StatusCode::CONFLICT => {
                        let body = patch(name, Some(&rule)).to_string();
                        let (status, answer) = api.call(Method::PATCH, &one, merge, &body).await?;
                        expect(status, &answer, &one)?
                    }
                    _ => expect(status, &answer, &collection)?,
                }
            }
        }
        None => {
            let (status, answer) = api.call(Method::GET, &one, None, "").await?;
            let held = match status {
                StatusCode::NOT_FOUND => false,
                _ => expect(status, &answer, &one)?["data"].get(name).is_some(),
            };
            if !held {
                bail!("404: {object} holds no rule named {name:?}");
            }
            let body = patch(name, None).to_string();
            let (status, answer) = api.call(Method::PATCH, &one, merge, &body).await?;
            expect(status, &answer, &one)?
        }
    };
    Ok(rules_of(&written, SystemTime::now()).rules)
}

/// The object of a 200 or 201 answer, or what the apiserver said instead.
fn expect(status: StatusCode, answer: &[u8], path: &str) -> anyhow::Result<Value> {
    if status.is_success() {
        return serde_json::from_slice(answer).context("the apiserver's answer is not JSON");
    }
    let said: Option<String> = serde_json::from_slice::<Value>(answer)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string));
    let said = said.unwrap_or_else(|| String::from_utf8_lossy(answer).into_owned());
    // The apiserver's words (or an admission webhook's) reach a terminal: no control bytes.
    let mut said: String = said.escape_debug().collect();
    said.truncate(2000);
    bail!("{path}: the apiserver answered {status}: {said}")
}

/// The kubeconfig's server, asked with its credentials over HTTP/1.1.
struct Api {
    creds: Credentials,
    /// The server's path, if any (a proxy's `/k8s/clusters/ID`): every call goes under it.
    prefix: String,
    host: String,
    port: u16,
    name: ServerName<'static>,
}

impl Api {
    fn new(creds: Credentials) -> anyhow::Result<Api> {
        let server = creds
            .server
            .clone()
            .context("the kubeconfig's cluster names no server")?;
        let uri: Uri = server
            .parse()
            .with_context(|| format!("server {server:?}"))?;
        if uri.scheme_str() != Some("https") {
            bail!("server {server:?}: kubegate speaks to an apiserver over https only");
        }
        let host = uri
            .host()
            .context("the server names no host")?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let prefix = uri.path().trim_end_matches('/').to_string();
        let name = creds.server_name.clone().unwrap_or_else(|| host.clone());
        let name = ServerName::try_from(name.clone())
            .with_context(|| format!("{name:?} is not a TLS server name"))?;
        Ok(Api {
            creds,
            prefix,
            host,
            port,
            name,
        })
    }

    /// `method path` with `body` of `content_type`: the status and the body answered.
    async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: &str,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .with_context(|| format!("connecting to {}:{}", self.host, self.port))?;
        let tls = tokio_rustls::TlsConnector::from(self.creds.tls.clone())
            .connect(self.name.clone(), tcp)
            .await
            .context("TLS")?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(http::header::HOST, &self.host)
            .header(http::header::ACCEPT, "application/json")
            .header(
                http::header::USER_AGENT,
                concat!("kubegate/", env!("CARGO_PKG_VERSION"), " (shed)"),
            );
        if let Some(t) = content_type {
            req = req.header(http::header::CONTENT_TYPE, t);
        }
        if let Some(token) = &self.creds.token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req.body(Full::new(Bytes::from(body.to_string())))?;
        let resp = send.send_request(req).await?;
        let status = resp.status();
        let answer = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
            .to_bytes();
        Ok((status, answer))
    }
}
