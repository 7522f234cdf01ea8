//! kubegate with Prometheus and Grafana: the alert rules, the dashboard, and a real Prometheus.
//!
//! 1. `alert_rules_pass_promtool_check_and_unit_tests`
//! 2. `every_metric_in_dashboard_and_alerts_is_exported`
//! 3. `prometheus_sees_one_fewer_ready_backend`
//! 4. `dashboard_is_well_formed`

use kubegate_e2e::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo("dashboards/kubegate.json")).unwrap())
        .expect("dashboard is valid JSON")
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
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo("dashboards"))
        .output()
        .expect("promtool (Debian package prometheus) is installed");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
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
    // exist from the start.
    let bed = Cluster::new().replicas(2).terminate().start();
    let (kg, pki, sims, dir) = (&bed.kg, &bed.pki, &bed.sims, &bed.dir);
    // Failing-check series exist only while a check fails: make one fail.
    sims[1].force_check("etcd", true);
    kg.wait_state("replica-2", "not_ready", Duration::from_secs(30));
    let mut conn = kg.connect(pki, true).await.unwrap();
    assert_eq!(conn.get("/version").await.unwrap().status, 200);
    let exposition = kg.admin_body("/metrics");
    // The terminate-mode families follow Prometheus' naming rules too.
    let path = dir.path().join("metrics.txt");
    std::fs::write(&path, &exposition).unwrap();
    let lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .expect("promtool (Debian package prometheus) is installed");
    assert!(
        lint.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
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

#[test]
fn prometheus_sees_one_fewer_ready_backend() {
    let bed = Cluster::new().replicas(3).start();
    let (kg, dir, sims) = (&bed.kg, &bed.dir, &bed.sims);
    let port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: kubegate\n    static_configs:\n      - targets: ['{}']\n",
            kg.admin
        ),
    )
    .unwrap();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    let _prom = Proc::spawn("prometheus", cmd, dir.path().join("prometheus.log"));
    let query = |q: &str| -> Option<f64> {
        let path = format!(
            "/api/v1/query?query={}",
            q.replace(' ', "%20")
                .replace('"', "%22")
                .replace('{', "%7B")
                .replace('}', "%7D")
                .replace('=', "%3D")
        );
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        let raw = plain_http(("127.0.0.1", port), "GET", &path);
        let body = raw.split_once("\r\n\r\n")?.1;
        // Chunked or not, the JSON object is the one between the outer braces.
        let json = &body[body.find('{')?..=body.rfind('}')?];
        let v: Value = serde_json::from_str(json).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    };
    let ready = "sum(kubegate_backend_state{job=\"kubegate\",state=\"ready\"})";
    wait_for(
        "Prometheus to see 3 ready backends",
        Duration::from_secs(30),
        || (query(ready)? == 3.0).then_some(()),
    );
    sims[1].force_check("etcd", true);
    wait_for(
        "Prometheus to see 2 ready backends",
        Duration::from_secs(15),
        || (query(ready)? == 2.0).then_some(()),
    );
    let failing = "kubegate_backend_readyz_check_failing{backend=\"replica-2\",check=\"etcd\"}";
    assert_eq!(query(failing), Some(1.0));
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
    assert!(defined.contains("datasource") && defined.contains("backend"));
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
