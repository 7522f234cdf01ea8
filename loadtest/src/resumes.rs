//! kubegate's own figures, read from its `/metrics`: the watches it continued on another
//! replica by itself, invisible to their clients (`kubegate_watch_resumes_total`, twice a
//! second, so the plot can show when they happened), and the waits for its start-up to end.

use crate::record::Recorder;
use crate::traffic::tokio_util_like::Stop;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Polls `admin` until `stop`, recording each increase of the resume counter.
pub async fn follow(admin: SocketAddr, rec: Arc<Recorder>, stop: Stop) {
    let mut seen = None;
    while !stop.stopped() {
        if let Some(now) = metric_sum(admin, "kubegate_watch_resumes_total").await {
            let before = *seen.get_or_insert(now);
            if now > before {
                rec.gateway_resumed(now - before);
            }
            seen = Some(now);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The sum over its labels of metric family `name` (or of the series `name` begins, such as
/// `kubegate_config_reloads_total{result="failure"`), from kubegate's `/metrics` at `admin`.
pub async fn metric_sum(admin: SocketAddr, name: &str) -> Option<u64> {
    Some(Scrape::of(admin).await?.sum(name))
}

/// Waits until the sum of metric family `name` at `admin` (or of the series `name` begins)
/// reaches `n`, up to `limit`: how long it took. For figures that only grow toward `n` (ready
/// backends, versions learned) or past it (reloads counted).
pub async fn metric_reaches(
    admin: SocketAddr,
    name: &str,
    n: u64,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let start = std::time::Instant::now();
    loop {
        let now = metric_sum(admin, name).await.unwrap_or(0);
        if now >= n {
            return Ok(start.elapsed());
        }
        anyhow::ensure!(
            start.elapsed() < limit,
            "{name} is {now}, short of {n}, after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until kubegate at `admin` has finished starting: its `backends` ready in its eyes
/// and, in terminate mode, each one's version learned — over the upstream connection it then
/// keeps — so that a reading taken before any client holds what it keeps for good. (Traffic
/// passes once one backend is ready; a reading then would miss the others' connections.)
pub async fn at_rest(admin: SocketAddr, backends: usize, terminates: bool) -> anyhow::Result<()> {
    let limit = Duration::from_secs(30);
    let n = backends as u64;
    metric_reaches(admin, "kubegate_cluster_ready_backends", n, limit).await?;
    if terminates {
        metric_reaches(admin, "kubegate_backend_version_info", n, limit).await?;
    }
    Ok(())
}

/// One read of kubegate's `/metrics`, for several figures taken at the same moment.
pub struct Scrape(String);

impl Scrape {
    /// Reads `/metrics` from the admin endpoint at `admin`.
    pub async fn of(admin: SocketAddr) -> Option<Scrape> {
        metrics_text(admin).await.map(Scrape)
    }

    /// The sum over its labels of metric family `name` (or of the series `name` begins).
    pub fn sum(&self, name: &str) -> u64 {
        series(&self.0, name).map(|(_, v)| v).sum::<f64>() as u64
    }

    /// Metric family `name` by the value of its one label:
    /// `kubegate_watch_resumes_total` → `{"drained": 40, "moved": 12}`.
    pub fn by_label(&self, name: &str) -> BTreeMap<String, u64> {
        let mut by_label = BTreeMap::new();
        for (labels, v) in series(&self.0, name) {
            // `{cause="moved"}` → `moved`.
            let value = labels.split('"').nth(1).unwrap_or_default().to_string();
            *by_label.entry(value).or_insert(0) += v as u64;
        }
        by_label
    }
}

/// Counts by label as a report shows them: `drained 40, moved 12`, or `none`.
pub fn by_label_line(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(label, n)| format!("{label} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The series of `name` (or the ones `name` begins) in `text`: their labels and value.
fn series<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |l| {
        let rest = l.strip_prefix(name)?;
        if !rest.starts_with(['{', '}', ',', ' ']) {
            return None;
        }
        let (labels, value) = rest.rsplit_once(' ')?;
        Some((labels, value.parse().ok()?))
    })
}

/// `/metrics` of the admin endpoint at `admin`, whatever it answered.
async fn metrics_text(admin: SocketAddr) -> Option<String> {
    crate::loopback::get(admin, "/metrics")
        .await
        .map(|(_, body)| body)
}
