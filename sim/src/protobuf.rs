//! Kubernetes' protobuf encoding, which kubectl and client-go send for built-in types
//! (`Content-Type: application/vnd.kubernetes.protobuf`) and which controllers and kubelets ask
//! watches to be answered in (`Accept: application/vnd.kubernetes.protobuf;stream=watch`).
//!
//! An object is the magic `k8s\0` followed by a `runtime.Unknown` message whose `raw` field is
//! the object. A watch stream is a sequence of frames, each a 4-byte big-endian length and a raw
//! (unwrapped) `metav1.WatchEvent`: `type` (1) and `object` (2, a `RawExtension` whose `raw` (1) is
//! the wrapped object). Only the fields of ConfigMap, Lease, Status and ObjectMeta the simulator
//! stores are read and written (and an Eviction's name and delete options read); others are
//! skipped by wire type, as protobuf intends.

use serde_json::{json, Map, Value};

const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf body into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let unknown = body
        .strip_prefix(MAGIC)
        .ok_or("protobuf body without the k8s magic prefix")?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for field in Fields::new(unknown) {
        match field? {
            (1, Wire::Bytes(type_meta)) => {
                for f in Fields::new(type_meta) {
                    match f? {
                        (1, Wire::Bytes(v)) => api_version = text(v)?,
                        (2, Wire::Bytes(v)) => kind = text(v)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(r)) => raw = r,
            _ => {}
        }
    }
    let mut obj = match kind.as_str() {
        "ConfigMap" => config_map(raw)?,
        "Lease" => lease(raw)?,
        "Eviction" => eviction(raw)?,
        other => {
            return Err(format!(
                "protobuf decoding of kind {other:?} is not supported"
            ))
        }
    };
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

/// Whether [`encode`] can write objects of `kind`.
pub fn encodes(kind: &str) -> bool {
    matches!(kind, "ConfigMap" | "Lease")
}

/// Encodes an object of a kind [`encodes`] accepts, or a `Status`, in the protobuf envelope.
pub fn encode(obj: &Value) -> Vec<u8> {
    let kind = obj["kind"].as_str().unwrap_or("");
    let raw = match kind {
        "ConfigMap" => encode_config_map(obj),
        "Lease" => encode_lease(obj),
        _ => encode_status(obj),
    };
    let mut type_meta = Vec::new();
    put_str(
        &mut type_meta,
        1,
        obj["apiVersion"].as_str().unwrap_or("v1"),
    );
    put_str(
        &mut type_meta,
        2,
        if kind.is_empty() { "Status" } else { kind },
    );
    let mut unknown = MAGIC.to_vec();
    put_bytes(&mut unknown, 1, &type_meta);
    put_bytes(&mut unknown, 2, &raw);
    put_str(&mut unknown, 3, "");
    put_str(&mut unknown, 4, "");
    unknown
}

/// One watch frame: the length, then the `WatchEvent` carrying the encoded object.
pub fn watch_frame(event: &str, obj: &Value) -> Vec<u8> {
    let mut raw_extension = Vec::new();
    put_bytes(&mut raw_extension, 1, &encode(obj));
    let mut watch_event = Vec::new();
    put_str(&mut watch_event, 1, event);
    put_bytes(&mut watch_event, 2, &raw_extension);
    let mut frame = (watch_event.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&watch_event);
    frame
}

fn encode_config_map(obj: &Value) -> Vec<u8> {
    use base64::Engine;
    let mut out = Vec::new();
    put_bytes(&mut out, 1, &encode_meta(&obj["metadata"]));
    for (k, v) in obj["data"].as_object().into_iter().flatten() {
        put_entry(
            &mut out,
            2,
            k.as_bytes(),
            v.as_str().unwrap_or("").as_bytes(),
        );
    }
    for (k, v) in obj["binaryData"].as_object().into_iter().flatten() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or(""))
            .unwrap_or_default();
        put_entry(&mut out, 3, k.as_bytes(), &bytes);
    }
    if let Some(b) = obj["immutable"].as_bool() {
        put_varint_field(&mut out, 4, b as u64);
    }
    out
}

fn encode_lease(obj: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    put_bytes(&mut out, 1, &encode_meta(&obj["metadata"]));
    let spec = &obj["spec"];
    if spec.is_object() {
        let mut s = Vec::new();
        if let Some(h) = spec["holderIdentity"].as_str() {
            put_str(&mut s, 1, h);
        }
        if let Some(d) = spec["leaseDurationSeconds"].as_i64() {
            put_varint_field(&mut s, 2, d as u64);
        }
        for (field, key) in [(3, "acquireTime"), (4, "renewTime")] {
            if let Some(t) = spec[key]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            {
                put_bytes(&mut s, field, &encode_time(t));
            }
        }
        if let Some(n) = spec["leaseTransitions"].as_i64() {
            put_varint_field(&mut s, 5, n as u64);
        }
        put_bytes(&mut out, 2, &s);
    }
    out
}

fn encode_status(obj: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    put_bytes(&mut out, 1, &[]);
    for (field, key) in [(2, "status"), (3, "message"), (4, "reason")] {
        put_str(&mut out, field, obj[key].as_str().unwrap_or(""));
    }
    put_varint_field(&mut out, 6, obj["code"].as_i64().unwrap_or(0) as u64);
    out
}

fn encode_meta(meta: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for (field, key) in [
        (1, "name"),
        (2, "generateName"),
        (3, "namespace"),
        (5, "uid"),
        (6, "resourceVersion"),
    ] {
        put_str(&mut out, field, meta[key].as_str().unwrap_or(""));
    }
    if let Some(t) = meta["creationTimestamp"]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    {
        put_bytes(&mut out, 8, &encode_time(t));
    }
    for (field, key) in [(11, "labels"), (12, "annotations")] {
        for (k, v) in meta[key].as_object().into_iter().flatten() {
            put_entry(
                &mut out,
                field,
                k.as_bytes(),
                v.as_str().unwrap_or("").as_bytes(),
            );
        }
    }
    out
}

/// `metav1.Time` and `MicroTime`: seconds (1) and nanoseconds (2) since the epoch.
fn encode_time(t: std::time::SystemTime) -> Vec<u8> {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut out = Vec::new();
    put_varint_field(&mut out, 1, d.as_secs());
    put_varint_field(&mut out, 2, u64::from(d.subsec_nanos()));
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint_field(out: &mut Vec<u8>, field: u64, v: u64) {
    put_varint(out, field << 3);
    put_varint(out, v);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_varint(out, field << 3 | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_str(out: &mut Vec<u8>, field: u64, s: &str) {
    put_bytes(out, field, s.as_bytes());
}

fn put_entry(out: &mut Vec<u8>, field: u64, k: &[u8], v: &[u8]) {
    let mut e = Vec::new();
    put_bytes(&mut e, 1, k);
    put_bytes(&mut e, 2, v);
    put_bytes(out, field, &e);
}

fn config_map(raw: &[u8]) -> Result<Value, String> {
    let mut obj = json!({});
    let (mut data, mut binary) = (Map::new(), Map::new());
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(m)) => obj["metadata"] = object_meta(m)?,
            (2, Wire::Bytes(e)) => {
                let (k, v) = entry(e)?;
                data.insert(text(k)?, json!(text(v)?));
            }
            (3, Wire::Bytes(e)) => {
                use base64::Engine;
                let (k, v) = entry(e)?;
                binary.insert(
                    text(k)?,
                    json!(base64::engine::general_purpose::STANDARD.encode(v)),
                );
            }
            (4, Wire::Varint(b)) => obj["immutable"] = json!(b != 0),
            _ => {}
        }
    }
    if !data.is_empty() {
        obj["data"] = Value::Object(data);
    }
    if !binary.is_empty() {
        obj["binaryData"] = Value::Object(binary);
    }
    Ok(obj)
}

fn lease(raw: &[u8]) -> Result<Value, String> {
    let mut obj = json!({});
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(m)) => obj["metadata"] = object_meta(m)?,
            (2, Wire::Bytes(s)) => {
                let mut spec = Map::new();
                for f in Fields::new(s) {
                    match f? {
                        (1, Wire::Bytes(v)) => {
                            spec.insert("holderIdentity".into(), json!(text(v)?));
                        }
                        (2, Wire::Varint(n)) => {
                            spec.insert("leaseDurationSeconds".into(), json!(n as i32));
                        }
                        (3, Wire::Bytes(t)) => {
                            spec.insert("acquireTime".into(), json!(micro_time(t)?));
                        }
                        (4, Wire::Bytes(t)) => {
                            spec.insert("renewTime".into(), json!(micro_time(t)?));
                        }
                        (5, Wire::Varint(n)) => {
                            spec.insert("leaseTransitions".into(), json!(n as i32));
                        }
                        _ => {}
                    }
                }
                obj["spec"] = Value::Object(spec);
            }
            _ => {}
        }
    }
    Ok(obj)
}

/// `policy/v1` `Eviction` (kubectl's and client-go's `Evict` send it as protobuf): metadata
/// (1) and `deleteOptions` (2), of which the eviction reads `dryRun` (5) and the
/// preconditions (2: `uid` 1, `resourceVersion` 2).
fn eviction(raw: &[u8]) -> Result<Value, String> {
    let mut obj = json!({});
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(m)) => obj["metadata"] = object_meta(m)?,
            (2, Wire::Bytes(d)) => {
                let mut options = Map::new();
                let mut dry_run = Vec::new();
                for f in Fields::new(d) {
                    match f? {
                        (2, Wire::Bytes(p)) => {
                            let mut pre = Map::new();
                            for pf in Fields::new(p) {
                                match pf? {
                                    (1, Wire::Bytes(v)) => insert_text(&mut pre, "uid", v)?,
                                    (2, Wire::Bytes(v)) => {
                                        insert_text(&mut pre, "resourceVersion", v)?
                                    }
                                    _ => {}
                                }
                            }
                            options.insert("preconditions".into(), Value::Object(pre));
                        }
                        (5, Wire::Bytes(v)) => dry_run.push(json!(text(v)?)),
                        _ => {}
                    }
                }
                if !dry_run.is_empty() {
                    options.insert("dryRun".into(), Value::Array(dry_run));
                }
                obj["deleteOptions"] = Value::Object(options);
            }
            _ => {}
        }
    }
    Ok(obj)
}

fn object_meta(raw: &[u8]) -> Result<Value, String> {
    let mut meta = Map::new();
    let (mut labels, mut annotations, mut finalizers) = (Map::new(), Map::new(), Vec::new());
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(v)) => {
                insert_text(&mut meta, "name", v)?;
            }
            (2, Wire::Bytes(v)) => {
                insert_text(&mut meta, "generateName", v)?;
            }
            (3, Wire::Bytes(v)) => {
                insert_text(&mut meta, "namespace", v)?;
            }
            (5, Wire::Bytes(v)) => {
                insert_text(&mut meta, "uid", v)?;
            }
            (6, Wire::Bytes(v)) => {
                insert_text(&mut meta, "resourceVersion", v)?;
            }
            (11, Wire::Bytes(e)) => {
                let (k, v) = entry(e)?;
                labels.insert(text(k)?, json!(text(v)?));
            }
            (12, Wire::Bytes(e)) => {
                let (k, v) = entry(e)?;
                annotations.insert(text(k)?, json!(text(v)?));
            }
            (14, Wire::Bytes(v)) => finalizers.push(json!(text(v)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(meta))
}

/// Sets a string field; Kubernetes' protobuf writes empty strings, JSON omits them.
fn insert_text(meta: &mut Map<String, Value>, key: &str, v: &[u8]) -> Result<(), String> {
    let t = text(v)?;
    if !t.is_empty() {
        meta.insert(key.into(), json!(t));
    }
    Ok(())
}

/// `metav1.MicroTime` → RFC 3339 with microseconds.
fn micro_time(raw: &[u8]) -> Result<String, String> {
    let (mut secs, mut nanos) = (0i64, 0i64);
    for f in Fields::new(raw) {
        match f? {
            (1, Wire::Varint(s)) => secs = s as i64,
            (2, Wire::Varint(n)) => nanos = n as i64,
            _ => {}
        }
    }
    let t = std::time::UNIX_EPOCH
        + std::time::Duration::from_secs(secs.max(0) as u64)
        + std::time::Duration::from_nanos(nanos.max(0) as u64);
    Ok(humantime::format_rfc3339_micros(t).to_string())
}

/// A map entry message: key (1) and value (2).
fn entry(raw: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let (mut k, mut v): (&[u8], &[u8]) = (&[], &[]);
    for f in Fields::new(raw) {
        match f? {
            (1, Wire::Bytes(b)) => k = b,
            (2, Wire::Bytes(b)) => v = b,
            _ => {}
        }
    }
    Ok((k, v))
}

fn text(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "invalid UTF-8 in a protobuf string".into())
}

/// A field's payload by wire type.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Iterates the fields of one message.
struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Fields<'a> {
        Fields { buf }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.buf.split_first().ok_or("truncated protobuf varint")?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("protobuf varint too long".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.buf.len() {
            return Err("truncated protobuf field".into());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let field = (|| {
            let key = self.varint()?;
            let wire = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Wire::Fixed
                }
                2 => {
                    let n = self.varint()? as usize;
                    Wire::Bytes(self.take(n)?)
                }
                5 => {
                    self.take(4)?;
                    Wire::Fixed
                }
                t => return Err(format!("unsupported protobuf wire type {t}")),
            };
            Ok((key >> 3, wire))
        })();
        if field.is_err() {
            self.buf = &[];
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![(n << 3 | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_config_map_as_kubectl_sends_it() {
        let meta = [len_field(1, b"demo"), len_field(3, b"default")].concat();
        let data = [len_field(1, b"hello"), len_field(2, b"world")].concat();
        let raw = [len_field(1, &meta), len_field(2, &data)].concat();
        let type_meta = [len_field(1, b"v1"), len_field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), len_field(1, &type_meta), len_field(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "demo", "namespace": "default"},
                   "data": {"hello": "world"}})
        );
    }

    #[test]
    fn objects_and_watch_frames_round_trip() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default", "resourceVersion": "42",
                         "labels": {"x": "y"}},
            "data": {"k": "v"}});
        let back = decode(&encode(&cm)).unwrap();
        assert_eq!(back, cm);
        let frame = watch_frame("MODIFIED", &cm);
        let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 4);
        let mut event_type = String::new();
        let mut object = Vec::new();
        for f in Fields::new(&frame[4..]) {
            match f.unwrap() {
                (1, Wire::Bytes(t)) => event_type = text(t).unwrap(),
                (2, Wire::Bytes(ext)) => {
                    for g in Fields::new(ext) {
                        if let (1, Wire::Bytes(raw)) = g.unwrap() {
                            object = raw.to_vec();
                        }
                    }
                }
                _ => {}
            }
        }
        assert_eq!(event_type, "MODIFIED");
        assert_eq!(
            decode(&object).unwrap()["metadata"]["resourceVersion"],
            "42"
        );
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let body = [MAGIC, &[0x0a, 0x7f, 0x01]].concat();
        assert!(decode(&body).is_err());
        assert!(decode(b"{}").is_err());
    }

    #[test]
    fn an_eviction_decodes_its_name_and_dry_run() {
        let meta = len_field(
            1,
            &[len_field(1, b"web-0"), len_field(3, b"default")].concat(),
        );
        let options = len_field(2, &len_field(5, b"All"));
        let raw = [meta, options].concat();
        let type_meta = [len_field(1, b"policy/v1"), len_field(2, b"Eviction")].concat();
        let body = [MAGIC.to_vec(), len_field(1, &type_meta), len_field(2, &raw)].concat();
        let e = decode(&body).unwrap();
        assert_eq!(e["kind"], "Eviction");
        assert_eq!(e["apiVersion"], "policy/v1");
        assert_eq!(e["metadata"]["name"], "web-0");
        assert_eq!(e["deleteOptions"]["dryRun"][0], "All");
    }
}
