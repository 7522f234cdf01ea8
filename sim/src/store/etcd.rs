//! A store on a real etcd, through etcd's JSON gateway (`/v3/kv/*`, `/v3/watch`).
//!
//! Why the gateway and not gRPC: it needs no `protoc` and no generated code, every request is
//! one HTTP POST a reader can follow with curl, and on loopback its cost does not matter for a
//! simulator. Watches are the gateway's newline-delimited JSON stream.

use super::contract::{EventStream, ReadFrom, Store, StoreError, StoreEvent, StoreResult, Stored};
use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::mpsc;

/// A store backed by etcd at one or more endpoints (`http://127.0.0.1:2379`).
pub struct EtcdStore {
    endpoints: Vec<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl EtcdStore {
    /// Uses `endpoints` (tried in order on connection errors).
    pub fn new(endpoints: Vec<String>) -> EtcdStore {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        connector.set_nodelay(true);
        EtcdStore {
            endpoints,
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    async fn post(&self, path: &str, body: &Value) -> StoreResult<Value> {
        let mut last = String::from("no etcd endpoint");
        for endpoint in &self.endpoints {
            match self.post_to(endpoint, path, body).await {
                Ok(v) => return Ok(v),
                Err(e) => last = e,
            }
        }
        Err(StoreError::Unavailable(last))
    }

    async fn post_to(&self, endpoint: &str, path: &str, body: &Value) -> Result<Value, String> {
        let req = http::Request::post(format!("{endpoint}{path}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let fut = async {
            // As the apiserver's etcd client (gRPC) words a member it cannot reach: what the
            // apiserver then passes on in its 500.
            let resp = self.client.request(req).await.map_err(|e| {
                format!("rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: {e}\"")
            })?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if !status.is_success() {
                return Err(grpc_error(&bytes).unwrap_or_else(|| {
                    format!("etcd {path}: {status}: {}", String::from_utf8_lossy(&bytes))
                }));
            }
            serde_json::from_slice(&bytes).map_err(|e| e.to_string())
        };
        tokio::time::timeout(Duration::from_secs(5), fut)
            .await
            .map_err(|_| {
                "rpc error: code = DeadlineExceeded desc = context deadline exceeded".to_string()
            })?
    }

    async fn txn(&self, body: Value) -> StoreResult<Value> {
        self.post("/v3/kv/txn", &body).await
    }
}

/// How etcd's gRPC gateway words a read of a compacted revision (`rpctypes.ErrCompacted`).
const COMPACTED: &str =
    "code = OutOfRange desc = etcdserver: mvcc: required revision has been compacted";

fn b64(s: &[u8]) -> String {
    B64.encode(s)
}

/// The smallest key greater than every key with this prefix.
fn prefix_end(prefix: &str) -> String {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return b64(&end);
        }
    }
    b64(&[0])
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn kv(v: &Value) -> Stored {
    let decode = |f: &str| {
        v.get(f)
            .and_then(Value::as_str)
            .and_then(|s| B64.decode(s).ok())
            .unwrap_or_default()
    };
    Stored {
        key: String::from_utf8_lossy(&decode("key")).into_owned(),
        value: decode("value"),
        mod_revision: int(&v["mod_revision"]),
    }
}

/// The keys a range answer holds.
fn kvs(range: &Value) -> Vec<Stored> {
    range["kvs"]
        .as_array()
        .map(|kvs| kvs.iter().map(kv).collect())
        .unwrap_or_default()
}

fn header_revision(v: &Value) -> i64 {
    int(&v["header"]["revision"])
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str) -> StoreResult<Stored> {
        let r = self
            .post("/v3/kv/range", &json!({"key": b64(key.as_bytes())}))
            .await?;
        r["kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .map(kv)
            .ok_or(StoreError::NotFound)
    }

    async fn list(&self, prefix: &str) -> StoreResult<(Vec<Stored>, i64)> {
        let r = self
            .post(
                "/v3/kv/range",
                &json!({"key": b64(prefix.as_bytes()), "range_end": prefix_end(prefix)}),
            )
            .await?;
        Ok((kvs(&r), header_revision(&r)))
    }

    async fn list_at(&self, prefix: &str, revision: i64) -> StoreResult<(Vec<Stored>, ReadFrom)> {
        let range = json!({
            "key": b64(prefix.as_bytes()),
            "range_end": prefix_end(prefix),
            "revision": revision.to_string(),
        });
        match self.post("/v3/kv/range", &range).await {
            Ok(r) => Ok((kvs(&r), ReadFrom::Store)),
            // etcd's `ErrCompacted` (mvcc: required revision has been compacted), as its gRPC
            // gateway words it: code OutOfRange.
            Err(StoreError::Unavailable(why)) if why.ends_with(COMPACTED) => {
                Err(StoreError::Compacted {
                    requested: revision,
                    compacted: revision + 1,
                })
            }
            Err(e) => Err(e),
        }
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> StoreResult<i64> {
        let k = b64(key.as_bytes());
        let r = self
            .txn(json!({
                "compare": [{"target": "CREATE", "key": k, "create_revision": "0"}],
                "success": [{"request_put": {"key": k, "value": b64(&value)}}],
            }))
            .await?;
        if r["succeeded"].as_bool() == Some(true) {
            Ok(header_revision(&r))
        } else {
            Err(StoreError::AlreadyExists)
        }
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected: Option<i64>) -> StoreResult<i64> {
        let k = b64(key.as_bytes());
        let compare = match expected {
            Some(rev) => json!([{"target": "MOD", "key": k, "mod_revision": rev.to_string()}]),
            None => {
                json!([{"target": "CREATE", "result": "GREATER", "key": k, "create_revision": "0"}])
            }
        };
        let r = self
            .txn(json!({
                "compare": compare,
                "success": [{"request_put": {"key": k, "value": b64(&value)}}],
                "failure": [{"request_range": {"key": k}}],
            }))
            .await?;
        if r["succeeded"].as_bool() == Some(true) {
            return Ok(header_revision(&r));
        }
        let current = r["responses"][0]["response_range"]["kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .map(kv);
        match current {
            Some(c) => Err(StoreError::Conflict(c.mod_revision)),
            None => Err(StoreError::NotFound),
        }
    }

    async fn delete(&self, key: &str) -> StoreResult<(Stored, i64)> {
        let r = self
            .post(
                "/v3/kv/deleterange",
                &json!({"key": b64(key.as_bytes()), "prev_kv": true}),
            )
            .await?;
        let prev = r["prev_kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .map(kv)
            .ok_or(StoreError::NotFound)?;
        Ok((prev, header_revision(&r)))
    }

    async fn watch(&self, prefix: &str, after: i64) -> StoreResult<EventStream> {
        let body = json!({"create_request": {
            "key": b64(prefix.as_bytes()),
            "range_end": prefix_end(prefix),
            "start_revision": (after + 1).to_string(),
            "prev_kv": true,
        }});
        let mut last_error = String::new();
        for endpoint in &self.endpoints {
            let req = http::Request::post(format!("{endpoint}/v3/watch"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .expect("valid request");
            match self.client.request(req).await {
                Ok(resp) if resp.status().is_success() => {
                    return stream_events(resp.into_body(), after).await;
                }
                Ok(resp) => last_error = format!("etcd watch: {}", resp.status()),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(StoreError::Unavailable(last_error))
    }

    async fn revision(&self) -> StoreResult<i64> {
        let r = self
            .post(
                "/v3/kv/range",
                &json!({"key": b64(b"/"), "count_only": true}),
            )
            .await?;
        Ok(header_revision(&r))
    }
}

/// Reads the gateway's JSON lines; the first message says whether the watch was created or
/// its start revision was compacted.
async fn stream_events(mut body: hyper::body::Incoming, after: i64) -> StoreResult<EventStream> {
    let mut buf = BytesMut::new();
    // The creation message (or an immediate cancel for a compacted revision).
    let first = next_message(&mut buf, &mut body)
        .await
        .ok_or_else(|| StoreError::Unavailable("etcd watch ended at once".into()))?;
    let compact = int(&first["result"]["compact_revision"]);
    if compact > 0 {
        return Err(StoreError::Compacted {
            requested: after,
            compacted: compact,
        });
    }
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let mut pending = Some(first);
        loop {
            let msg = match pending.take() {
                Some(m) => m,
                None => match next_message(&mut buf, &mut body).await {
                    Some(m) => m,
                    None => {
                        let _ = tx
                            .send(Err(StoreError::Unavailable(
                                "etcd watch stream ended".into(),
                            )))
                            .await;
                        return;
                    }
                },
            };
            let result = &msg["result"];
            let compact = int(&result["compact_revision"]);
            if compact > 0 {
                let _ = tx
                    .send(Err(StoreError::Compacted {
                        requested: after,
                        compacted: compact,
                    }))
                    .await;
                return;
            }
            for e in result["events"].as_array().into_iter().flatten() {
                let event = if e["type"].as_str() == Some("DELETE") {
                    let mut prev = kv(&e["prev_kv"]);
                    let deleted = kv(&e["kv"]);
                    if prev.key.is_empty() {
                        prev.key = deleted.key.clone();
                    }
                    StoreEvent::Delete {
                        prev,
                        revision: deleted.mod_revision,
                    }
                } else {
                    let kv = kv(&e["kv"]);
                    let created = int(&e["kv"]["version"]) == 1;
                    StoreEvent::Put { kv, created }
                };
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(EventStream::new(rx))
}

/// The next JSON message of the gateway's stream, or `None` when the stream ended.
async fn next_message(buf: &mut BytesMut, body: &mut hyper::body::Incoming) -> Option<Value> {
    loop {
        if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line = buf.split_to(pos + 1);
            if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                return Some(v);
            }
            continue;
        }
        match body.frame().await? {
            Ok(frame) => {
                if let Ok(mut data) = frame.into_data() {
                    while data.has_remaining() {
                        let chunk = data.chunk();
                        buf.extend_from_slice(chunk);
                        let n = chunk.len();
                        data.advance(n);
                    }
                }
            }
            Err(_) => return None,
        }
    }
}

/// A gRPC error etcd's JSON gateway answered (`{"code": 14, "message": "..."}`), worded as the
/// apiserver's etcd client words it, which the apiserver passes on in its 500: `rpc error:
/// code = Unavailable desc = etcdserver: leader changed`.
fn grpc_error(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let code = match v["code"].as_u64()? {
        1 => "Canceled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        16 => "Unauthenticated",
        _ => return None,
    };
    let message = v["message"].as_str().unwrap_or_default();
    Some(format!("rpc error: code = {code} desc = {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcds_gateway_errors_are_worded_as_the_apiservers_grpc_client_words_them() {
        let refused = br#"{"error":"connection error","message":"connection error: desc = \"transport: Error while dialing dial tcp 127.0.0.1:2379: connect: connection refused\"","code":14}"#;
        assert_eq!(
            grpc_error(refused).unwrap(),
            r#"rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing dial tcp 127.0.0.1:2379: connect: connection refused""#
        );
        let leader = br#"{"message":"etcdserver: leader changed","code":14}"#;
        assert_eq!(
            grpc_error(leader).unwrap(),
            "rpc error: code = Unavailable desc = etcdserver: leader changed"
        );
        assert_eq!(grpc_error(b"not json"), None);
        assert_eq!(grpc_error(br#"{"code":99}"#), None);
    }
}
