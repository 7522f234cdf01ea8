//! `/readyz`, `/livez`, `/healthz` and their per-check paths, byte for byte as
//! k8s.io/apiserver `pkg/server/healthz/healthz.go` writes them.

use crate::checks::{Checks, Endpoint};
use crate::respond::{self, Reply};
use http::StatusCode;

/// Answers a health path, or `None` when `path` is not one.
pub fn answer(checks: &Checks, path: &str, query: Option<&str>) -> Option<Reply> {
    let (endpoint, rest) = [Endpoint::Readyz, Endpoint::Livez, Endpoint::Healthz]
        .into_iter()
        .find_map(|e| {
            let root = format!("/{}", e.name());
            if path == root {
                Some((e, None))
            } else {
                path.strip_prefix(&format!("{root}/")).map(|r| (e, Some(r)))
            }
        })?;
    Some(match rest {
        None => root(checks, endpoint, query),
        Some(check) => single(checks, endpoint, check),
    })
}

/// `handleRootHealth`: terse `ok` on success, verbose on request or on failure.
fn root(checks: &Checks, endpoint: Endpoint, query: Option<&str>) -> Reply {
    let params = crate::query::params(query);
    let verbose = params.iter().any(|(k, _)| k == "verbose");
    let mut excluded: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.trim().to_string())
        .collect();
    let mut out = String::new();
    let mut failed = false;
    for check in endpoint.checks() {
        if let Some(i) = excluded.iter().position(|e| e == check) {
            excluded.remove(i);
            out.push_str(&format!("[+]{check} excluded: ok\n"));
            continue;
        }
        if checks.failure(endpoint, check).is_some() {
            failed = true;
            out.push_str(&format!("[-]{check} failed: reason withheld\n"));
        } else {
            out.push_str(&format!("[+]{check} ok\n"));
        }
    }
    if !excluded.is_empty() {
        excluded.sort();
        excluded.dedup();
        let quoted: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        out.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            quoted.join(", ")
        ));
    }
    if failed {
        return respond::http_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("{out}{} check failed", endpoint.name()),
        );
    }
    let body = if verbose {
        format!("{out}{} check passed\n", endpoint.name())
    } else {
        "ok".to_string()
    };
    Reply::new(StatusCode::OK, body)
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
}

/// `adaptCheckToHandler`: `ok`, or 500 `internal server error: <reason>`.
fn single(checks: &Checks, endpoint: Endpoint, check: &str) -> Reply {
    if !endpoint.checks().contains(&check) {
        return respond::not_found_text();
    }
    match checks.failure(endpoint, check) {
        Some(reason) => respond::http_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("internal server error: {reason}"),
        ),
        None => {
            Reply::new(StatusCode::OK, "ok").header("content-type", "text/plain; charset=utf-8")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_body_is_verbose_and_ends_with_newline() {
        let c = Checks::default();
        c.finish_startup();
        c.begin_shutdown();
        let r = root(&c, Endpoint::Readyz, None);
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        let body = String::from_utf8(r.body.to_vec()).unwrap();
        assert!(
            body.ends_with("[-]shutdown failed: reason withheld\nreadyz check failed\n"),
            "{body}"
        );
        assert!(body.starts_with("[+]ping ok\n[+]log ok\n[+]etcd ok\n"));
    }
}
