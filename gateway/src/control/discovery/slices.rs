//! What the `kubernetes` EndpointSlices say: the apiservers' addresses. Pure, so the rules are
//! tested without a cluster.
//!
//! Per slice: the port named `https` (or the only port), and every address of every endpoint
//! not marked `ready: false` (an apiserver's lease reconciler lists only live ones; a missing
//! condition means ready, as the API says).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

/// The apiserver addresses of one slice.
pub fn addresses(slice: &Value) -> BTreeSet<SocketAddr> {
    let ports = slice["ports"].as_array().cloned().unwrap_or_default();
    let port = ports
        .iter()
        .find(|p| p["name"] == "https")
        .or(if ports.len() == 1 {
            ports.first()
        } else {
            None
        })
        .and_then(|p| p["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok());
    let Some(port) = port else {
        return BTreeSet::new();
    };
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["conditions"]["ready"] != Value::Bool(false))
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, port))
        .collect()
}

/// The slices seen so far, by name, as a list and then watch events maintain them.
#[derive(Default)]
pub struct Slices(BTreeMap<String, BTreeSet<SocketAddr>>);

impl Slices {
    /// Starts over from a list's `items`.
    pub fn from_list(list: &Value) -> Slices {
        let mut s = Slices::default();
        for item in list["items"].as_array().into_iter().flatten() {
            s.put(item);
        }
        s
    }

    /// Applies one watch event (`ADDED`, `MODIFIED`, `DELETED`; others change nothing).
    pub fn apply(&mut self, event: &Value) {
        match event["type"].as_str() {
            Some("ADDED" | "MODIFIED") => self.put(&event["object"]),
            Some("DELETED") => {
                if let Some(name) = event["object"]["metadata"]["name"].as_str() {
                    self.0.remove(name);
                }
            }
            _ => {}
        }
    }

    fn put(&mut self, slice: &Value) {
        if let Some(name) = slice["metadata"]["name"].as_str() {
            self.0.insert(name.to_string(), addresses(slice));
        }
    }

    /// Every address of every slice.
    pub fn all(&self) -> BTreeSet<SocketAddr> {
        self.0.values().flatten().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, endpoints: Value, ports: Value) -> Value {
        json!({"metadata": {"name": name}, "endpoints": endpoints, "ports": ports})
    }

    #[test]
    fn ready_endpoints_on_the_https_port() {
        let s = slice(
            "kubernetes",
            json!([
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"]},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                {"addresses": ["not-an-ip"]},
            ]),
            json!([{"name": "metrics", "port": 9000}, {"name": "https", "port": 6443}]),
        );
        let got: Vec<String> = addresses(&s).iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["10.0.0.1:6443", "10.0.0.2:6443"]);
        // No usable port: nothing, rather than a guess.
        let s = slice(
            "x",
            json!([{"addresses": ["10.0.0.1"]}]),
            json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}]),
        );
        assert!(addresses(&s).is_empty());
    }

    #[test]
    fn a_dual_stack_services_slices_of_both_families_are_read() {
        // The EndpointSlice controller writes one slice per address family.
        let https = json!([{"name": "https", "port": 6443}]);
        let list = json!({"items": [
            slice("kubernetes-v4", json!([{"addresses": ["10.0.0.1"]}]), https.clone()),
            slice("kubernetes-v6", json!([{"addresses": ["fd00::1"]}]), https),
        ]});
        let got: Vec<String> = Slices::from_list(&list)
            .all()
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(got, ["10.0.0.1:6443", "[fd00::1]:6443"]);
    }

    #[test]
    fn watch_events_keep_the_union_of_the_slices() {
        let one = |ip: &str| json!([{"addresses": [ip]}]);
        let https = json!([{"name": "https", "port": 6443}]);
        let mut s =
            Slices::from_list(&json!({"items": [slice("a", one("10.0.0.1"), https.clone())]}));
        s.apply(&json!({"type": "ADDED", "object": slice("b", one("10.0.0.2"), https.clone())}));
        assert_eq!(s.all().len(), 2);
        s.apply(&json!({"type": "MODIFIED", "object": slice("a", one("10.0.0.3"), https.clone())}));
        s.apply(&json!({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}));
        s.apply(&json!({"type": "DELETED", "object": slice("b", one("10.0.0.2"), https)}));
        let got: Vec<String> = s.all().iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["10.0.0.3:6443"]);
    }
}
