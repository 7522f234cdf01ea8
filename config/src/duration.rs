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

/// The same for an optional duration (`null` or absent: none).
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Deserializes `null` or a duration.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(text) => humantime::parse_duration(text.trim())
                .map(Some)
                .map_err(|e| {
                    serde::de::Error::custom(format!(
                        "invalid duration {text:?}: {e} (write e.g. \"500ms\", \"1s\", \"2m\")"
                    ))
                }),
        }
    }

    /// Serializes it back (`None` is skipped by the field's attribute).
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }
}
