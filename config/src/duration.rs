//! Durations written the way Kubernetes users write them: `500ms`, `1s`, `2m30s`.

use serde::{de, Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// Deserializes a human-readable duration (`humantime` syntax).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(text.trim()).map_err(|e| {
        de::Error::custom(format!(
            "invalid duration {text:?}: {e} (write e.g. \"500ms\", \"1s\", \"2m\")"
        ))
    })
}

/// Serializes a duration back to the same syntax (used by `/debug/config`).
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}
