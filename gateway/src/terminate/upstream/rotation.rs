//! Upstream connections that present a replaced front-proxy certificate. The apiserver
//! verifies a client certificate at every request, not at the handshake, so a connection kept
//! open past its certificate's expiry answers 401 to everything — and a busy one (carrying
//! watches, it is never idle) is never closed for idleness. Once the certificate is replaced
//! (its files, or a reload), every connection presenting the old one takes no new stream and
//! closes, with GOAWAY, once its streams are done; those still open shortly before the old one
//! expires are closed, and the watches on them continue on connections that present the new
//! one (`watch::continuity`). One swept again at that deadline catches a connection dialed
//! with the old certificate while it was being replaced.

use crate::state::{Kind, Pool, Retired};
use crate::terminate::upstream::tls::Presented;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Longest that connections presenting a replaced front-proxy certificate stay open: their
/// ordinary requests end within the apiserver's `--request-timeout` (1 min); watches move.
const MAX_RETIRED: Duration = Duration::from_secs(600);
/// How long before the replaced certificate expires its connections are closed at the latest.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// How long they stay when its expiry is not known.
const RETIRED_UNKNOWN_EXPIRY: Duration = Duration::from_secs(60);

/// `replaced` gave way to `current` (none: no identity presented any more) for `cluster`'s
/// backends in `pool`: connections that present anything else than `current` are retired now
/// and closed by [`close_within`] of `replaced`'s expiry.
pub fn retire_presented(
    pool: &Arc<Pool>,
    cluster: &str,
    replaced: &Presented,
    current: Option<&Presented>,
) {
    let current = current.map_or(0, |p| p.fingerprint);
    let retire = move |pool: &Pool| -> Vec<Retired> {
        pool.backends()
            .iter()
            .map(|b| b.planes().terminate.retire(Kind::WithIdentity, current))
            .filter(|r| !r.is_empty())
            .collect()
    };
    let retired = retire(pool);
    let n: usize = retired.iter().map(Retired::len).sum();
    let within = close_within(replaced.expires, SystemTime::now());
    let cluster = cluster.to_string();
    tracing::info!(cluster = %cluster, connections = n, close_within_s = within.as_secs(), "front-proxy certificate replaced: upstream connections that present the old one take no new request, and those still open are closed before it expires");
    let pool = pool.clone();
    tokio::spawn(async move {
        tokio::time::sleep(within).await;
        // With those dialed with the old certificate as it was being replaced.
        let late = retire(&pool);
        let closed: usize = retired.iter().chain(&late).map(Retired::close).sum();
        if closed > 0 {
            tracing::info!(cluster = %cluster, connections = closed, "closed upstream connections that still presented the replaced front-proxy certificate");
        }
    });
}

/// How long connections that present a certificate expiring at `expires` may stay open after
/// it was replaced at `now`: until [`EXPIRY_MARGIN`] before its expiry, at most
/// [`MAX_RETIRED`].
fn close_within(expires: Option<SystemTime>, now: SystemTime) -> Duration {
    match expires {
        Some(at) => at
            .duration_since(now)
            .unwrap_or_default()
            .saturating_sub(EXPIRY_MARGIN)
            .min(MAX_RETIRED),
        None => RETIRED_UNKNOWN_EXPIRY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_presenting_a_replaced_certificate_close_before_it_expires() {
        let now = SystemTime::now();
        let at = |s: u64| Some(now + Duration::from_secs(s));
        assert_eq!(close_within(at(90), now), Duration::from_secs(60));
        assert_eq!(close_within(at(20), now), Duration::ZERO);
        assert_eq!(
            close_within(Some(now - Duration::from_secs(5)), now),
            Duration::ZERO,
            "already expired: at once"
        );
        assert_eq!(close_within(at(30 * 86_400), now), MAX_RETIRED);
        assert_eq!(close_within(None, now), RETIRED_UNKNOWN_EXPIRY);
    }
}
