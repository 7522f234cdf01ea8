//! Short failover load tests in CI, with real processes and real kubectl alongside: L4
//! (`rolling-restart`, a freeze of the leader's replica and etcd going away, against kubegate
//! and HAProxy in kubeadm's configuration, with leader election through each) and L7 (kubegate's
//! terminate mode through a rolling restart, a crash under writes, a freeze and every replica
//! going down, a rolling upgrade whose versions serve different group-versions, beside HAProxy
//! terminating TLS; etcd away for 8 s, with and without holding requests; and a replica's
//! priority level saturated); a short soak
//! with faults; and the same scenarios
//! against a control plane the load test does not run; a small scale run (500 watches over 100
//! connections through a rolling restart); a herd of 100 informers starting at once, straight
//! and through joined reads, listing or with watch-lists. The full matrices, the scale runs and the 30-minute soak
//! are documented commands (docs/failover.md), not tests.

use kubegate_e2e::bin;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::sync::{Condvar, Mutex};

/// How many load tests run at once. Each drives a whole control plane of its own (its etcd,
/// replicas, gateway and ports) and spends its time on its faults' clocks, not the CPU: two
/// side by side kept 2 cores 13–15 % busy. Four at a time, beside the rest of the suite
/// (`./scripts/test`), finish in about the time the longest takes. Each asserts what its
/// clients saw, never speed. They start in the order of their names (libtest's): the longest,
/// the L4 and L7 runs, are named to start first.
const AT_ONCE: usize = 4;

/// Load tests running now, at most [`AT_ONCE`].
static RUNNING: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// A load test's place among the [`AT_ONCE`]; given back when dropped (a failed test too).
struct Slot;

impl Slot {
    /// Waits for a free place.
    fn take() -> Slot {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        while *running >= AT_ONCE {
            running = FREED.wait(running).unwrap_or_else(|e| e.into_inner());
        }
        *running += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        FREED.notify_one();
    }
}

/// A load test's working directory, taken with its [`Slot`] (both given back when dropped).
struct Workdir {
    dir: tempfile::TempDir,
    _slot: Slot,
}

impl Workdir {
    /// Waits for a free place; a new directory.
    fn take() -> Workdir {
        let _slot = Slot::take();
        let dir = tempfile::tempdir().unwrap();
        Workdir { dir, _slot }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn run(r: &Value, scenario: &str, gateway: &str) -> Value {
    row_where(r, [("scenario", scenario), ("gateway", gateway)], "")
}

/// The row of `gateway` in `phase` of a report's `rows` (`table` said when there is none).
fn phase_row(rows: &Value, table: &str, gateway: &str, phase: &str) -> Value {
    row_where(rows, [("gateway", gateway), ("phase", phase)], table)
}

/// The row of `rows` whose two fields have the values given (`said` when there is none).
fn row_where(rows: &Value, fields: [(&str, &str); 2], said: &str) -> Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| fields.iter().all(|(k, v)| r[*k] == *v))
        .unwrap_or_else(|| panic!("no row {fields:?}: {said}"))
        .clone()
}

fn total(v: &Value) -> u64 {
    v.as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum()
}

/// Runs `kubegate-loadtest run` in `dir` with `args` and the report and plot options; returns
/// the parsed report.
fn loadtest(dir: &Path, args: &str) -> Value {
    let (table, report) = subcommand(dir, &format!("run {args} --plot plot.svg"));
    assert!(table.contains("| scenario | gateway |"), "{table}");
    report
}

/// Short runs (`run --short`) of each of `scenarios` against each of `gateways` (both
/// comma-separated) in `dir`: the report, once every run is there, ended `ok`, carried traffic
/// and had kubectl running alongside.
fn short_runs(dir: &Path, scenarios: &str, gateways: &str) -> Value {
    let report = loadtest(
        dir,
        &format!("--scenario {scenarios} --gateways {gateways} --short"),
    );
    let runs = scenarios.split(',').count() * gateways.split(',').count();
    assert_eq!(report.as_array().unwrap().len(), runs, "{report}");
    for r in report.as_array().unwrap() {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(total(&r["requests"]) > 100, "too little traffic: {r}");
        assert!(
            r["kubectl_runs"].as_u64().unwrap() > 0,
            "kubectl ran alongside: {r}"
        );
    }
    report
}

/// Runs `kubegate-loadtest` with `line` (a subcommand and its options, as an operator types
/// them) in `dir`, its files in `dir/work` and its report in `dir/report.json`; asserts it
/// succeeded and returns its table and the parsed report.
fn subcommand(dir: &Path, line: &str) -> (String, Value) {
    subcommand_with(dir, line, &[])
}

/// [`subcommand`], with `env` set for the tool.
fn subcommand_with(dir: &Path, line: &str, env: &[(&str, &str)]) -> (String, Value) {
    // Relative paths, as `scripts/demo` passes them: the configuration files the tool writes
    // must still point at the right certificates.
    let out = Command::new(bin("kubegate-loadtest"))
        .envs(env.iter().copied())
        .args(line.split_whitespace())
        .current_dir(dir)
        .args(["--dir", "work", "--json", "report.json"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap())
        .expect("well-formed JSON");
    (table, report)
}

fn leader(r: &Value) -> (usize, u64) {
    (
        r["leader"]["lost"].as_array().unwrap().len(),
        r["leader"]["longest_gap_ms"].as_u64().unwrap(),
    )
}

/// Asserts that every failure the clients of run `r` saw is explained by its fault.
fn all_explained(r: &Value) {
    let unexplained = r["explanation"]["unexplained"].as_array().unwrap();
    assert!(unexplained.is_empty(), "{r}");
}

/// Asserts that every request of run `r` that failed at first was answered with a status (5xx
/// or 429), never reset or left to time out.
fn answered_with_a_status(r: &Value) {
    for class in r["first_attempt_failures"].as_object().unwrap().keys() {
        assert!(
            class == "http_5xx" || class == "http_429",
            "{class}: every request answered with a status: {r}"
        );
    }
}

/// Asserts that the leader of run `r` kept its lease: no renewal failed past the renew
/// deadline, and no two writes of the Lease were a lease duration (15 s) apart, so no other
/// candidate could have taken it, and none did. How short the gaps were is the report's
/// figure: on a loaded machine one renewal's new connection can take seconds.
fn kept_its_lease(r: &Value) {
    let (lost, gap) = leader(r);
    assert_eq!(lost, 0, "{r}");
    assert!(gap < 15_000, "renewal gap {gap} ms: {r}");
    assert_eq!(r["leader"]["changes"], 0, "{r}");
}

#[test]
fn a_leader_and_its_clients_through_l4_faults_against_kubegate_and_haproxy() {
    let dir = Workdir::take();
    let report = short_runs(
        dir.path(),
        "rolling-restart,freeze-leader,etcd-down",
        "kubegate,haproxy-kubeadm",
    );
    let plot = dir.path().join("plot.svg");

    // kubegate: a rolling restart with a 5 s shutdown delay costs clients nothing.
    let rr = run(&report, "rolling-restart", "kubegate");
    assert_eq!(total(&rr["client_go_failures"]), 0, "{rr}");
    // kubegate closes nothing itself. A request that races a replica's own close of its
    // connections as it exits (after its in-flight requests drained) is reset and retried by
    // the client: the apiserver does the same, and at L4 kubegate cannot see into it. On a
    // loaded machine a CI run saw one such race.
    let first = total(&rr["first_attempt_failures"]);
    let replicas_closing: u64 = rr["explanation"]["explained"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            k.contains("first attempt") && k.contains("the replica closed its connections")
        })
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert_eq!(first, replicas_closing, "{rr}");
    assert_eq!(
        rr["watch"]["relists"], 0,
        "watches resume, never relist: {rr}"
    );

    // The leader keeps its lease through a rolling restart.
    kept_its_lease(&rr);

    // kubegate: clients are moved off a frozen replica by kubegate (probe timeouts, ~2 s
    // here), not by client-go's 30 s + 15 s ping timeout, so the leader whose renewals went
    // through it keeps its lease. How fast is the report's business; these bounds only have
    // to tell the two apart on a loaded machine.
    let fz = run(&report, "freeze-leader", "kubegate");
    let recovery = fz["recovery_ms"].as_u64().unwrap();
    assert!(recovery < 20_000, "recovery {recovery} ms: {fz}");
    kept_its_lease(&fz);
    // The peer ran the same scenario and was measured (its figures are the report's).
    let peer = run(&report, "freeze-leader", "haproxy-kubeadm");
    assert_eq!(peer["status"], "ok", "{peer}");

    // etcd gone under every replica: kubegate moves nobody (a failure every replica shares),
    // so no more watches break than behind HAProxy, which never moves anyone.
    let ours = run(&report, "etcd-down", "kubegate");
    let theirs = run(&report, "etcd-down", "haproxy-kubeadm");
    let breaks = |r: &Value| r["watch"]["breaks"].as_array().unwrap().len();
    assert!(breaks(&ours) <= breaks(&theirs), "{ours}\n{theirs}");

    // Every failure kubegate's clients saw is explained by the fault and how it caused it.
    for r in report.as_array().unwrap() {
        if r["gateway"] == "kubegate" {
            all_explained(r);
        }
    }

    // The plot is a well-formed SVG document.
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    let parsed = Command::new("python3")
        .args(["-c", "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); assert r.tag.endswith('svg'), r.tag"])
        .arg(&plot)
        .status()
        .unwrap();
    assert!(parsed.success(), "SVG does not parse as XML");
}

/// What clients of a run noticed: failures after client-go's retries, ambiguous writes,
/// failed kubectl runs, watch breaks.
fn noticed(r: &Value) -> u64 {
    total(&r["client_go_failures"])
        + r["ambiguous_writes"]["total"].as_u64().unwrap()
        + r["kubectl_failures"].as_u64().unwrap()
        + r["watch"]["breaks"].as_array().unwrap().len() as u64
}

#[test]
fn a_client_notices_nothing_of_l7_faults_through_terminate_mode() {
    let dir = Workdir::take();
    let faults = short_runs(
        dir.path(),
        "crash-writes,freeze,all-down,upgrade",
        "kubegate-l7",
    );
    let side = tempfile::tempdir().unwrap();
    let restart = short_runs(side.path(), "rolling-restart", "kubegate-l7,haproxy-l7");
    for r in faults
        .as_array()
        .unwrap()
        .iter()
        .chain(restart.as_array().unwrap())
    {
        let a = &r["ambiguous_writes"];
        assert_eq!(
            a["total"].as_u64().unwrap(),
            a["applied"].as_u64().unwrap() + a["not_applied"].as_u64().unwrap(),
            "every ambiguous write was looked up: {r}"
        );
    }

    // Through a rolling restart, a crash under writes, a freeze and a rolling upgrade to a
    // version with other group-versions: no failed first attempt but ambiguous writes (in the
    // upgrade, no 404 for what discovery showed), no kubectl failure (its `get --watch`
    // included), no watch break seen by a client, no relist.
    let upgrade = run(&faults, "upgrade", "kubegate-l7");
    assert!(
        upgrade["requests"]["discovered"].as_u64().unwrap() > 50,
        "{upgrade}"
    );
    for scenario in ["rolling-restart", "crash-writes", "freeze", "upgrade"] {
        let report = if scenario == "rolling-restart" {
            &restart
        } else {
            &faults
        };
        let r = run(report, scenario, "kubegate-l7");
        assert_eq!(total(&r["first_attempt_failures"]), 0, "{scenario}: {r}");
        assert_eq!(total(&r["client_go_failures"]), 0, "{scenario}: {r}");
        assert_eq!(r["kubectl_failures"], 0, "{scenario}: {r}");
        assert_eq!(
            r["watch"]["breaks"].as_array().unwrap().len(),
            0,
            "{scenario}: {r}"
        );
        assert_eq!(r["watch"]["relists"], 0, "{scenario}: {r}");
    }
    // The watches did move: kubegate continued them on other replicas.
    let rr = run(&restart, "rolling-restart", "kubegate-l7");
    assert!(
        !rr["watch"]["gateway_resumes"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{rr}"
    );
    // Requests spread evenly over the replicas after the restart: each restarted replica has
    // its share back (an L4 balancer leaves one with almost none). Alone this run measures
    // at most 1.2; beside three other load tests on two cores the replica restarted last was
    // once measured at 62 requests against 78 (1.26), so the bound leaves room for that.
    let share = rr["replica_share"]["max_over_min"].as_f64();
    assert!(
        share.is_some_and(|s| s <= 1.5),
        "replica share {share:?}: {rr}"
    );

    // Every replica down: kubegate stays up and answers every request itself (a 503 Status,
    // which client-go retries), nothing breaks under a client, and it serves again once its
    // probes find the first replica ready: within interval × rise (2 s) of it, and the client
    // waits out the 503's `Retry-After` (1 s) before it asks again. (An idle machine measured
    // 1.06 s; docs/failover.md.)
    let down = run(&faults, "all-down", "kubegate-l7");
    answered_with_a_status(&down);
    assert_eq!(total(&down["client_go_failures"]), 0, "{down}");
    let again = down["served_again_ms"].as_i64().unwrap();
    assert!(
        again <= 2_000 + 1_000,
        "served again {again} ms after the first ready: {down}"
    );

    // Beside HAProxy terminating TLS in the same rolling restart: never more noticed, and
    // fewer whenever HAProxy's clients noticed anything.
    let peer = run(&restart, "rolling-restart", "haproxy-l7");
    let (ours, theirs) = (noticed(&rr), noticed(&peer));
    assert!(
        ours <= theirs && (theirs == 0 || ours < theirs),
        "kubegate-l7 {ours}, haproxy-l7 {theirs}: {rr}\n{peer}"
    );
}

/// etcd away for 8 s (`blackout`, docs/failover.md's command as written): no replica is ready,
/// with and without `terminate.hold_when_none_ready`, beside HAProxy. Through kubegate every request is
/// answered (a status, never a reset or a timeout), no watch breaks, every failure is explained,
/// and it serves again once a replica is ready. Which does better is the documented run's
/// figures, not asserted here.
#[test]
fn a_blackout_through_kubegate_with_and_without_a_hold_breaks_no_watch() {
    let dir = Workdir::take();
    let report = short_runs(
        dir.path(),
        "blackout",
        "kubegate-l7,kubegate-l7-hold,haproxy-l7",
    );
    for gateway in ["kubegate-l7", "kubegate-l7-hold"] {
        let r = run(&report, "blackout", gateway);
        answered_with_a_status(&r);
        assert_eq!(r["watch"]["breaks"].as_array().unwrap().len(), 0, "{r}");
        all_explained(&r);
        assert!(r["served_again_ms"].is_number(), "{r}");
    }
}

/// The demo's scenario over IPv6: with `KUBEGATE_LOOPBACK=::1` the test bed puts etcd, the
/// replicas, kubegate and its clients on `::1`; a rolling restart through both planes, their
/// clients served and kubectl running alongside.
#[test]
fn a_rolling_restart_over_ipv6_loopback_through_both_planes() {
    let dir = Workdir::take();
    let (table, report) = subcommand_with(
        dir.path(),
        "run --scenario rolling-restart --gateways kubegate,kubegate-l7 --short",
        &[("KUBEGATE_LOOPBACK", "::1")],
    );
    assert!(table.contains("| scenario | gateway |"), "{table}");
    for gateway in ["kubegate", "kubegate-l7"] {
        let r = run(&report, "rolling-restart", gateway);
        assert_eq!(r["status"], "ok", "{r}");
        assert!(total(&r["requests"]) > 100, "too little traffic: {r}");
        assert!(r["kubectl_runs"].as_u64().unwrap() > 0, "{r}");
    }
    answered_with_a_status(&run(&report, "rolling-restart", "kubegate-l7"));
    let config = dir
        .path()
        .join("work/rolling-restart/kubegate-l7/gateway/kubegate.yaml");
    let config = std::fs::read_to_string(config).unwrap();
    assert!(config.contains("address: '[::1]:"), "{config}");
}

/// One replica's `workload-low` saturated for 20 s by traffic no gateway sees (`apf-hot`,
/// docs/failover.md's command as written), the clients a service account's: HAProxy's clients
/// meet the replica's 429s; kubegate's meet none of them (at most 1 % of HAProxy's) and lose
/// no leadership; every failure either saw is explained.
#[test]
fn a_replica_whose_priority_level_is_saturated_rejects_no_client_of_kubegate() {
    let dir = Workdir::take();
    let report = short_runs(dir.path(), "apf-hot", "kubegate-l7,haproxy-l7");
    let ours = run(&report, "apf-hot", "kubegate-l7");
    let theirs = run(&report, "apf-hot", "haproxy-l7");
    let rejected = |r: &Value| {
        r["first_attempt_failures"]["http_429"]
            .as_u64()
            .unwrap_or(0)
    };
    assert!(
        rejected(&theirs) > 0,
        "the fault reached HAProxy's clients: {theirs}"
    );
    assert!(
        rejected(&ours) * 100 <= rejected(&theirs),
        "kubegate-l7 {ours}\nhaproxy-l7 {theirs}"
    );
    kept_its_lease(&ours);
    assert_eq!(total(&ours["client_go_failures"]), 0, "{ours}");
    all_explained(&ours);
    all_explained(&theirs);
}

/// A 90-second soak with a fixed fault plan: every acknowledged create is in the store, none is
/// applied twice, kubegate never restarts, its descriptors return to their baseline, and every
/// client-visible failure lies inside a fault's window. (The 30-minute soak is a documented
/// command.)
#[test]
fn a_short_soak_loses_nothing_and_kubegate_never_restarts() {
    let dir = Workdir::take();
    let (table, report) = subcommand(dir.path(), "soak --duration 90s --seed 3 --plot soak.svg");
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 9, "{table}");
    for what in [
        "every failure, break and lost leadership explained",
        "no leadership lost on the terminate listener",
    ] {
        assert!(checks.iter().any(|c| c["what"] == what), "{what}: {table}");
    }
    assert!(checks.iter().all(|c| c["passed"] == true), "{table}");
    assert!(report["faults"].as_array().unwrap().len() >= 5, "{table}");
    for l in report["listeners"].as_array().unwrap() {
        assert!(l["creates_acknowledged"].as_u64().unwrap() > 100, "{table}");
        assert!(l["requests"].as_u64().unwrap() > 500, "{table}");
    }
    let svg = std::fs::read_to_string(dir.path().join("soak.svg")).unwrap();
    assert!(svg.contains("descriptors") && svg.contains("<polyline"));
}

/// The same scenarios against a control plane the load test does not run: replicas and etcd
/// started here, a control-plane file naming their addresses and the commands that freeze them
/// and fail their readiness (signals by PID, the simulator's fault port). The report names the
/// file's replicas, and a scenario whose command the file lacks says so.
#[test]
fn an_external_control_plane_runs_the_same_scenarios() {
    use kubegate_testbed::{Etcd, Replica, ReplicaFlags};
    let dir = Workdir::take();
    let pki = dir.path().join("pki");
    kubegate_testbed::pki::write_kubeadm_layout(&pki, "https://127.0.0.1:6443").unwrap();
    let etcd_dir = dir.path().join("etcd");
    std::fs::create_dir_all(&etcd_dir).unwrap();
    let etcd = Etcd::new(&etcd_dir).start().unwrap();
    let mut replicas = Vec::new();
    for i in 1..=3 {
        let mut flags = ReplicaFlags::new(
            &format!("cp-{i}"),
            (pki.join("apiserver.crt"), pki.join("apiserver.key")),
            &pki.join("ca.crt"),
        );
        flags.front_proxy_ca = Some(pki.join("front-proxy-ca.crt"));
        flags.etcd = Some(etcd.url());
        flags.startup = Some("0s".into());
        let log = dir.path().join(format!("cp-{i}.log"));
        replicas.push(Replica::start(flags, &log).unwrap());
    }
    let mut file = String::from("pki: pki\ncommand_timeout: 30s\nreplicas:\n");
    for r in &replicas {
        let pid = r.pid().unwrap();
        file.push_str(&format!(
            "  - name: {}\n    address: {}\n    freeze: kill -STOP {pid}\n    thaw: kill -CONT {pid}\n    fail_readyz: curl -sf -X POST 'http://127.0.0.1:{}/fail?check=etcd'\n    pass_readyz: curl -sf -X POST 'http://127.0.0.1:{}/pass?check=etcd'\n",
            r.name(),
            r.addr(),
            r.flags.fault_port,
            r.flags.fault_port
        ));
    }
    std::fs::write(dir.path().join("control-plane.yaml"), file).unwrap();
    let report = loadtest(
        dir.path(),
        "--control-plane control-plane.yaml --scenario freeze,not-ready --gateways kubegate \
         --short --no-kubectl",
    );
    for scenario in ["freeze", "not-ready"] {
        let r = run(&report, scenario, "kubegate");
        assert_eq!(r["status"], "ok", "{r}");
        assert!(total(&r["requests"]) > 100, "{r}");
        let events: Vec<&str> = r["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[1].as_str().unwrap())
            .collect();
        assert!(events.iter().any(|e| e.contains("cp-1")), "{events:?}");
        assert_eq!(leader(&r).0, 0, "{r}");
    }
    // A crash needs a `kill` command the file does not have.
    let out = Command::new(bin("kubegate-loadtest"))
        .current_dir(dir.path())
        .args(
            "run --control-plane control-plane.yaml --scenario crash --gateways kubegate --short \
             --no-kubectl --dir work2"
                .split_whitespace(),
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = kubegate_e2e::said(&out);
    assert!(said.contains("no `kill` command for cp-1"), "{said}");
}

#[test]
fn a_small_scale_run_relists_nothing_through_terminate_mode() {
    let dir = Workdir::take();
    // Four groups: every busy informer hears an event every half second, later when a loaded
    // machine slows the writer down. A third of the informers are quiet (bookmarks only, once
    // a minute: their position is from before the restarted replicas started, so those
    // replicas' watch caches do not reach it) and a tenth watch the custom resource whose
    // cache initializes 5 s after a restarted replica is ready.
    let (table, report) = subcommand(
        dir.path(),
        "scale --connections 100 --watches 500 --groups 4 --gateways kubegate-l7,kubegate --short --settle 30s --plot scale.svg",
    );
    assert!(
        table.contains("| watches (connections; quiet, custom) | gateway |"),
        "{table}"
    );
    let of = |gateway: &str| {
        report
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["gateway"] == gateway)
            .unwrap_or_else(|| panic!("no run of {gateway}: {report}"))
            .clone()
    };
    let n = |r: &Value, k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    let l7 = of("kubegate-l7");
    assert_eq!(l7["status"], "ok", "{l7}");
    assert!(
        n(&l7, "quiet_watches") > 100 && n(&l7, "custom_watches") > 0,
        "{l7}"
    );
    // Terminate mode moved the watches of each restarted replica itself, quiet ones and the
    // custom resource's included: no client saw a break, a 410 or a 429, none relisted, no
    // LIST reached a replica, and every informer heard every write once, in order.
    for k in [
        "breaks",
        "relists",
        "lists_at_replicas",
        "expired",
        "throttled",
        "gaps",
        "duplicates",
    ] {
        assert_eq!(n(&l7, k), 0, "{k}: {l7}");
    }
    assert!(n(&l7, "gateway_resumes") > 0, "{l7}");
    // And the replica restarted last got its share back within the settle period.
    assert!(l7["share_even_after_s"].is_number(), "{l7}");
    assert!(l7["share_over_mean"].as_f64().unwrap() <= 1.2, "{l7}");
    // Every busy informer kept hearing events throughout: the longest silence stays well
    // under a bookmark interval past the write period.
    assert!(n(&l7, "longest_silence_ms") < 20_000, "{l7}");
    // Through passthrough the same restarts break the watches the replicas held.
    let l4 = of("kubegate");
    assert_eq!(l4["status"], "ok", "{l4}");
    assert!(n(&l4, "breaks") > 0, "{l4}");
    // Every client gone, kubegate is back to the descriptors it had at rest before any client
    // (its one upstream connection to each replica included; the slack is for health probes in
    // flight): the connections the resumes opened were given back once idle, and those the
    // restarts drained were let go.
    for r in [&l7, &l4] {
        assert!(
            n(&r["settled"], "fds") <= n(&r["idle"], "fds") + 3,
            "descriptors after the run: {r}"
        );
    }
    let svg = std::fs::read_to_string(dir.path().join("scale.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("kubegate-l7"),
        "{svg}"
    );
}

/// A short runaway-client run (`kubegate-loadtest storm`), the runaway a service account's
/// token client that kubegate names with a TokenReview: under its `service_accounts` rule it
/// is answered 429 with `Retry-After` and retried, never reset, while the other users and
/// kubectl fail nothing; without the rule nothing is limited. (A certificate runaway is
/// ruled by the same code, tested in tests/dispatch.rs.) The latencies are the documented
/// run's figures (docs/failover.md), not asserted here.
#[test]
fn a_runaway_identity_under_its_rule_gets_429_not_resets() {
    let dir = Workdir::take();
    let (table, rows) = subcommand(
        dir.path(),
        "storm --objects 300 --concurrency 8 --phase 6s --runaway token",
    );
    let row = |gateway: &str, phase: &str| phase_row(&rows, &table, gateway, phase);
    for r in rows.as_array().unwrap() {
        assert_eq!(r["others"]["failed"], 0, "{r}");
        assert!(r["others"]["count"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["kubectl"]["failed"], 0, "{r}");
        assert_eq!(r["storm_failed"], 0, "{r}");
    }
    let free = row("kubegate-l7", "storm");
    assert_eq!(free["storm_429"], 0, "{free}");
    assert!(free["storm_ok"].as_u64().unwrap() > 0, "{free}");
    let limited = row("kubegate-l7-limited", "storm");
    assert!(limited["storm_429"].as_u64().unwrap() > 0, "{limited}");
    assert!(limited["storm_ok"].as_u64().unwrap() > 0, "{limited}");
}

/// A short runaway run (`kubegate-loadtest runaway`): a service account on 100 connections
/// LISTing every ConfigMap each second, beside kubectl, other users and a leader. Straight to
/// the replicas the shed phase is more storm; through two kubegates following the cluster's
/// shed object, `kubegate shed --kubeconfig` turns it away at both (each gateway's relief
/// measured) and the replicas get at most a tenth of what they got direct; with
/// `terminate.auto_shed`, the level's rejections get the runaway held back, and the replicas
/// get at most a tenth of its requests direct. No leadership is lost through kubegate, kubectl
/// fails nothing, and the cost table names the runaway first. The latencies and the 2,000-
/// connection run beside HAProxy and Envoy are the documented run's (docs/failover.md).
#[test]
fn a_runaway_shed_through_the_cluster_or_on_its_own_stops_reaching_the_replicas() {
    let dir = Workdir::take();
    let (table, rows) = subcommand(
        dir.path(),
        "runaway --objects 50 --connections 100 --interval 1s --phase 8s --gateways direct,kubegate-l7-shed,kubegate-l7-auto",
    );
    let row = |gateway: &str, phase: &str| phase_row(&rows, &table, gateway, phase);
    let at_replicas = |r: &serde_json::Value| r["runaway_at_replicas"].as_u64().unwrap();
    let direct = row("direct", "shed");
    assert!(at_replicas(&direct) > 0, "{table}");
    for r in rows.as_array().unwrap() {
        assert_eq!(r["kubectl"]["failed"], 0, "{table}");
        if r["gateway"] != "direct" {
            assert_eq!(r["leaderships_lost"], 0, "{table}");
        }
    }
    let shed = row("kubegate-l7-shed", "shed");
    let relief = shed["relief_ms"].as_array().unwrap();
    assert_eq!(relief.len(), 2, "both gateways: {table}");
    for ms in relief {
        assert!(
            ms.as_u64().unwrap() < 60_000,
            "a gateway never turned it away: {table}"
        );
    }
    assert!(at_replicas(&shed) * 10 <= at_replicas(&direct), "{table}");
    let storm = row("kubegate-l7-shed", "storm");
    assert!(
        storm["named_first_ms"].as_u64().is_some(),
        "never named first: {table}"
    );
    let auto = row("kubegate-l7-auto", "shed");
    assert!(at_replicas(&auto) * 10 <= at_replicas(&direct), "{table}");
    let relief = row("kubegate-l7-auto", "storm")["relief_ms"].clone();
    assert!(
        relief[0].as_u64().unwrap() < 60_000,
        "never held back: {table}"
    );
}

/// A short herd run (`kubegate-loadtest herd`): 100 kube-proxy-like informers of one service
/// account, each with its own token (as kube-proxy pods), start at once, straight to the
/// replicas and through kubegate with joined reads and shared watches across senders: each
/// lists Services and EndpointSlices, then watches both through 20 new EndpointSlices. Every
/// informer gets its lists and hears every write either way; through kubegate the replicas
/// serve a few LISTs and watches, not two per informer, and the reviews that allowed the tokens
/// to share. The documented runs (5,000 informers beside HAProxy and Envoy,
/// docs/failover.md) have the figures.
#[test]
fn a_herd_of_identical_informers_reaches_the_replicas_a_few_times_through_kubegate() {
    herd("");
}

/// The same herd, its informers starting with watch-lists (`--watch-list`, as client-go's
/// since 1.35): a few watch-lists at the replicas through kubegate, not two per informer.
#[test]
fn a_herd_of_watch_list_informers_reaches_the_replicas_a_few_times_through_kubegate() {
    herd("--watch-list");
}

/// Runs the short herd with `more` arguments and asserts what every informer saw and what
/// reached the replicas.
fn herd(more: &str) {
    let dir = Workdir::take();
    let line =
        "herd --informers 100 --objects 50 --tokens 100 --gateways direct,kubegate-l7-shared";
    let (table, rows) = subcommand(dir.path(), &format!("{line} {more}"));
    let row = |gateway: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["gateway"] == gateway)
            .unwrap_or_else(|| panic!("no row {gateway}: {table}"))
            .clone()
    };
    let direct = row("direct");
    let joined = row("kubegate-l7-shared");
    for r in [&direct, &joined] {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["listed"], 100, "{r}");
        assert_eq!(r["churn"]["watching"], 100, "{r}");
        assert_eq!(
            r["churn"]["events"], 2000,
            "every informer heard every write: {r}"
        );
    }
    assert_eq!(direct["lists_at_replicas"], 200, "{direct}");
    assert_eq!(direct["churn"]["watches_at_replicas"], 200, "{direct}");
    // One shared watch of each resource for the 100 (a few: informers that listed from a
    // replica whose cache stood at an older position open another, up to 4 of each).
    let watches = joined["churn"]["watches_at_replicas"].as_u64().unwrap();
    // After watch-lists, the shared watches the joined ones watched on from are open already
    // when the churn's watches come: they may need none more.
    let least = if more.contains("--watch-list") { 0 } else { 2 };
    assert!((least..=10).contains(&watches), "{joined}");
    // A few: those arriving while the first is in flight join it (the replicas answer after
    // 100 ms); a loaded machine spreads the starts, and the bound leaves room for that.
    let lists = joined["lists_at_replicas"].as_u64().unwrap();
    assert!((2..=40).contains(&lists), "{joined}");
    assert!(
        joined["bytes_from_replicas"].as_u64().unwrap() * 4
            < direct["bytes_from_replicas"].as_u64().unwrap(),
        "{table}"
    );
    // Every token was named (a TokenReview each), and the LISTs of different tokens shared
    // only after a SubjectAccessReview (the reviews of the start; the watches' come after).
    assert_eq!(direct["reviews_at_replicas"], 0, "{direct}");
    let reviews = joined["reviews_at_replicas"].as_u64().unwrap();
    assert!(reviews > 100, "{joined}");
}

/// Two clusters behind one kubegate (`kubegate-loadtest clusters`), each its own etcd, CA and
/// replicas, picked by server name: a rolling restart in cluster a, in passthrough and in
/// terminate mode, while cluster b carries the same traffic; b's clients see no failure, no
/// broken watch and no change of leader. Then kubegate serving 1 and 4 clusters of 3
/// replicas under traffic to each, in both modes, and a reload adding a fifth: it serves, and
/// the other clusters' clients see nothing. Latency and memory are the documented run's figures
/// (docs/failover.md), not asserted here.
#[test]
fn a_rolling_restart_in_one_cluster_is_not_seen_by_the_other_and_a_reload_adds_one() {
    let dir = Workdir::take();
    let (table, report) = subcommand(
        dir.path(),
        "clusters --scenario rolling-restart --modes passthrough,terminate --sizes 1,4 --short",
    );
    assert!(table.contains("| scenario | mode | cluster |"), "{table}");
    let runs = report["isolation"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{table}");
    for run in runs {
        assert_eq!(run["status"], "ok", "{table}");
        let (a, b) = (&run["faulted"]["report"], &run["steady"]["report"]);
        // The restarts happened in a, under a's traffic ...
        let restarts = a["events"].as_array().unwrap();
        assert!(
            restarts
                .iter()
                .any(|e| e[1].as_str().unwrap().contains("replica-2")),
            "{a}"
        );
        assert!(total(&a["requests"]) > 0, "{a}");
        // ... and b carried traffic through them, seeing nothing.
        assert!(total(&b["requests"]) > 0, "{b}");
        assert_eq!(total(&b["first_attempt_failures"]), 0, "{b}");
        assert_eq!(total(&b["client_go_failures"]), 0, "{b}");
        assert_eq!(b["watch"]["breaks"].as_array().unwrap().len(), 0, "{b}");
        assert_eq!(b["leader"]["changes"], 0, "{b}");
        assert!(b["watch"]["events"].as_u64().unwrap() > 0, "{b}");
    }
    // The memory figure in each mode: 1 and 4 clusters, then a reload adding a fifth.
    let rows = report["scale"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{table}");
    for row in rows {
        assert_eq!(row["status"], "ok", "{table}");
        assert!(row["requests"].as_u64().unwrap() > 0, "{row}");
        assert!(row["idle_rss_kib"].as_u64().unwrap() > 0, "{row}");
    }
    let reloads = report["reloads"].as_array().unwrap();
    let modes: Vec<&str> = reloads
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["passthrough", "terminate"], "{table}");
    for reload in reloads {
        assert_eq!(reload["status"], "ok", "{table}");
        assert_eq!(reload["clusters_before"], 4, "{reload}");
        assert_eq!(reload["new_cluster_answered"], true, "{reload}");
        assert_eq!(reload["failures"], 0, "{reload}");
        assert_eq!(reload["watch_breaks"], 0, "{reload}");
        assert!(reload["requests"].as_u64().unwrap() > 0, "{reload}");
    }
}
