//! `POST /backends/NAME/drain` and `POST /backends/NAME/undrain`: the operator moves a
//! replica's work elsewhere ahead of a planned restart (`kubegate drain`), and gives it back.
//!
//! Calls that change anything (these, and `shed`'s) are held to more than the read-only paths: a
//! caller that authenticated (a verified client certificate or a bearer token) when the
//! endpoint asks for either, and a caller on loopback when it asks for none; never a browser
//! (a request with an `Origin` header), so a web page cannot post to a loopback endpoint.

use super::respond::{json, text};
use crate::state::Gateway;
use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;

/// Who is asking: whether they authenticated and whether they are on loopback.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// A verified client certificate or a matching bearer token.
    pub authenticated: bool,
    /// The connection came from 127.0.0.0/8 or ::1.
    pub loopback: bool,
}

impl Caller {
    /// Whether the caller may change something (`what`, for the refusal's words): never from
    /// a browser; an authenticated caller when the endpoint authenticates, else one on
    /// loopback. The 403 that says why otherwise (boxed: the way out is rare).
    pub fn may_change(
        self,
        gw: &Gateway,
        headers: &http::HeaderMap,
        what: &str,
    ) -> Result<(), Box<Response<Full<Bytes>>>> {
        if headers.contains_key(header::ORIGIN) {
            return Err(Box::new(text(
                StatusCode::FORBIDDEN,
                format!("{what} is not asked from a browser\n"),
            )));
        }
        let allowed = match gw.config().load().admin.authenticates() {
            true => self.authenticated,
            false => self.loopback,
        };
        if !allowed {
            return Err(Box::new(text(
                StatusCode::FORBIDDEN,
                format!("{what} needs a verified client certificate or bearer token (admin.tls.client_ca_file, admin.bearer_token_file), or, with neither configured, a caller on loopback\n"),
            )));
        }
        Ok(())
    }
}

/// What a drain call answers.
#[derive(Serialize, serde::Deserialize, Debug)]
pub struct DrainAnswer {
    /// The backend.
    pub backend: String,
    /// Whether it is drained now.
    pub drained: bool,
    /// Long-running requests it still holds (they move at `terminate.watch_moves_per_second`).
    pub long_running_requests: usize,
}

/// The backend and whether to drain it, if `path` is a drain call.
pub fn target(path: &str) -> Option<(&str, bool)> {
    let rest = path.strip_prefix("/backends/")?;
    let (name, action) = rest.rsplit_once('/')?;
    let drain = match action {
        "drain" => true,
        "undrain" => false,
        _ => return None,
    };
    (!name.is_empty()).then_some((name, drain))
}

/// Carries out a drain call for `caller`, who sent `headers`.
pub fn handle(
    gw: &Gateway,
    caller: Caller,
    headers: &http::HeaderMap,
    name: &str,
    drain: bool,
) -> Response<Full<Bytes>> {
    if let Err(refused) = caller.may_change(gw, headers, "a drain") {
        return *refused;
    }
    // Names default to `IP:PORT`; some clients escape `[::1]`'s brackets and colons.
    let name = match kubegate_wire::target::path(name) {
        Ok(n) => n.into_owned(),
        Err(_) => return text(StatusCode::BAD_REQUEST, "malformed backend name\n".into()),
    };
    // Backend names are unique across clusters (`kubegate check`).
    let found = gw
        .clusters()
        .all()
        .iter()
        .any(|c| c.pool().drain_by_operator(&name, drain));
    if !found {
        return text(
            StatusCode::NOT_FOUND,
            format!("no backend named {name:?}\n"),
        );
    }
    let long_running_requests = gw
        .clusters()
        .backends()
        .iter()
        .filter(|b| b.info().name == name)
        .map(|b| b.planes().terminate.long_running())
        .sum();
    json(&DrainAnswer {
        backend: name,
        drained: drain,
        long_running_requests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_drain_and_undrain_of_a_named_backend_are_calls() {
        assert_eq!(target("/backends/a1/drain"), Some(("a1", true)));
        assert_eq!(
            target("/backends/10.0.0.1:6443/undrain"),
            Some(("10.0.0.1:6443", false))
        );
        assert_eq!(target("/backends//drain"), None);
        assert_eq!(target("/backends/a1/restart"), None);
        assert_eq!(target("/debug/backends"), None);
    }
}
