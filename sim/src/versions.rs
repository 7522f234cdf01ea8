//! Which Kubernetes version a replica is and which group-versions it serves, as the apiserver
//! decides it: the binary's version (`/version`'s `gitVersion`), the version it emulates
//! (`--emulated-version`, compatibility versions, KEP-4330: the APIs of that version are
//! served), and `--runtime-config`, which turns group-versions on and off
//! (`GROUP/VERSION=true|false`). During a rolling upgrade replicas differ in all three: that
//! is the version skew a gateway in front must route around.

use crate::resources::{Resource, ALL};
use serde_json::{json, Value};

/// A replica's version and the resources it serves.
#[derive(Debug)]
pub struct Apis {
    /// `major.minor.patch` of the binary.
    binary: (u32, u32, u32),
    /// `major.minor` it emulates.
    emulated: (u32, u32),
    /// The resources served, of [`ALL`].
    served: Vec<&'static Resource>,
    /// Group-versions an extension server serves through the aggregator (`--aggregated-api`).
    aggregated: Vec<(String, String)>,
}

/// Group-versions a replica serves whatever its version: the review APIs it answers
/// (`tokenreviews`, `selfsubjectreviews`, `subjectaccessreviews`) and the aggregator's own
/// `apiservices`.
pub const ALWAYS_SERVED: [(&str, &str); 3] = [
    ("apiregistration.k8s.io", "v1"),
    ("authentication.k8s.io", "v1"),
    ("authorization.k8s.io", "v1"),
];

impl Apis {
    /// From `--binary-version` (`1.35.0`), `--emulated-version` (`1.34`, default the binary's)
    /// and `--runtime-config` entries (`resource.k8s.io/v1beta1=true`).
    pub fn new(
        binary: &str,
        emulated: Option<&str>,
        runtime_config: &[String],
    ) -> Result<Apis, String> {
        let binary = parse_version(binary)
            .ok_or_else(|| format!("--binary-version {binary:?}: want MAJOR.MINOR.PATCH"))?;
        let emulated = match emulated {
            None => (binary.0, binary.1),
            Some(v) => {
                let parsed = parse_version(&format!("{v}.0"))
                    .ok_or_else(|| format!("--emulated-version {v:?}: want MAJOR.MINOR"))?;
                let e = (parsed.0, parsed.1);
                // As the apiserver: at most three minor versions back, never forward.
                if e > (binary.0, binary.1) || e.0 != binary.0 || binary.1 - e.1 > 3 {
                    return Err(format!(
                        "--emulated-version {v}: must be within 3 minor versions below the binary's {}.{}",
                        binary.0, binary.1
                    ));
                }
                e
            }
        };
        let mut served: Vec<&'static Resource> = ALL
            .into_iter()
            .filter(|r| r.introduced <= emulated.1 && r.enabled_by_default)
            .collect();
        for entry in runtime_config {
            let (gv, on) = match entry.split_once('=') {
                Some((gv, "true")) => (gv, true),
                Some((gv, "false")) => (gv, false),
                None => (entry.as_str(), true),
                Some(_) => {
                    return Err(format!(
                        "--runtime-config {entry:?}: want GROUP/VERSION=true|false"
                    ))
                }
            };
            let known: Vec<&'static Resource> = ALL
                .into_iter()
                .filter(|r| r.api_version() == gv && r.introduced <= emulated.1)
                .collect();
            if known.is_empty() {
                return Err(format!(
                    "--runtime-config {entry:?}: unknown api group-version {gv:?} at version {}.{}",
                    emulated.0, emulated.1
                ));
            }
            if !on && gv == "v1" {
                return Err("--runtime-config: api/v1 cannot be turned off".to_string());
            }
            served.retain(|r| r.api_version() != gv);
            if on {
                served.extend(known);
            }
        }
        Ok(Apis {
            binary,
            emulated,
            served,
            aggregated: Vec::new(),
        })
    }

    /// With `--aggregated-api` entries (`GROUP/VERSION`): group-versions an extension server
    /// serves, registered with an APIService that names its service. A group-version the
    /// replica serves itself, or the core group, is refused.
    pub fn with_aggregated(mut self, entries: &[String]) -> Result<Apis, String> {
        for entry in entries {
            let bad = || format!("--aggregated-api {entry:?}: want GROUP/VERSION");
            let (group, version) = entry.split_once('/').ok_or_else(bad)?;
            let name_ok = |s: &str| {
                !s.is_empty()
                    && s.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-'
                    })
            };
            if !name_ok(group) || !name_ok(version) || version.contains('.') {
                return Err(bad());
            }
            if self.serves_locally(group, version) {
                return Err(format!(
                    "--aggregated-api {entry:?}: the replica serves {entry} itself"
                ));
            }
            if !self.is_aggregated(group, version) {
                self.aggregated
                    .push((group.to_string(), version.to_string()));
            }
        }
        Ok(self)
    }

    /// Whether `group`/`version` is served by the replica itself: a resource of it, or one of
    /// [`ALWAYS_SERVED`].
    pub fn serves_locally(&self, group: &str, version: &str) -> bool {
        ALWAYS_SERVED.contains(&(group, version))
            || self
                .served
                .iter()
                .any(|r| r.group == group && r.version == version)
    }

    /// Whether `group`/`version` is an extension server's (`--aggregated-api`).
    pub fn is_aggregated(&self, group: &str, version: &str) -> bool {
        self.aggregated
            .iter()
            .any(|(g, v)| g == group && v == version)
    }

    /// The extension servers' group-versions.
    pub fn aggregated(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.aggregated
            .iter()
            .map(|(g, v)| (g.as_str(), v.as_str()))
    }

    /// The group-versions the replica serves itself, core `v1` included (`""`, `v1`).
    pub fn local_group_versions(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<(&'static str, &'static str)> = self
            .served
            .iter()
            .map(|r| (r.group, r.version))
            .chain(ALWAYS_SERVED)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Whether `resource` is served.
    pub fn serves(&self, resource: &Resource) -> bool {
        self.served.contains(&resource)
    }

    /// The served resources.
    pub fn resources(&self) -> impl Iterator<Item = &'static Resource> + '_ {
        self.served.iter().copied()
    }

    /// `/version`'s body.
    pub fn version(&self) -> Value {
        let (major, minor, patch) = self.binary;
        json!({
            "major": major.to_string(),
            "minor": minor.to_string(),
            "emulationMajor": self.emulated.0.to_string(),
            "emulationMinor": self.emulated.1.to_string(),
            "minCompatibilityMajor": self.emulated.0.to_string(),
            "minCompatibilityMinor": self.emulated.1.saturating_sub(1).to_string(),
            "gitVersion": format!("v{major}.{minor}.{patch}-kubegate-sim"),
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.25.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        })
    }
}

impl Default for Apis {
    /// What the simulator is without version flags: 1.35.0, serving its defaults.
    fn default() -> Apis {
        Apis::new(DEFAULT_BINARY_VERSION, None, &[]).expect("the default version is valid")
    }
}

/// The binary version a replica reports without `--binary-version`.
pub const DEFAULT_BINARY_VERSION: &str = "1.35.0";

fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.trim_start_matches('v').splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next()?.parse().ok()?;
    Some((major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{RESOURCECLAIMS_V1, RESOURCECLAIMS_V1BETA1};

    fn gvs(apis: &Apis) -> Vec<String> {
        let mut out: Vec<String> = apis.resources().map(Resource::api_version).collect();
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn the_emulated_version_decides_what_is_served() {
        let old = Apis::new("1.33.2", None, &[]).unwrap();
        assert!(!old.serves(&RESOURCECLAIMS_V1));
        assert!(
            !old.serves(&RESOURCECLAIMS_V1BETA1),
            "beta is off by default"
        );
        let new = Apis::new("1.34.0", None, &[]).unwrap();
        assert!(new.serves(&RESOURCECLAIMS_V1));
        let emulating = Apis::new("1.34.0", Some("1.33"), &[]).unwrap();
        assert!(!emulating.serves(&RESOURCECLAIMS_V1));
        assert_eq!(emulating.version()["emulationMinor"], "33");
        assert_eq!(emulating.version()["gitVersion"], "v1.34.0-kubegate-sim");
    }

    #[test]
    fn runtime_config_turns_group_versions_on_and_off() {
        let on = Apis::new("1.33.0", None, &["resource.k8s.io/v1beta1=true".into()]).unwrap();
        assert!(on.serves(&RESOURCECLAIMS_V1BETA1));
        assert!(gvs(&on).contains(&"resource.k8s.io/v1beta1".to_string()));
        let off = Apis::new("1.34.0", None, &["resource.k8s.io/v1=false".into()]).unwrap();
        assert!(!off.serves(&RESOURCECLAIMS_V1));
        assert_eq!(
            gvs(&off),
            [
                "coordination.k8s.io/v1",
                "discovery.k8s.io/v1",
                "kubegate.example.com/v1",
                "policy/v1",
                "v1"
            ]
        );
    }

    #[test]
    fn aggregated_group_versions_are_the_extension_servers() {
        let apis = Apis::default()
            .with_aggregated(&[
                "metrics.k8s.io/v1beta1".into(),
                "metrics.k8s.io/v1beta1".into(),
            ])
            .unwrap();
        assert!(apis.is_aggregated("metrics.k8s.io", "v1beta1"));
        assert!(!apis.serves_locally("metrics.k8s.io", "v1beta1"));
        assert_eq!(apis.aggregated().count(), 1);
        assert!(apis.serves_locally("authentication.k8s.io", "v1"));
        assert!(apis.serves_locally("", "v1"));
        for refused in [
            "policy/v1",
            "apiregistration.k8s.io/v1",
            "v1",
            "/v1",
            "a/",
            "A/v1",
            "a/v1.2",
        ] {
            assert!(
                Apis::default().with_aggregated(&[refused.into()]).is_err(),
                "{refused}"
            );
        }
        // Another version of a served group is an extension server's to serve.
        assert!(Apis::default()
            .with_aggregated(&["resource.k8s.io/v1alpha3".into()])
            .is_ok());
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(Apis::new("1.33.0", None, &["resource.k8s.io/v1=true".into()]).is_err());
        assert!(Apis::new("1.35.0", None, &["v1=false".into()]).is_err());
        assert!(Apis::new("1.35.0", None, &["x/v1=maybe".into()]).is_err());
        assert!(Apis::new("1.35.0", Some("1.36"), &[]).is_err());
        assert!(Apis::new("1.35.0", Some("1.31"), &[]).is_err());
        assert!(Apis::new("1.35", None, &[]).is_err());
    }
}
