//! Whether each ambiguous write was applied, asked of the store through one replica directly
//! (no gateway in between): a create by its unique name, a lease renewal by the write id it
//! carried, looked for in the lease's whole history (a watch from the first revision; the
//! run's etcd never compacts).

use crate::client::Client;
use crate::control_plane::ControlPlane;
use crate::record::Write;
use crate::traffic::{NAMESPACE, WRITE_ANNOTATION};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashSet;

/// Ambiguous writes and what became of them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AmbiguousWrites {
    /// Writes whose failure left the client unable to tell whether they were applied.
    pub total: u64,
    /// Of those, found in the store.
    pub applied: u64,
    /// Of those, not found.
    pub not_applied: u64,
}

/// Looks every write up on the first ready replica.
pub async fn ambiguous(cp: &ControlPlane, writes: &[Write]) -> anyhow::Result<AmbiguousWrites> {
    let mut out = AmbiguousWrites {
        total: writes.len() as u64,
        ..Default::default()
    };
    if writes.is_empty() {
        return Ok(out);
    }
    let mut client = None;
    for addr in cp.addresses() {
        if let Ok(c) = Client::connect(addr, cp.tls(), true).await {
            client = Some(c);
            break;
        }
    }
    let mut c = client.ok_or_else(|| anyhow::anyhow!("no replica to check writes on"))?;
    let renewals = applied_renewals(&mut c).await?;
    for w in writes {
        let applied = match w {
            Write::Create { name } => {
                let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps/{name}");
                let get = ("GET", path.as_str(), None);
                let what = format!("looking up {name}");
                c.expect(get, &[200, 404], &what).await?.status == 200
            }
            Write::LeaseRenewal { write_id, .. } => renewals.contains(write_id),
        };
        if applied {
            out.applied += 1;
        } else {
            out.not_applied += 1;
        }
    }
    Ok(out)
}

/// The write ids of every lease update in the store's history.
async fn applied_renewals(c: &mut Client) -> anyhow::Result<HashSet<String>> {
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases?watch=1&resourceVersion=1&timeoutSeconds=2"
    );
    let get = ("GET", path.as_str(), None);
    let r = c.expect(get, &[200], "reading lease history").await?;
    let mut ids = HashSet::new();
    for line in r.body.split(|b| *b == b'\n') {
        let Ok(ev) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        anyhow::ensure!(ev["type"] != "ERROR", "reading lease history: {ev}");
        if let Some(id) = ev["object"]["metadata"]["annotations"][WRITE_ANNOTATION].as_str() {
            ids.insert(id.to_string());
        }
    }
    Ok(ids)
}
