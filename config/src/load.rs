//! Reading a file into a checked [`Config`].

use crate::error::{ConfigError, Problem};
use crate::locate::PathIndex;
use crate::schema::Config;
use crate::validate::{validate, Finding};
use std::path::Path;

/// Checks a caller adds to validation (the gateway: that certificate files parse and keys
/// match), run on a configuration whose own validation passed; each finding names the path of
/// the value it is about, so it is reported with its position like any other.
pub type Check<'a> = &'a dyn Fn(&Config) -> Vec<Finding>;

/// Reads, parses and validates `path`. Relative file names inside are resolved against the
/// directory of `path`.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    load_file_with(path, &|_| Vec::new())
}

/// [`load_file`] with the caller's `check` added.
pub fn load_file_with(path: &Path, check: Check<'_>) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    load_str_with(&text, path, base, check)
}

/// Parses and validates `text` as if read from `path`; relative files resolve against `base_dir`.
pub fn load_str(text: &str, path: &Path, base_dir: &Path) -> Result<Config, ConfigError> {
    load_str_with(text, path, base_dir, &|_| Vec::new())
}

/// [`load_str`] with the caller's `check` added.
pub fn load_str_with(
    text: &str,
    path: &Path,
    base_dir: &Path,
    check: Check<'_>,
) -> Result<Config, ConfigError> {
    let invalid = |problems| ConfigError::Invalid {
        path: path.to_path_buf(),
        problems,
    };
    let mut config: Config = serde_yaml_ng::from_str(text).map_err(|e| {
        let (line, column) = e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((1, 1));
        invalid(vec![Problem {
            line,
            column,
            message: strip_position(&e.to_string()),
        }])
    })?;
    let mut findings = validate(&mut config, base_dir);
    if findings.is_empty() {
        findings = check(&config);
    }
    if findings.is_empty() {
        return Ok(config);
    }
    Err(invalid(positioned(text, findings)))
}

/// What is legal in a valid configuration read from `text` but is almost certainly a mistake
/// (a dispatch rule that can never match), each with its position, in file order. `kubegate
/// check` prints them as warnings; a reload logs them.
pub fn warnings(text: &str, config: &Config) -> Vec<Problem> {
    let findings = crate::dispatch::warnings(&config.dispatch);
    if findings.is_empty() {
        return Vec::new();
    }
    positioned(text, findings)
}

/// `findings` with the positions of their paths in `text`, in file order.
fn positioned(text: &str, findings: Vec<Finding>) -> Vec<Problem> {
    let index = PathIndex::build(text);
    let mut problems: Vec<Problem> = findings
        .into_iter()
        .map(|(path, message)| {
            let (line, column) = index.position(&path);
            Problem {
                line,
                column,
                message,
            }
        })
        .collect();
    problems.sort_by_key(|p| (p.line, p.column));
    problems
}

/// serde_yaml appends " at line L column C" to its messages; we print the position up front.
fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "pem").unwrap();
        load_str(text, &PathBuf::from("kubegate.yaml"), dir.path())
    }

    fn first_error(text: &str) -> String {
        load(text)
            .unwrap_err()
            .to_string()
            .lines()
            .next()
            .unwrap()
            .to_string()
    }

    /// Asserts that the first problem found in `text` is at `at` (file:line:column), `saying`
    /// this.
    fn refused_at(text: &str, at: &str, saying: &str) {
        let err = first_error(text);
        assert!(
            err.starts_with(&format!("{at}: ")) && err.contains(saying),
            "{at}: {saying}: {err}"
        );
    }

    /// [`MINIMAL`] with `backends` (YAML list items) for its one backend.
    fn with_backends(backends: &str) -> String {
        MINIMAL.replace("  - address: 127.0.0.1:7001\n", backends)
    }

    /// [`MINIMAL`] with `listeners` (YAML list items) for its one listener.
    fn with_listeners(listeners: &str) -> String {
        MINIMAL.replace("  - address: 127.0.0.1:6443\n", listeners)
    }

    const MINIMAL: &str = "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\nhealth:\n  tls:\n    ca_file: ca.crt\n";

    #[test]
    fn minimal_config_gets_documented_defaults() {
        let c = load(MINIMAL).unwrap();
        assert_eq!(c.health.path, "/readyz");
        assert_eq!(c.health.rise, 2);
        assert_eq!(c.health.fall, 2);
        assert_eq!(c.health.fast_interval.as_millis(), 250);
        assert_eq!(c.health.flap_damping.max_rise, 16);
        assert_eq!(c.health.flap_damping.window.as_secs(), 60);
        assert_eq!(c.connect.attempts, 3);
        assert_eq!(c.drain.timeout.as_secs(), 30);
        assert_eq!(c.shutdown.delay.as_secs(), 5);
        assert_eq!(c.shutdown.grace.as_secs(), 30);
        assert_eq!(c.admin.address.to_string(), "127.0.0.1:9444");
        assert!(c.health.tls.ca_file.unwrap().is_absolute());
    }

    #[test]
    fn new_is_what_a_minimal_file_loads_as_and_to_yaml_loads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "pem").unwrap();
        let load = |text: &str| load_str(text, &PathBuf::from("kubegate.yaml"), dir.path());
        let c = load(MINIMAL).unwrap();
        let mut built = Config::new(
            vec![crate::schema::ListenerSpec::passthrough(
                "127.0.0.1:6443".parse().unwrap(),
            )],
            vec![crate::schema::BackendSpec {
                name: None,
                address: "127.0.0.1:7001".parse().unwrap(),
                health_address: None,
                other_addresses: Vec::new(),
            }],
        );
        built.health.tls.ca_file = c.health.tls.ca_file.clone();
        assert_eq!(built, c);
        // Every key written out, as the test bed writes its files.
        let mut changed = c.clone();
        changed.health.interval = std::time::Duration::from_millis(300);
        changed.drain.failing_timeout = std::time::Duration::from_millis(1500);
        changed.upgrade = Some(crate::schema::UpgradeConfig {
            socket: "/run/kubegate.sock".into(),
        });
        assert_eq!(load(&changed.to_yaml()).unwrap(), changed);
    }

    #[test]
    fn unknown_key_is_named_with_its_position() {
        refused_at(
            &format!("{MINIMAL}balanse: round-robin\n"),
            "kubegate.yaml:8:1",
            "unknown field `balanse`",
        );
    }

    #[test]
    fn bad_duration_points_at_the_value() {
        refused_at(
            &MINIMAL.replace("health:\n", "health:\n  interval: soon\n"),
            "kubegate.yaml:6:3",
            "invalid duration \"soon\"",
        );
    }

    #[test]
    fn duplicate_backend_points_at_the_second_address() {
        let text = with_backends("  - address: 127.0.0.1:7001\n  - address: 127.0.0.1:7001\n");
        let err = first_error(&text);
        assert_eq!(
            err,
            "kubegate.yaml:5:14: duplicate backend address 127.0.0.1:7001"
        );
    }

    #[test]
    fn a_replicas_other_address_is_its_own() {
        let text = with_backends(
            "  - address: 127.0.0.1:7001\n    other_addresses: [\"[::1]:7001\"]\n  - address: 127.0.0.1:7002\n    other_addresses: [\"[::1]:7001\"]\n",
        );
        let err = first_error(&text);
        assert!(
            err.starts_with("kubegate.yaml:7:23: [::1]:7001 is already an address of a backend"),
            "{err}"
        );
    }

    #[test]
    fn an_admin_token_without_tls_is_refused_at_its_position() {
        refused_at(
            &format!("{MINIMAL}admin:\n  address: 127.0.0.1:9444\n  bearer_token_file: ca.crt\n"),
            "kubegate.yaml:10:22",
            "needs admin.tls",
        );
        let c = load(&format!(
            "{MINIMAL}admin:\n  tls:\n    cert_file: ca.crt\n    key_file: ca.crt\n  bearer_token_file: ca.crt\n"
        ))
        .unwrap();
        assert!(c.admin.authenticates());
        assert_eq!(
            c.admin.public_paths,
            [
                "/livez",
                "/readyz",
                "/readyz/lifecycle",
                "/readyz/backends",
                "/healthz"
            ]
        );
    }

    #[test]
    fn a_shed_object_that_is_not_namespace_slash_name_is_named() {
        let text = format!("{MINIMAL}terminate:\n  shed_object: kubegate-shed\n");
        refused_at(&text, "kubegate.yaml:9:16", "NAMESPACE/NAME");
        let text = format!("{MINIMAL}terminate:\n  shed_object: Kube/x\n");
        refused_at(&text, "kubegate.yaml:9:16", "a namespace is");
        let text = format!("{MINIMAL}terminate:\n  shed_object: kube-system/kubegate-shed\n");
        assert_eq!(
            load(&text).unwrap().terminate.shed_object.as_deref(),
            Some("kube-system/kubegate-shed")
        );
    }

    #[test]
    fn missing_file_is_named() {
        refused_at(
            &MINIMAL.replace("ca.crt", "nope.crt"),
            "kubegate.yaml:7:14",
            "nope.crt",
        );
    }

    #[test]
    fn missing_ca_without_insecure_is_refused() {
        let err =
            first_error(&MINIMAL.replace("    ca_file: ca.crt\n", "    server_name: kubernetes\n"));
        assert!(err.contains("ca_file is required"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_in_file_order() {
        let text = format!("{MINIMAL}connect:\n  attempts: 0\nthreads: 0\n");
        let err = load(&text).unwrap_err();
        let lines: Vec<_> = err.problems().iter().map(|p| p.line).collect();
        assert_eq!(lines, vec![9, 10]);
    }

    #[test]
    fn fast_interval_longer_than_interval_points_at_it() {
        refused_at(
            &MINIMAL.replace(
                "health:\n",
                "health:\n  interval: 1s\n  fast_interval: 2s\n",
            ),
            "kubegate.yaml:7:18",
            "must not be longer than interval",
        );
    }

    #[test]
    fn keepalive_out_of_the_kernels_range_points_at_it() {
        refused_at(
            &format!("{MINIMAL}client_keepalive:\n  idle: 1500ms\n  count: 200\n"),
            "kubegate.yaml:9:9",
            "whole seconds from 1s to 32767s",
        );
        let text = format!("{MINIMAL}client_keepalive:\n  count: 200\n");
        let err = load(&text).unwrap_err().to_string();
        assert!(err.contains("kubegate.yaml:9:10: "), "{err}");
        assert!(err.contains("count must be 1..=127"), "{err}");
        let ok = load(&format!("{MINIMAL}client_keepalive: {{idle: 30s}}\n")).unwrap();
        assert_eq!(ok.client_keepalive.idle, std::time::Duration::from_secs(30));
        assert_eq!(ok.client_keepalive.count, 4);
    }

    const TERMINATE: &str = "listeners:\n  - address: 127.0.0.1:6443\n    mode: terminate\n    tls:\n      cert_file: ca.crt\n      key_file: ca.crt\nbackends:\n  - address: 127.0.0.1:7001\nhealth:\n  tls:\n    ca_file: ca.crt\n";

    #[test]
    fn terminate_mode_takes_upstream_tls_from_health_by_default() {
        let c = load(TERMINATE).unwrap();
        assert_eq!(c.listeners[0].mode, crate::schema::ListenerMode::Terminate);
        assert!(c.listeners[0].tls.as_ref().unwrap().cert_file.is_absolute());
        assert_eq!(c.upstream.tls.ca_file, c.health.tls.ca_file);
        assert_eq!(c.upstream.tls.server_name.as_deref(), Some("kubernetes"));
        assert_eq!(c.upstream.max_streams_per_connection, 100);
        assert_eq!(c.terminate.max_request_body_bytes, 3 * 1024 * 1024);
        assert!(c.upstream.front_proxy.is_none());
    }

    #[test]
    fn tls_on_a_passthrough_listener_is_refused_where_it_stands() {
        refused_at(
            &MINIMAL.replace(
                "  - address: 127.0.0.1:6443\n",
                "  - address: 127.0.0.1:6443\n    tls: {cert_file: ca.crt, key_file: ca.crt}\n",
            ),
            "kubegate.yaml:3:11",
            "tls is for mode: terminate",
        );
    }

    #[test]
    fn a_listeners_proxy_protocol_loads_with_its_defaults_and_names_a_balancer() {
        let with = |block: &str| {
            with_listeners(&format!(
                "  - address: 127.0.0.1:6443\n    proxy_protocol: {block}\n"
            ))
        };
        let c = load(&with("{trusted: [10.0.0.0/8, 192.0.2.7]}")).unwrap();
        let p = c.listeners[0].proxy_protocol.as_ref().unwrap();
        assert!(p.required);
        assert_eq!(p.timeout, std::time::Duration::from_secs(5));
        assert!(p.trusts("10.1.2.3".parse().unwrap()) && p.trusts("192.0.2.7".parse().unwrap()));
        assert!(!p.trusts("192.0.2.8".parse().unwrap()));
        refused_at(
            &with("{trusted: []}"),
            "kubegate.yaml:3:31",
            "names no balancer",
        );
        refused_at(
            &with("{trusted: [10.0.0.0/33]}"),
            "kubegate.yaml:3:31",
            "the prefix length is 0 to 32",
        );
        refused_at(
            &with("{trusted: [10.0.0.0/8], timeout: 0s}"),
            "kubegate.yaml:3:54",
            "must be more than 0s",
        );
        refused_at(
            &with("{trusted: [10.0.0.0/8], timeout: 1m}"),
            "kubegate.yaml:3:54",
            "at most 30s",
        );
    }

    #[test]
    fn another_port_of_the_replicas_is_for_passthrough_and_probed_only_with_it() {
        let with = |keys: &str| {
            with_listeners(&format!(
                "  - address: 127.0.0.1:6443\n  - address: 127.0.0.1:8132\n    {keys}\n"
            ))
        };
        let c = load(&with("backend_port: 8132\n    backend_probe: tcp")).unwrap();
        assert_eq!(c.listeners[1].backend_port, Some(8132));
        assert_eq!(c.listeners[1].backend_probe, Some(crate::PortProbe::Tcp));
        refused_at(
            &with("backend_probe: tcp"),
            "kubegate.yaml:4:20",
            "probes a listener's backend_port",
        );
        refused_at(
            &with("backend_port: 0"),
            "kubegate.yaml:4:19",
            "port 0 is no port",
        );
        refused_at(
            &with("backend_port: 8132\n    mode: terminate\n    tls: {cert_file: ca.crt, key_file: ca.crt}"),
            "kubegate.yaml:4:19",
            "passthrough listener only",
        );
    }

    #[test]
    fn terminate_without_tls_is_refused_at_its_mode() {
        refused_at(
            &MINIMAL.replace(
                "  - address: 127.0.0.1:6443\n",
                "  - address: 127.0.0.1:6443\n    mode: terminate\n",
            ),
            "kubegate.yaml:3:11",
            "mode: terminate needs tls",
        );
    }

    #[test]
    fn verifying_client_certificates_needs_a_front_proxy_identity() {
        let text = TERMINATE.replace(
            "      key_file: ca.crt\n",
            "      key_file: ca.crt\n      client_ca_file: ca.crt\n",
        );
        refused_at(
            &text,
            "kubegate.yaml:7:23",
            "verifying client certificates needs upstream.front_proxy",
        );
        let with_identity = format!(
            "{text}upstream:\n  front_proxy:\n    cert_file: ca.crt\n    key_file: ca.crt\n    username_header: \"X Remote\"\n"
        );
        refused_at(
            &with_identity,
            "kubegate.yaml:17:22",
            "\"X Remote\" is not an HTTP header name",
        );
    }

    #[test]
    fn a_callers_check_is_reported_with_its_position() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "pem").unwrap();
        let check = |c: &Config| {
            vec![(
                "listeners[0].tls.key_file".to_string(),
                format!(
                    "{} does not match the certificate",
                    c.listeners[0].tls.as_ref().unwrap().key_file.display()
                ),
            )]
        };
        let err = load_str_with(
            TERMINATE,
            &PathBuf::from("kubegate.yaml"),
            dir.path(),
            &check,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("kubegate.yaml:6:17: "), "{err}");
        assert!(err.ends_with("does not match the certificate"), "{err}");
    }

    #[test]
    fn a_hold_with_no_room_to_hold_is_refused_at_its_bound() {
        let hold = format!(
            "{MINIMAL}terminate:\n  hold_when_none_ready: 8s\n  max_held_when_none_ready: 0\n"
        );
        refused_at(
            &hold,
            "kubegate.yaml:10:29",
            "terminate.max_held_when_none_ready must be at least 1",
        );
        let c = load(&hold.replace("ready: 0", "ready: 5")).unwrap();
        assert_eq!(
            c.terminate.hold_when_none_ready,
            std::time::Duration::from_secs(8)
        );
        let defaults = load(MINIMAL).unwrap().terminate;
        assert!(defaults.hold_when_none_ready.is_zero());
        assert_eq!(
            defaults.hold_reads_when_storage_fails,
            std::time::Duration::from_secs(10)
        );
    }

    #[test]
    fn timeouts_that_would_cut_every_client_at_once_are_refused_at_their_line() {
        refused_at(
            &format!("{MINIMAL}terminate:\n  client_ping_timeout: 0s\n"),
            "kubegate.yaml:9:24",
            "terminate.client_ping_timeout must be greater than 0",
        );
        refused_at(
            &format!("{MINIMAL}terminate:\n  slow_watch_timeout: 0s\n"),
            "kubegate.yaml:9:23",
            "terminate.slow_watch_timeout must be greater than 0",
        );
        let off = load(&format!(
            "{MINIMAL}terminate:\n  client_ping_interval: 0s\n"
        ))
        .unwrap();
        assert!(off.terminate.client_ping_interval.is_zero(), "PINGs off");
    }

    #[test]
    fn bad_policy_name_is_an_error() {
        refused_at(
            &format!("{MINIMAL}balance: random\n"),
            "kubegate.yaml:8:10",
            "balance: unknown variant `random`",
        );
    }
}
