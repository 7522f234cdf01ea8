//! kubegate with Prometheus and Grafana: the alert rules, the dashboard, and a real Prometheus.
//!
//! 1. `alert_rules_pass_promtool_check_and_unit_tests`
//! 2. `every_metric_in_dashboard_and_alerts_is_exported`
//! 3. `prometheus_scrapes_with_the_shipped_configuration_and_evaluates_every_rule`
//! 4. `every_alert_is_tested_firing_and_not_firing`
//! 5. `inhibition_rules_hold_back_per_gateway_pages_behind_a_job_wide_alert` (Alertmanager)
//! 6. `the_monitors_select_the_shipped_pods_and_their_admin_ports`
//! 7. `dashboard_is_well_formed`: variables defined, every query scoped to `$job` and
//!    `$instance`, stat panels per instance.
//! 8. `the_prometheus_rule_carries_the_shipped_alerts`: deploy/monitoring/prometheusrule.yaml
//!    holds exactly dashboards/alerts.yaml's groups.
//! 9. `metrics_pass_promtool`: kubegate's own `/metrics`, with a replica not ready and open
//!    connections, passes `promtool check metrics`.

use kubegate_e2e::replicas::{open, sims};
use kubegate_e2e::*;
use serde::Deserialize as _;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo("dashboards/kubegate.json")).unwrap())
        .expect("dashboard is valid JSON")
}

/// A YAML file of the repository, read.
fn yaml(path: &str) -> serde_yaml_ng::Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(repo(path)).unwrap()).unwrap()
}

fn panels(d: &Value) -> Vec<&Value> {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .collect()
}

fn promtool(args: &[&str]) {
    run_ok(
        Command::new("promtool")
            .args(args)
            .current_dir(repo("dashboards")),
    );
}

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() {
    promtool(&["check", "rules", "alerts.yaml"]);
    promtool(&["test", "rules", "alerts_test.yaml"]);
}

/// Every `kubegate_*` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("kubegate_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_in_dashboard_and_alerts_is_exported() {
    // Terminate mode: its request series appear with the first request, the passthrough ones
    // exist from the start; a dispatch rule's when the rules are loaded.
    let bed = Cluster::new()
        .replicas(2)
        .terminate()
        .configure(|c| {
            c.dispatch = serde_yaml_ng::from_str(
                "- name: version\n  match: {non_resource_urls: [/version]}\n  limit: {max_in_flight: 100}\n",
            )
            .unwrap()
        })
        .start();
    let (kg, pki, sims, dir) = (&bed.kg, &bed.pki, &bed.sims, &bed.dir);
    // Failing-check series exist only while a check fails: make one fail.
    sims[1].force_check("etcd", true);
    kg.wait_state("replica-2", "not_ready", Duration::from_secs(30));
    let mut conn = kg.connect(pki, true).await.unwrap();
    assert_eq!(conn.get("/version").await.unwrap().status, 200);
    // An APF rejection's series exist once a replica has rejected a level.
    sims[0].saturate_level("global-default", Some(1));
    let mut someone = Conn::open_as_user(kg.listen, pki, "someone", "someone", &[]).await;
    let rejected = someone.get(CONFIGMAPS).await.unwrap();
    assert_eq!(rejected.status, 429, "{}", rejected.text());
    sims[0].saturate_level("global-default", None);
    // A ready replica's version series exist once terminate mode has read its discovery.
    wait_for(
        "replica-1's version on /metrics",
        Duration::from_secs(30),
        || {
            kg.admin_body("/metrics")
                .contains("kubegate_backend_version_info{")
                .then_some(())
        },
    );
    let exposition = kg.admin_body("/metrics");
    // The terminate-mode families follow Prometheus' naming rules too.
    promtool_check_metrics(dir.path(), &exposition);
    let families: BTreeSet<String> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let exprs: Vec<String> = panels(&dashboard())
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .chain(std::iter::once(
            std::fs::read_to_string(repo("dashboards/alerts.yaml")).unwrap(),
        ))
        .collect();
    let mut used = BTreeSet::new();
    for e in &exprs {
        let names = metric_names(e);
        // Every query reads some metric: an expression the name scan finds nothing in would
        // slip through the check below unseen.
        assert!(!names.is_empty(), "no metric name found in {e}");
        used.extend(names);
    }
    for name in &used {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|base| families.contains(*base)))
            .unwrap_or(name);
        assert!(families.contains(family), "{name} is used but not exported");
    }
}

/// GETs `path` from the HTTP server on loopback `port`: the JSON body, if it answered.
fn get_json(port: u16, path: &str) -> Option<Value> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let raw = plain_http(("127.0.0.1", port), "GET", path);
    let body = raw.split_once("\r\n\r\n")?.1;
    // Chunked or not, the JSON value is the one between the outer braces or brackets.
    let start = body.find(['{', '['])?;
    let end = body.rfind(['}', ']'])?;
    serde_json::from_str(&body[start..=end]).ok()
}

/// A query string's value, percent-encoded.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The shipped scrape configuration (deploy/monitoring/prometheus.yaml: TLS verified against a
/// CA and a server name, a bearer token) and the shipped rules, run by a real Prometheus
/// against a real kubegate whose admin endpoint serves TLS and wants the token: the scrape
/// works, every rule evaluates without error, and a backend leaving readiness shows.
#[test]
fn prometheus_scrapes_with_the_shipped_configuration_and_evaluates_every_rule() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let sims = sims(&pki, 3);
    let (crt, key) = pki.serving_with(
        "kubegate-admin",
        "kubegate-admin",
        &["kubegate-admin"],
        -1,
        30,
    );
    let tokens = dir.path().join("admin-tokens");
    std::fs::write(&tokens, "scrape-token\n").unwrap();
    let mut cfg = KubegateConfig::new(&sims.iter().collect::<Vec<_>>());
    cfg.admin.tls = Some(kubegate_config::ServingTls::new(crt, key));
    cfg.admin.bearer_token_file = Some(tokens.clone());
    let (listen, admin) = (
        std::net::SocketAddr::from(([127, 0, 0, 1], free_port())),
        std::net::SocketAddr::from(([127, 0, 0, 1], free_port())),
    );
    let config_path = dir.path().join("kubegate.yaml");
    kubegate_testbed::kubegate::write_text(
        &cfg.render(listen, admin, &pki.ca_file()),
        &config_path,
    )
    .unwrap();
    let mut cmd = Command::new(bin("kubegate"));
    cmd.arg("run").arg("--config").arg(&config_path);
    let _kg = Proc::spawn("kubegate", cmd, dir.path().join("kubegate.log"));

    // The shipped file, pointed at this test's files and kubegate, scraping every second.
    let mut prom: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("deploy/monitoring/prometheus.yaml")).unwrap(),
    )
    .unwrap();
    prom["global"]["scrape_interval"] = "1s".into();
    prom["global"]["evaluation_interval"] = "1s".into();
    std::fs::copy(
        repo("dashboards/alerts.yaml"),
        dir.path().join("kubegate-alerts.yaml"),
    )
    .unwrap();
    let job = &mut prom["scrape_configs"][0];
    assert_eq!(job["tls_config"]["server_name"], "kubegate-admin");
    job["tls_config"]["ca_file"] = pki.ca_file().to_str().unwrap().into();
    job["authorization"]["credentials_file"] = tokens.to_str().unwrap().into();
    job["static_configs"][0]["targets"] =
        vec![serde_yaml_ng::Value::from(admin.to_string())].into();
    let config = dir.path().join("prometheus.yaml");
    std::fs::write(&config, serde_yaml_ng::to_string(&prom).unwrap()).unwrap();
    run_ok(
        Command::new("promtool")
            .args(["check", "config"])
            .arg(&config),
    );

    let port = free_port();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    let _prom = Proc::spawn("prometheus", cmd, dir.path().join("prometheus.log"));
    let query = |q: &str| -> Option<f64> {
        let v = get_json(port, &format!("/api/v1/query?query={}", encode(q)))?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    };
    let ready = r#"sum(kubegate_backend_state{job="kubegate",state="ready"})"#;
    wait_for(
        "Prometheus to see 3 ready backends",
        Duration::from_secs(60),
        || (query(ready)? == 3.0).then_some(()),
    );
    assert_eq!(
        query(r#"up{job="kubegate"}"#),
        Some(1.0),
        "scraped over TLS with the token"
    );

    // Every rule evaluated against real series, without an error (a many-to-many match, a
    // bad label join would show here and nowhere in the unit tests).
    let rules = wait_for("every rule evaluated", Duration::from_secs(30), || {
        let v = get_json(port, "/api/v1/rules")?;
        let rules: Vec<Value> = v["data"]["groups"][0]["rules"].as_array()?.clone();
        rules
            .iter()
            .all(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
            })
            .then_some(rules)
    });
    let shipped = std::fs::read_to_string(repo("dashboards/alerts.yaml")).unwrap();
    assert_eq!(rules.len(), shipped.matches("- alert:").count());
    for r in &rules {
        assert_eq!(r["health"], "ok", "{}: {}", r["name"], r["lastError"]);
    }

    sims[1].force_check("etcd", true);
    wait_for(
        "Prometheus to see 2 ready backends",
        Duration::from_secs(30),
        || (query(ready)? == 2.0).then_some(()),
    );
    let failing = r#"kubegate_backend_readyz_check_failing{backend="replica-2",check="etcd"}"#;
    assert_eq!(query(failing), Some(1.0));
}

/// Each alert of alerts.yaml (and each of its severities) appears in alerts_test.yaml both
/// firing and not firing.
#[test]
fn every_alert_is_tested_firing_and_not_firing() {
    let rules = yaml("dashboards/alerts.yaml");
    let tests = yaml("dashboards/alerts_test.yaml");
    let mut fired: BTreeSet<(String, String)> = BTreeSet::new();
    let mut quiet: BTreeSet<String> = BTreeSet::new();
    for t in tests["tests"].as_sequence().unwrap() {
        for case in t["alert_rule_test"].as_sequence().unwrap() {
            let name = case["alertname"].as_str().unwrap().to_string();
            let alerts = case["exp_alerts"].as_sequence().unwrap();
            if alerts.is_empty() {
                quiet.insert(name.clone());
            }
            for a in alerts {
                let severity = a["exp_labels"]["severity"].as_str().unwrap().to_string();
                fired.insert((name.clone(), severity));
            }
        }
    }
    for r in rules["groups"][0]["rules"].as_sequence().unwrap() {
        let name = r["alert"].as_str().unwrap().to_string();
        let severity = r["labels"]["severity"].as_str().unwrap().to_string();
        assert!(
            fired.contains(&(name.clone(), severity.clone())),
            "{name} ({severity}) is never tested firing"
        );
        assert!(quiet.contains(&name), "{name} is never tested not firing");
    }
}

/// A real Alertmanager with deploy/monitoring/alertmanager.yaml: the job-wide alerts hold back
/// the per-gateway pages they explain (node-local mode: one gateway per node), and nothing
/// else.
#[test]
fn inhibition_rules_hold_back_per_gateway_pages_behind_a_job_wide_alert() {
    let dir = tempfile::tempdir().unwrap();
    let config = repo("deploy/monitoring/alertmanager.yaml");
    run_ok(Command::new("amtool").arg("check-config").arg(&config));
    let port = free_port();
    let mut cmd = Command::new("prometheus-alertmanager");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", dir.path().display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=");
    let _am = Proc::spawn("alertmanager", cmd, dir.path().join("alertmanager.log"));
    wait_for("Alertmanager to answer", Duration::from_secs(30), || {
        get_json(port, "/api/v2/status")
    });
    let alert = |name: &str, labels: &[(&str, &str)]| {
        let mut l =
            serde_json::json!({"alertname": name, "job": "kubegate-nodes", "severity": "critical"});
        for (k, v) in labels {
            l[*k] = (*v).into();
        }
        serde_json::json!({"labels": l, "annotations": {}})
    };
    let alerts = serde_json::json!([
        alert("KubegateNoReadyBackendEverywhere", &[]),
        alert("KubegateNoReadyBackend", &[("instance", "node-1")]),
        alert("KubegateNoReadyBackend", &[("instance", "node-2")]),
        alert("KubegateNotReady", &[("instance", "node-1")]),
        alert(
            "KubegateBackendNotReady",
            &[
                ("instance", "node-3"),
                ("backend", "cp-1"),
                ("severity", "warning")
            ]
        ),
        // Another job's gateways are not held back by this job's outage.
        alert(
            "KubegateNoReadyBackend",
            &[("instance", "edge-1"), ("job", "kubegate-edge")]
        ),
        // Unrelated to readiness: still pages.
        alert(
            "KubegateCertificateReloadFailed",
            &[("instance", "node-1"), ("severity", "warning")]
        ),
    ]);
    let body = alerts.to_string();
    let json = "Content-Type: application/json\r\n";
    let answer = plain_post(("127.0.0.1", port), "/api/v2/alerts", json, &body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Inhibition is worked out as alerts are listed; the source must be active first.
    let listed = wait_for(
        "the alerts listed with their inhibitions",
        Duration::from_secs(30),
        || {
            let v = get_json(port, "/api/v2/alerts")?;
            let list = v.as_array()?.clone();
            (list.len() == 7
                && list.iter().any(|a| {
                    a["status"]["inhibitedBy"]
                        .as_array()
                        .is_some_and(|i| !i.is_empty())
                }))
            .then_some(list)
        },
    );
    let inhibited = |name: &str, instance: &str| -> bool {
        listed
            .iter()
            .find(|a| {
                a["labels"]["alertname"] == name
                    && a["labels"]["instance"].as_str().unwrap_or("") == instance
            })
            .map(|a| !a["status"]["inhibitedBy"].as_array().unwrap().is_empty())
            .unwrap_or_else(|| panic!("{name} {instance} not listed: {listed:?}"))
    };
    assert!(
        !inhibited("KubegateNoReadyBackendEverywhere", ""),
        "the job-wide page goes out"
    );
    assert!(inhibited("KubegateNoReadyBackend", "node-1"));
    assert!(inhibited("KubegateNoReadyBackend", "node-2"));
    assert!(inhibited("KubegateNotReady", "node-1"));
    assert!(inhibited("KubegateBackendNotReady", "node-3"));
    assert!(
        !inhibited("KubegateNoReadyBackend", "edge-1"),
        "another job's gateway still pages"
    );
    assert!(!inhibited("KubegateCertificateReloadFailed", "node-1"));
}

/// deploy/monitoring's PodMonitor and ServiceMonitor find the shipped pods: their selectors
/// match the pods' labels, and the named port they scrape exists with the admin port of the
/// configuration the pod mounts.
#[test]
fn the_monitors_select_the_shipped_pods_and_their_admin_ports() {
    let yaml = |f: &str| -> Vec<serde_yaml_ng::Value> {
        let text = std::fs::read_to_string(repo(f)).unwrap();
        serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap())
            .collect()
    };
    let admin_port = |pod: &serde_yaml_ng::Value| -> u64 {
        let ports = pod["spec"]["containers"][0]["ports"].as_sequence().unwrap();
        let admin = ports
            .iter()
            .find(|p| p["name"] == "admin")
            .expect("a port named admin");
        admin["containerPort"].as_u64().unwrap()
    };
    let selects = |selector: &serde_yaml_ng::Value, labels: &serde_yaml_ng::Value| {
        selector
            .as_mapping()
            .unwrap()
            .iter()
            .all(|(k, v)| &labels[k.as_str().unwrap()] == v)
    };
    for (pod, config) in [
        (
            "deploy/static-pod/kubegate.yaml",
            "deploy/static-pod/kubegate-config.yaml",
        ),
        (
            "deploy/static-pod/kubegate-terminate.yaml",
            "deploy/static-pod/kubegate-terminate-config.yaml",
        ),
        (
            "deploy/node-local/kubegate-node-local.yaml",
            "deploy/node-local/kubegate.yaml",
        ),
    ] {
        let p = &yaml(pod)[0];
        let c: kubegate_config::Config =
            serde_yaml_ng::from_str(&std::fs::read_to_string(repo(config)).unwrap()).unwrap();
        assert_eq!(admin_port(p), u64::from(c.admin.address.port()), "{pod}");
    }
    let static_pod = &yaml("deploy/static-pod/kubegate.yaml")[0];
    let pm = &yaml("deploy/monitoring/podmonitor.yaml")[0];
    assert_eq!(pm["kind"], "PodMonitor");
    assert!(selects(
        &pm["spec"]["selector"]["matchLabels"],
        &static_pod["metadata"]["labels"]
    ));
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "admin");
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["path"], "/metrics");

    let node_local = &yaml("deploy/node-local/kubegate-node-local.yaml")[0];
    let docs = yaml("deploy/monitoring/servicemonitor.yaml");
    let (svc, sm) = (&docs[0], &docs[1]);
    assert_eq!(
        (svc["kind"].as_str(), sm["kind"].as_str()),
        (Some("Service"), Some("ServiceMonitor"))
    );
    assert!(selects(
        &svc["spec"]["selector"],
        &node_local["metadata"]["labels"]
    ));
    assert!(selects(
        &sm["spec"]["selector"]["matchLabels"],
        &svc["metadata"]["labels"]
    ));
    assert_eq!(
        svc["spec"]["ports"][0]["port"].as_u64(),
        Some(admin_port(node_local))
    );
    assert_eq!(
        sm["spec"]["endpoints"][0]["port"],
        svc["spec"]["ports"][0]["name"]
    );
}

/// `$name` and `${name}` references in `text`.
fn variables(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices('$') {
        let rest = text[i + 1..].trim_start_matches('{');
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn dashboard_is_well_formed() {
    let d = dashboard();
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    let defined: BTreeSet<String> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    for var in ["datasource", "job", "instance", "backend"] {
        assert!(defined.contains(var), "no ${var} variable");
    }
    let builtin = ["__rate_interval", "__interval", "__range"];
    let panels = panels(&d);
    assert!(!panels.is_empty(), "no panels");
    let mut ids = BTreeSet::new();
    for p in &panels {
        let title = p["title"].as_str().unwrap_or("");
        assert!(!title.is_empty(), "panel without a title: {p}");
        assert!(
            ids.insert(p["id"].as_i64().unwrap()),
            "duplicate panel id in {title}"
        );
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
        assert!(!unit.is_empty(), "{title}: no unit");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        let mut text = p["datasource"].to_string();
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or("");
            assert!(!expr.is_empty(), "{title}: empty query");
            // Every selector is scoped to the chosen gateways.
            for (i, _) in expr.match_indices("kubegate_") {
                let Some(open) = expr[i..].find(['{', '(', ')', ' ', '[']) else {
                    continue;
                };
                if expr[i + open..].starts_with('{') {
                    let selector = &expr[i + open..i + open + expr[i + open..].find('}').unwrap()];
                    assert!(
                        selector.contains(r#"job=~"$job""#)
                            && selector.contains(r#"instance=~"$instance""#),
                        "{title}: {selector} is not scoped to $job and $instance"
                    );
                } else {
                    panic!("{title}: {expr} reads a kubegate series without a selector");
                }
            }
            // A stat shows one number per gateway: never a sum over several.
            if p["type"] == "stat" {
                assert!(
                    expr.contains("by (instance") || expr.contains("by (version"),
                    "{title}: {expr} adds up gateways"
                );
            }
            text.push_str(expr);
            text.push_str(&t["datasource"].to_string());
        }
        for var in variables(&text) {
            assert!(
                defined.contains(&var) || builtin.contains(&var.as_str()),
                "{title}: ${var} is not defined"
            );
        }
    }
    // Variable queries may only use variables defined before them (Grafana resolves them in
    // order).
    let mut earlier = BTreeSet::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        let mut text = v["query"].to_string();
        text.push_str(&v["datasource"].to_string());
        for var in variables(&text) {
            assert!(
                earlier.contains(&var),
                "variable {} uses ${var}, which is not defined before it",
                v["name"]
            );
        }
        earlier.insert(v["name"].as_str().unwrap().to_string());
    }
}

#[test]
fn the_prometheus_rule_carries_the_shipped_alerts() {
    let alerts = yaml("dashboards/alerts.yaml");
    let rule = yaml("deploy/monitoring/prometheusrule.yaml");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        rule["spec"]["groups"], alerts["groups"],
        "copy dashboards/alerts.yaml's groups into deploy/monitoring/prometheusrule.yaml"
    );
    // Every file a comment of alerts.yaml names is shipped.
    let text = std::fs::read_to_string(repo("dashboards/alerts.yaml")).unwrap();
    for word in text.split_whitespace() {
        let word = word.trim_matches(|c: char| {
            !c.is_ascii_alphanumeric() && c != '/' && c != '.' && c != '-' && c != '_'
        });
        if word.starts_with("deploy/") || word.starts_with("dashboards/") {
            assert!(
                repo(word).exists(),
                "alerts.yaml names {word}, which does not exist"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool() {
    let bed = Cluster::new().replicas(2).start();
    let (kg, pki, sims, dir) = (&bed.kg, &bed.pki, &bed.sims, &bed.dir);
    sims[1].force_check("etcd", true);
    kg.wait_state("replica-2", "not_ready", Duration::from_secs(30));
    let _conns = open(kg, pki, 2).await;
    let metrics = kg.admin_body("/metrics");
    for family in [
        "kubegate_build_info",
        "kubegate_lifecycle_phase",
        "kubegate_backend_state",
        "kubegate_backend_probes_total",
        "kubegate_backend_probe_duration_seconds",
        "kubegate_backend_readyz_check_failing",
        "kubegate_backend_state_transitions_total",
        "kubegate_backend_connections",
        "kubegate_backend_connections_total",
        "kubegate_backend_bytes_total",
        "kubegate_config_reloads_total",
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "{family} missing"
        );
    }
    assert_eq!(
        kg.metric("kubegate_backend_state{backend=\"replica-2\",state=\"not_ready\"}"),
        1.0
    );
    assert_eq!(
        kg.metric("kubegate_backend_state{backend=\"replica-2\",state=\"ready\"}"),
        0.0
    );
    assert_eq!(
        kg.metric("kubegate_backend_readyz_check_failing{backend=\"replica-2\",check=\"etcd\"}"),
        1.0
    );
    promtool_check_metrics(dir.path(), &metrics);
}
