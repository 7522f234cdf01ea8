//! What a replica's flow control shows of itself: the `apiserver_flowcontrol_*` metrics
//! (`/metrics`) and `/debug/api_priority_and_fairness/dump_priority_levels`, as the apiserver
//! writes them.

use super::level::{Level, RejectReason};
use std::fmt::Write;
use std::sync::Arc;

/// The `apiserver_flowcontrol_*` families of `levels`, in Prometheus' text format.
pub fn metrics(levels: &[Arc<Level>]) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in rows {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let reports: Vec<_> = levels.iter().map(|l| (l, l.report())).collect();
    let per_schema = |f: &dyn Fn(&super::level::SchemaCounts) -> String| {
        reports
            .iter()
            .flat_map(|(l, r)| {
                r.by_schema.iter().map(move |(schema, c)| {
                    (
                        format!(r#"flow_schema="{schema}",priority_level="{}""#, l.spec.name),
                        f(c),
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        "apiserver_flowcontrol_nominal_limit_seats",
        "gauge",
        "Nominal number of execution seats configured for each priority level",
        reports
            .iter()
            .filter(|(l, _)| !l.spec.exempt)
            .map(|(l, _)| {
                (
                    format!(r#"priority_level="{}""#, l.spec.name),
                    l.seats.to_string(),
                )
            })
            .collect(),
    );
    family(
        "apiserver_flowcontrol_current_executing_seats",
        "gauge",
        "Concurrency (number of seats) occupied by the currently executing requests",
        per_schema(&|c| c.executing_seats.to_string()),
    );
    family(
        "apiserver_flowcontrol_current_inqueue_requests",
        "gauge",
        "Number of requests currently pending in queues",
        per_schema(&|c| c.in_queue.to_string()),
    );
    family(
        "apiserver_flowcontrol_dispatched_requests_total",
        "counter",
        "Number of requests executed by API Priority and Fairness subsystem",
        per_schema(&|c| c.dispatched.to_string()),
    );
    let rejected = reports
        .iter()
        .flat_map(|(l, r)| {
            r.by_schema.iter().flat_map(move |(schema, c)| {
                c.rejected.iter().map(move |(reason, n)| {
                    (
                        format!(
                            r#"flow_schema="{schema}",priority_level="{}",reason="{}""#,
                            l.spec.name,
                            reason.as_str()
                        ),
                        n.to_string(),
                    )
                })
            })
        })
        .collect();
    family(
        "apiserver_flowcontrol_rejected_requests_total",
        "counter",
        "Number of requests rejected by API Priority and Fairness subsystem",
        rejected,
    );
    out
}

/// The debug dump of `levels`: a header row and a row per level, by name, as the
/// apiserver's tab writer aligns them.
pub fn dump_priority_levels(levels: &[Arc<Level>]) -> String {
    let mut rows = vec![[
        "PriorityLevelName",
        "ActiveQueues",
        "IsIdle",
        "IsQuiescing",
        "WaitingRequests",
        "ExecutingRequests",
        "DispatchedRequests",
        "RejectedRequests",
        "TimedoutRequests",
        "CancelledRequests",
    ]
    .map(String::from)];
    let mut levels: Vec<_> = levels.iter().collect();
    levels.sort_by_key(|l| l.spec.name);
    for l in levels {
        let r = l.report();
        let sum = |f: &dyn Fn(&super::level::SchemaCounts) -> u64| -> u64 {
            r.by_schema.values().map(f).sum()
        };
        let rejected = sum(&|c| c.rejected.values().sum());
        let timed_out = sum(&|c| c.rejected.get(&RejectReason::TimeOut).copied().unwrap_or(0));
        rows.push([
            l.spec.name.to_string(),
            r.active_queues.to_string(),
            (r.executing_requests == 0 && r.waiting == 0).to_string(),
            "false".to_string(),
            r.waiting.to_string(),
            r.executing_requests.to_string(),
            sum(&|c| c.dispatched).to_string(),
            rejected.to_string(),
            timed_out.to_string(),
            sum(&|c| c.cancelled).to_string(),
        ]);
    }
    // tabwriter(minwidth 8, padding 1), cells ending in ",".
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len() + 2)
                .max()
                .unwrap_or(0)
                .max(8)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == columns {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{:<width$}", format!("{cell},"), width = widths[c]);
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::flowcontrol::tests::{on_config_maps, someone};
    use crate::flowcontrol::{FlowControl, Work};
    use std::time::Duration;

    #[tokio::test]
    async fn the_metrics_and_the_dump_count_what_was_dispatched_and_rejected() {
        let fc = FlowControl::new(600, Duration::from_secs(15));
        let user = someone();
        let attrs = on_config_maps(&user, "get");
        let held = fc.admit(&attrs, Work::Other).await.ok().unwrap();
        fc.saturate("global-default", true, None);
        assert!(fc.admit(&attrs, Work::Other).await.is_err());
        let m = fc.metrics();
        assert!(m.contains(r#"apiserver_flowcontrol_current_executing_seats{flow_schema="global-default",priority_level="global-default"} 1"#), "{m}");
        assert!(m.contains(r#"apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",priority_level="global-default",reason="queue-full"} 1"#), "{m}");
        assert!(
            m.contains(
                r#"apiserver_flowcontrol_nominal_limit_seats{priority_level="workload-low"} 245"#
            ),
            "{m}"
        );
        drop(held);
        let dump = fc.dump_priority_levels();
        let lines: Vec<&str> = dump.lines().collect();
        assert!(lines[0].starts_with("PriorityLevelName,"), "{dump}");
        let row = lines
            .iter()
            .find(|l| l.starts_with("global-default,"))
            .unwrap();
        let cells: Vec<&str> = row.split(',').map(str::trim).collect();
        // Idle again; one dispatched, one rejected.
        assert_eq!(cells[2], "true", "{row}");
        assert_eq!(cells[6], "1", "{row}");
        assert_eq!(cells[7], "1", "{row}");
        assert_eq!(lines.len(), 1 + 8, "{dump}");
    }
}
