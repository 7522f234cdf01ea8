//! Points in time written as Kubernetes writes them: RFC 3339 (`2026-12-05T18:00:00Z`).

/// An optional RFC 3339 time, for `#[serde(with = ...)]`.
pub mod optional {
    use serde::{de, Deserialize, Deserializer, Serializer};
    use std::time::SystemTime;

    /// Deserializes an RFC 3339 time.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(text.trim())
            .map(Some)
            .map_err(|e| {
                de::Error::custom(format!(
                    "invalid time {text:?}: {e} (write RFC 3339, e.g. \"2026-12-05T18:00:00Z\")"
                ))
            })
    }

    /// Serializes it back as RFC 3339, in UTC, to the second.
    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&humantime::format_rfc3339_seconds(*t).to_string()),
            None => s.serialize_none(),
        }
    }
}
