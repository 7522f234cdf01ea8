//! The LIST and WATCH requests the replicas received, followed across their restarts: a
//! restarted simulator counts from zero again, so the counts are read twice a second and each
//! replica's total is what it counted before each restart plus what it counts now.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// Every replica's running totals.
pub struct ReplicaCounts {
    ports: Vec<u16>,
    replicas: Mutex<Vec<Totals>>,
    /// Each replica's open watches at the last read.
    open: Mutex<Vec<i64>>,
}

#[derive(Default, Clone, Copy)]
struct Totals {
    /// What the current process reported last.
    last: (u64, u64),
    /// What earlier processes of the replica counted.
    before_restarts: (u64, u64),
}

impl Totals {
    fn sum(&self) -> (u64, u64) {
        (
            self.before_restarts.0 + self.last.0,
            self.before_restarts.1 + self.last.1,
        )
    }
}

impl ReplicaCounts {
    /// Counts for the replicas behind these fault ports.
    pub fn new(ports: Vec<u16>) -> ReplicaCounts {
        let replicas = Mutex::new(vec![Totals::default(); ports.len()]);
        let open = Mutex::new(vec![-1; ports.len()]);
        ReplicaCounts {
            ports,
            replicas,
            open,
        }
    }

    /// Reads every replica until `stop`.
    pub async fn follow(self: std::sync::Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            self.poll().await;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Reads every replica once; returns each one's open watches (-1: it did not answer).
    pub async fn poll(&self) -> Vec<i64> {
        let mut open = Vec::new();
        for (i, port) in self.ports.iter().enumerate() {
            let Some(state) = state(*port).await else {
                open.push(-1);
                continue;
            };
            let now = (
                state["lists_received"].as_u64().unwrap_or(0),
                state["watches_received"].as_u64().unwrap_or(0),
            );
            let mut replicas = self.replicas.lock().unwrap_or_else(|e| e.into_inner());
            let t = &mut replicas[i];
            if now.0 < t.last.0 || now.1 < t.last.1 {
                // A new process: what the old one counted is kept.
                t.before_restarts = (
                    t.before_restarts.0 + t.last.0,
                    t.before_restarts.1 + t.last.1,
                );
            }
            t.last = now;
            open.push(state["watches"].as_i64().unwrap_or(-1));
        }
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = open.clone();
        open
    }

    /// Each replica's open watches at the last read (-1: it did not answer).
    pub fn open(&self) -> Vec<i64> {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// LISTs and WATCHes received by all replicas so far.
    pub fn totals(&self) -> (u64, u64) {
        self.replicas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(Totals::sum)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }
}

/// The fault port's `/state` of the replica at `port`.
pub async fn state(port: u16) -> Option<serde_json::Value> {
    crate::loopback::get_json(SocketAddr::from(([127, 0, 0, 1], port)), "/state").await
}
