//! `/readyz` and its checks, answered as the apiserver answers its own.

use crate::control::admin::respond::text;
use crate::state::{Gateway, Phase};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;

/// The checks `/readyz` is made of, each also on its own path (`/readyz/<name>`), as the
/// apiserver's are: keepalived gives the VIP up when `lifecycle` fails (kubegate stopping) and
/// only lowers its priority when `backends` does (every node fails that one together when the
/// apiservers do).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// kubegate is serving: not starting, not shutting down.
    Lifecycle,
    /// At least one backend is ready.
    Backends,
}

impl Check {
    pub const ALL: [Check; 2] = [Check::Lifecycle, Check::Backends];

    pub fn name(self) -> &'static str {
        match self {
            Check::Lifecycle => "lifecycle",
            Check::Backends => "backends",
        }
    }

    pub fn run(self, gw: &Gateway) -> Result<(), &'static str> {
        match self {
            Check::Lifecycle => match gw.lifecycle().phase() {
                Phase::Serving => Ok(()),
                Phase::Starting => Err("starting"),
                Phase::Stopping | Phase::Draining => Err("shutting down"),
            },
            Check::Backends if gw.clusters().ready() == 0 => Err("no ready backend"),
            Check::Backends => Ok(()),
        }
    }
}

pub fn verbose<B>(req: &Request<B>) -> bool {
    req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|p| p == "verbose" || p.starts_with("verbose="))
    })
}

/// `/readyz` (every check) or one check, answered as the apiserver answers: `ok`, or with
/// `verbose` (and always on failure) one `[+]`/`[-]` line per check.
pub fn readyz(gw: &Gateway, only: Option<Check>, verbose: bool) -> Response<Full<Bytes>> {
    let checks: Vec<(Check, Result<(), &str>)> = Check::ALL
        .into_iter()
        .filter(|c| only.is_none_or(|o| o == *c))
        .map(|c| (c, c.run(gw)))
        .collect();
    let passed = checks.iter().all(|(_, r)| r.is_ok());
    if passed && !verbose {
        return text(StatusCode::OK, "ok".into());
    }
    let mut body = String::new();
    for (c, r) in &checks {
        match r {
            Ok(()) => body.push_str(&format!("[+]{} ok\n", c.name())),
            Err(why) => body.push_str(&format!("[-]{} failed: {why}\n", c.name())),
        }
    }
    if passed {
        body.push_str("readyz check passed\n");
        text(StatusCode::OK, body)
    } else {
        body.push_str("readyz check failed\n");
        text(StatusCode::SERVICE_UNAVAILABLE, body)
    }
}
