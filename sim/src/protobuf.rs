//! Reading request bodies in Kubernetes' protobuf encoding, which kubectl and client-go send for
//! built-in types (`Content-Type: application/vnd.kubernetes.protobuf`). Responses stay JSON,
//! which those clients also accept.
//!
//! The envelope is the magic `k8s\0` followed by a `runtime.Unknown` message whose `raw` field is
//! the object. Only the fields of ConfigMap, Lease and ObjectMeta the simulator stores are read;
//! others are skipped by wire type, as protobuf intends.

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
    fn truncated_input_is_an_error_not_a_panic() {
        let body = [MAGIC, &[0x0a, 0x7f, 0x01]].concat();
        assert!(decode(&body).is_err());
        assert!(decode(b"{}").is_err());
    }
}
