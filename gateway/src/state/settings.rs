//! What the pool and the checkers decide with, taken from the configuration (at start and on
//! every reload).

use kubegate_config::{DrainConfig, HealthConfig};
use kubegate_health::{ProbeIntervals, ProbeSettings, Prober, ProberError, Thresholds};
use kubegate_pool::PoolSettings;
use std::time::Duration;

/// What a cluster's pool decides with, from its `health` and the gateway's `drain`.
pub fn pool_settings(health: &HealthConfig, drain: &DrainConfig) -> PoolSettings {
    PoolSettings {
        thresholds: Thresholds {
            rise: health.rise,
            fall: health.fall,
            max_rise: health.flap_damping.max_rise,
            stable_probes: probes_in(health.flap_damping.window, health.interval),
        },
        drain: drain.clone(),
        probe_interval: health.interval,
    }
}

/// What a cluster's checkers probe with, from its `health`; reads the TLS files and the
/// token now.
pub fn probe_settings(health: &HealthConfig) -> Result<ProbeSettings, ProberError> {
    Ok(ProbeSettings {
        prober: Prober::new(health)?,
        intervals: ProbeIntervals {
            interval: health.interval,
            fast_interval: health.fast_interval,
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
