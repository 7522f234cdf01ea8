//! The gateway's parts, each with its own job: the running configuration, the backend pool
//! (with the data planes' per-backend state), the lifecycle, and the metrics. Nothing here
//! decides a backend's state (the pool does) or carries traffic (the data planes do).

use crate::events::MetricEvents;
use crate::lifecycle::{Lifecycle, Phase};
use crate::metrics::Metrics;
use crate::planes::{Planes, Pool};
use crate::running::RunningConfig;
use crate::terminate::TerminateMode;
use kubegate_config::Config;
use kubegate_health::{ProbeIntervals, ProbeSettings, Prober, ProberError, Thresholds};
use kubegate_pool::PoolSettings;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The gateway's shared state.
pub struct Gateway {
    config: RunningConfig,
    pool: Arc<Pool>,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    terminate: Option<TerminateMode>,
}

impl Gateway {
    /// A gateway for `config` (read from `path`) with no backends started yet (see
    /// [`Gateway::start_backends`]); `terminate` when a listener terminates TLS; `accepting`
    /// unless it takes over from a running predecessor.
    pub fn new(
        config: Config,
        path: PathBuf,
        probes: ProbeSettings,
        terminate: Option<TerminateMode>,
        accepting: bool,
    ) -> Arc<Gateway> {
        let metrics = Arc::new(Metrics::new());
        metrics
            .build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let lifecycle = Arc::new(Lifecycle::new(metrics.clone(), accepting));
        let events = Arc::new(MetricEvents::new(metrics.clone(), lifecycle.clone()));
        let planes_metrics = metrics.clone();
        let pool = Pool::new(pool_settings(&config), Some(probes), events, move |name| {
            Planes::new(planes_metrics.clone(), name)
        });
        Arc::new(Gateway {
            config: RunningConfig::new(config, path),
            pool,
            lifecycle,
            metrics,
            terminate,
        })
    }

    /// Terminate mode's shared state, when a listener terminates TLS.
    pub fn terminate(&self) -> Option<&TerminateMode> {
        self.terminate.as_ref()
    }

    /// The running configuration.
    pub fn config(&self) -> &RunningConfig {
        &self.config
    }

    /// The backends.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Every metric.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The gateway's phase.
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }

    /// Creates the configured backends and starts their checkers. Must run inside the runtime
    /// that is to carry the health checks.
    pub fn start_backends(&self) {
        let config = self.config.load_full();
        for spec in &config.backends {
            self.pool.add(spec);
        }
        self.metrics
            .backends_configured
            .set(config.backends.len() as i64);
        self.pool.rebuild_routing();
    }

    /// Moves the lifecycle forward and republishes readiness.
    pub fn advance(&self, phase: Phase) {
        if self.lifecycle.advance(phase) {
            self.metrics.ready.set(self.ready().is_ok() as i64);
        }
    }

    /// Ready to take traffic: serving, with at least one ready backend.
    pub fn ready(&self) -> Result<(), &'static str> {
        self.lifecycle.readiness(self.pool.routing().ready.len())
    }
}

/// What the pool decides with, from `config`.
pub fn pool_settings(config: &Config) -> PoolSettings {
    let health = &config.health;
    PoolSettings {
        thresholds: Thresholds {
            rise: health.rise,
            fall: health.fall,
            max_rise: health.flap_damping.max_rise,
            stable_probes: probes_in(health.flap_damping.window, health.interval),
        },
        drain: config.drain.clone(),
    }
}

/// What checkers probe with, from `config`; reads the TLS files and the token now.
pub fn probe_settings(config: &Config) -> Result<ProbeSettings, ProberError> {
    Ok(ProbeSettings {
        prober: Prober::new(&config.health)?,
        intervals: ProbeIntervals {
            interval: config.health.interval,
            fast_interval: config.health.fast_interval,
        },
    })
}

/// How many probes at `interval` fit in `window` (at least one).
fn probes_in(window: Duration, interval: Duration) -> u32 {
    let n = window.as_secs_f64() / interval.as_secs_f64().max(1e-3);
    (n.ceil() as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_damping_window_is_counted_in_probes() {
        assert_eq!(
            probes_in(Duration::from_secs(60), Duration::from_secs(1)),
            60
        );
        assert_eq!(
            probes_in(Duration::from_secs(1), Duration::from_millis(300)),
            4
        );
        assert_eq!(probes_in(Duration::ZERO, Duration::from_secs(1)), 1);
    }
}
