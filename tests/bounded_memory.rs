//! What a client's own strings cost kubegate: bounded, however many distinct ones it sends
//! (`kubegate_e2e::attack`).
//!
//! 1. `distinct_long_user_agents_cost_bounded_memory` (the status page's busiest lists and
//!    the access log keep a bounded part of each).
//! 2. `the_access_logs_queue_holds_within_its_bound`: requests with a 60 KB query while
//!    standard output is blocked: what the queue keeps stays within its byte bound, and
//!    what it cannot keep is dropped and counted.

use kubegate_e2e::attack::{assert_alive, counter, measured};
use kubegate_e2e::*;

const HEAP: &str = "kubegate_heap_allocated_bytes";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_long_user_agents_cost_bounded_memory() {
    const REQUESTS: usize = 1500;
    let s = Cluster::new()
        .terminate()
        .configure(|cfg| {
            cfg.terminate.access_log.format = kubegate_config::AccessLogFormat::Json;
            cfg.terminate.access_log.max_per_second = 100_000;
        })
        .start();
    let heap0 = counter(&s.kg, HEAP);
    measured(&s, "long-user-agents", async {
        let mut conn = s.kg.connect(&s.pki, true).await.unwrap();
        for i in 0..REQUESTS {
            let agent = format!("{i:06}{}", "u".repeat(48 * 1024));
            let r = conn
                .send("GET", CONFIGMAPS, &[("User-Agent", agent.as_str())], None)
                .await
                .unwrap();
            assert_eq!(r.status, 200);
        }
    })
    .await;
    let mib = (counter(&s.kg, HEAP) - heap0) / 1024.0 / 1024.0;
    println!("FIGURE attack=long-user-agents requests={REQUESTS} heap_growth_mib={mib:.1}");
    // Kept whole they were 70 MiB (92 MiB of RSS); cut to 256 bytes, under 1 MiB.
    assert!(mib < 16.0, "kubegate's heap grew by {mib:.1} MiB");
    assert_alive(&s);
}

/// Requests whose query is 60 KB, over HTTP/1.1 and HTTP/2, while kubegate's standard output
/// is blocked (a pipe nobody reads): the access log's queue keeps at most its byte bound of
/// what its entries hold (their own copies of the target and user agent, never the decoded
/// header blocks), and what does not fit is dropped and counted. Before, an entry's weight
/// counted its path only: 2,000 such requests held 135 MB with none dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_logs_queue_holds_within_its_bound() {
    use std::os::unix::fs::OpenOptionsExt;
    const EACH: usize = 500;
    let fifo_dir = tempfile::tempdir().unwrap();
    let fifo = fifo_dir.path().join("stdout");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // The reading end, held open and never read: kubegate's writes stop once the pipe is full.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let redirect = format!("exec \"$0\" \"$@\" >{}", fifo.display());
    let s = Cluster::new()
        .terminate()
        .wrapped(&["sh", "-c", &redirect])
        .configure(|cfg| {
            cfg.terminate.access_log.format = kubegate_config::AccessLogFormat::Json;
            cfg.terminate.access_log.max_per_second = 100_000;
            cfg.terminate.max_header_list_bytes = 128 * 1024;
        })
        .start();
    let query = format!("{CONFIGMAPS}?x={}", "q".repeat(60_000));
    let heap0 = counter(&s.kg, HEAP);
    let mut tasks = Vec::new();
    for h2 in [true, false, true, false] {
        let mut conn = s.kg.connect(&s.pki, h2).await.unwrap();
        let query = query.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                conn.get(&query).await.expect("an answer");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mib = (counter(&s.kg, HEAP) - heap0) / 1024.0 / 1024.0;
    let dropped = counter(&s.kg, "kubegate_access_log_dropped_total");
    println!(
        "FIGURE attack=access-log-queue requests={} heap_growth_mib={mib:.1} dropped={dropped}",
        4 * EACH
    );
    // The queue's 4 MiB, what the writer took before the pipe filled, and the connections.
    assert!(mib < 16.0, "kubegate's heap grew by {mib:.1} MiB");
    // Kept: the lines the pipe took (64 KiB of ~300-byte lines), the queue's 4 MiB of 60 KB
    // entries and one batch the writer holds; everything else is dropped (before, none was).
    assert!(
        dropped >= (4 * EACH) as f64 / 2.0,
        "only {dropped} of {} lines were dropped",
        4 * EACH
    );
    assert_alive(&s);
}
