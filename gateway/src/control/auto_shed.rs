//! `terminate.auto_shed`'s task for each cluster terminate mode serves: every second, the
//! levels troubled now and the cost table by level handed to the cluster's `AutoShed`
//! (`terminate::cluster::auto_shed`, where who is held back is decided); each change logged
//! and counted, the senders held back published for `/debug/shed`.

use crate::state::Gateway;
use crate::terminate::{auto_shed_troubled, AutoShedChange, TerminateMode, AUTO_SHED_WINDOW};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Looks at `mode`'s cluster every second until the task is ended with it: which levels are
/// troubled, who is held back; each change logged and counted.
pub async fn keep(gw: Arc<Gateway>, mode: Arc<TerminateMode>) {
    let cluster = mode.cluster().name().to_string();
    let metrics = &gw.metrics().terminate;
    let labels = [cluster.as_str()];
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let settings = gw.config().load().terminate.auto_shed;
        if !settings.enabled && !mode.auto_shed().any() {
            continue;
        }
        let troubled = auto_shed_troubled(&mode.upstreams(), settings.latency_bound);
        let by_level = match troubled.is_empty() {
            true => HashMap::new(),
            false => gw.costs().by_level(AUTO_SHED_WINDOW),
        };
        for change in mode.auto_shed().look(&settings, &troubled, &by_level) {
            match change {
                AutoShedChange::Began {
                    level,
                    sender,
                    cost_share,
                } => {
                    metrics.auto_shed_held_back.with_label_values(&labels).inc();
                    tracing::warn!(cluster, level = %level, sender = %sender.escape_debug(), cost_share = format!("{:.0}%", cost_share * 100.0), "auto-shed: a runaway sender of a troubled priority level held back");
                }
                AutoShedChange::Ended {
                    level,
                    sender,
                    rejected,
                } => {
                    tracing::info!(cluster, level = %level, sender = %sender.escape_debug(), rejected, "auto-shed: sender let go");
                }
            }
        }
        let held = mode.auto_shed().held();
        metrics
            .auto_shed_senders
            .with_label_values(&labels)
            .set(held.len() as i64);
        gw.shed()
            .set_auto(&cluster, held.iter().map(|h| h.shown()).collect());
    }
}
