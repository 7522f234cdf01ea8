//! The keepalived set-up of `deploy/keepalived/keepalived.conf`, run with keepalived itself:
//! two nodes as network namespaces on one bridge (VRRP between them), each with a simulated
//! apiserver, kubegate (the static pod's configuration) and keepalived with the shipped file
//! (only the VIP changed, to a link-local address: nothing leaves this machine's namespaces).
//! The first node's admin endpoint serves TLS (`admin.tls`, keepalived's `ADMIN` as shipped),
//! the second's plain HTTP (`ADMIN` set to http).
//!
//! 1. `the_vip_follows_kubegate_and_rides_out_an_outage_every_node_sees`:
//!    - (a) the node holding the VIP alone sees no ready apiserver: the VIP moves;
//!    - (b) every apiserver fails /readyz for every node: the VIP stays where it is;
//!    - (c) kubegate on the node holding the VIP stops: the VIP moves within its shutdown
//!      delay; a watch and a writing client held through the VIP from a third namespace (the
//!      clients) are measured: when and how they end (docs/deploy.md, "What a client sees
//!      when the VIP moves").

use kubegate_e2e::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);
const VIP: &str = "169.254.77.100";

fn ip(args: &[&str]) -> String {
    run_ok(Command::new("ip").args(args))
}

/// A process started in its own process group inside a namespace, ended (with every process
/// it started, keepalived's VRRP child among them) through that group when dropped.
struct Group {
    child: std::process::Child,
    log: PathBuf,
}

impl Group {
    fn spawn(ns: &str, program: &Path, args: &[&str], log: PathBuf) -> Group {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(program)
            .args(args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Group { child, log }
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- {} ----\n{}", self.log.display(), self.log());
        }
        self.signal("-KILL");
        let _ = self.child.wait();
    }
}

/// One node: a network namespace with `eth0` on the bridge, and what runs in it.
struct NodeNs {
    ns: String,
    procs: Vec<Group>,
    /// kubegate's admin endpoint, as keepalived's checks reach it.
    admin: String,
}

impl NodeNs {
    /// HTTP GET (or POST) on the namespace's loopback; the status line's code, 0 on failure.
    fn http(&self, method: &str, url: &str) -> u16 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "curl",
                "-s",
                "-k",
                "-o",
                "/dev/null",
            ])
            .args(["-w", "%{http_code}", "--max-time", "2", "-X", method, url])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
    }

    fn holds_vip(&self) -> bool {
        ip(&["-n", &self.ns, "-4", "addr", "show", "dev", "eth0"]).contains(VIP)
    }
}

/// The namespaces, deleted (after what runs in them) when dropped.
struct Lab {
    switch: String,
    nodes: Vec<NodeNs>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.procs.clear();
            let _ = Command::new("ip").args(["netns", "del", &n.ns]).status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch])
            .status();
    }
}

/// Adds a client namespace on the bridge at 169.254.77.50.
fn client_ns(lab: &Lab) -> String {
    let id = std::process::id();
    let ns = format!("kgc-{id}");
    ip(&["netns", "add", &ns]);
    plug(&ns, &lab.switch, ("kgci", "kgco", id), "169.254.77.50/24");
    ns
}

/// Links namespace `ns` to the bridge in `switch` by a veth pair (named from `names`), its
/// end in `ns` up as `eth0` with address `addr`.
fn plug(ns: &str, switch: &str, names: (&str, &str, u32), addr: &str) {
    let (inner, outer) = (
        format!("{}-{}", names.0, names.2),
        format!("{}-{}", names.1, names.2),
    );
    ip(&[
        "link", "add", &inner, "type", "veth", "peer", "name", &outer,
    ]);
    ip(&["link", "set", &inner, "netns", ns]);
    ip(&["link", "set", &outer, "netns", switch]);
    ip(&["-n", ns, "link", "set", &inner, "name", "eth0"]);
    ip(&["-n", ns, "addr", "add", addr, "dev", "eth0"]);
    ip(&["-n", ns, "link", "set", "eth0", "up"]);
    ip(&["-n", ns, "link", "set", "lo", "up"]);
    ip(&["-n", switch, "link", "set", &outer, "master", "br0"]);
    ip(&["-n", switch, "link", "set", &outer, "up"]);
}

fn lab(n: usize) -> Lab {
    let id = std::process::id();
    let switch = format!("kgsw-{id}");
    ip(&["netns", "add", &switch]);
    ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
    ip(&["-n", &switch, "link", "set", "br0", "up"]);
    let mut nodes = Vec::new();
    for i in 0..n {
        let ns = format!("kgn{i}-{id}");
        ip(&["netns", "add", &ns]);
        let names = (format!("kgi{i}"), format!("kgo{i}"));
        let addr = format!("169.254.77.{}/24", i + 1);
        plug(&ns, &switch, (&names.0, &names.1, id), &addr);
        nodes.push(NodeNs {
            ns,
            procs: Vec::new(),
            admin: String::new(),
        });
    }
    Lab { switch, nodes }
}

#[test]
fn the_vip_follows_kubegate_and_rides_out_an_outage_every_node_sees() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let (crt, key) = pki.serving("replica");
    let mut lab = lab(2);
    let shipped = std::fs::read_to_string(repo("deploy/keepalived/keepalived.conf")).unwrap();
    assert!(shipped.contains("192.0.2.10/24"));
    let keepalived_conf = shipped.replace("192.0.2.10/24", &format!("{VIP}/24"));
    assert!(keepalived_conf.contains("\n$ADMIN=https://127.0.0.1:9444\n"));
    let (api, fault) = (17443, 17543);
    for (i, node) in lab.nodes.iter_mut().enumerate() {
        let d = dir.path().join(format!("node-{i}"));
        std::fs::create_dir_all(&d).unwrap();
        // The apiserver this node's kubegate sees, on the node's own loopback.
        let sim = Group::spawn(
            &node.ns,
            &bin("kubegate-sim"),
            &[
                "--secure-port",
                &api.to_string(),
                "--fault-port",
                &fault.to_string(),
                "--tls-cert-file",
                crt.to_str().unwrap(),
                "--tls-private-key-file",
                key.to_str().unwrap(),
                "--client-ca-file",
                pki.ca_file().to_str().unwrap(),
                "--replica-name",
                &format!("replica-{i}"),
            ],
            d.join("sim.log"),
        );
        node.procs.push(sim);
        // kubegate with the static pod's configuration: admin on 127.0.0.1:9444, as the
        // keepalived file expects.
        let mut c: kubegate_config::Config = serde_yaml_ng::from_str(
            &std::fs::read_to_string(repo("deploy/static-pod/kubegate-config.yaml")).unwrap(),
        )
        .unwrap();
        c.backends = vec![kubegate_config::BackendSpec::named(
            "apiserver",
            format!("127.0.0.1:{api}").parse().unwrap(),
        )];
        c.health.tls.ca_file = Some(pki.ca_file());
        // The probe paths keepalived reads are public either way; the token is not needed.
        c.admin.bearer_token_file = None;
        if i == 0 {
            let (crt, key) = pki.serving("kubegate-admin");
            c.admin.tls = Some(kubegate_config::ServingTls::new(crt, key));
            node.admin = "https://127.0.0.1:9444".into();
        } else {
            c.admin.tls = None;
            node.admin = "http://127.0.0.1:9444".into();
        }
        let config = d.join("kubegate.yaml");
        std::fs::write(&config, c.to_yaml()).unwrap();
        node.procs.push(Group::spawn(
            &node.ns,
            &bin("kubegate"),
            &["run", "--config", config.to_str().unwrap()],
            d.join("kubegate.log"),
        ));
        wait_for(&format!("{}: kubegate /readyz 200", node.ns), T, || {
            (node.http("GET", &format!("{}/readyz", node.admin)) == 200).then_some(())
        });
        let conf = d.join("keepalived.conf");
        let admin_line = format!("\n$ADMIN={}\n", node.admin);
        std::fs::write(
            &conf,
            keepalived_conf.replace("\n$ADMIN=https://127.0.0.1:9444\n", &admin_line),
        )
        .unwrap();
        let keepalived = Command::new("sh")
            .args(["-c", "command -v keepalived"])
            .output()
            .unwrap();
        let keepalived = PathBuf::from(String::from_utf8_lossy(&keepalived.stdout).trim());
        assert!(
            keepalived.is_file(),
            "keepalived (Debian package) is installed"
        );
        node.procs.push(Group::spawn(
            &node.ns,
            &keepalived,
            &[
                "--dont-fork",
                "--log-console",
                "--log-detail",
                "--vrrp",
                "--use-file",
                conf.to_str().unwrap(),
                "--pid",
                d.join("keepalived.pid").to_str().unwrap(),
                "--vrrp_pid",
                d.join("vrrp.pid").to_str().unwrap(),
            ],
            d.join("keepalived.log"),
        ));
    }
    let holder = |lab: &Lab| -> Option<usize> {
        let held: Vec<usize> = (0..lab.nodes.len())
            .filter(|&i| lab.nodes[i].holds_vip())
            .collect();
        (held.len() == 1).then(|| held[0])
    };
    let first = wait_for("one node to hold the VIP", T, || holder(&lab));
    let other = 1 - first;

    // a. The holder alone sees no ready apiserver: its priority falls, the other takes over.
    let fail = format!("http://127.0.0.1:{fault}/fail?check=etcd");
    let pass = format!("http://127.0.0.1:{fault}/pass?check=etcd");
    assert_eq!(lab.nodes[first].http("POST", &fail), 200);
    wait_for("the VIP on the node that sees a ready apiserver", T, || {
        (holder(&lab) == Some(other)).then_some(())
    });

    // b. Every apiserver fails for every node: both priorities fall alike, the VIP stays.
    assert_eq!(lab.nodes[other].http("POST", &fail), 200);
    for node in &lab.nodes {
        wait_for("both kubegates to see no ready apiserver", T, || {
            (node.http("GET", &format!("{}/readyz/backends", node.admin)) == 503).then_some(())
        });
    }
    // Once keepalived has lowered its own priority (the script's fall is two 1 s checks), an
    // equal priority never preempts: three more advertisement intervals change nothing.
    let lowered = |i: usize| {
        let log = lab.nodes[i].procs[2].log();
        log.lines()
            .rfind(|l| l.contains("Changing effective priority"))
            .is_some_and(|l| l.ends_with("to 50"))
    };
    wait_for("both nodes' keepalived to lower its priority", T, || {
        (lowered(first) && lowered(other)).then_some(())
    });
    for _ in 0..30 {
        assert_eq!(
            holder(&lab),
            Some(other),
            "the VIP stays while every node sees the outage"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for node in &lab.nodes {
        assert_eq!(node.http("POST", &pass), 200);
    }
    for node in &lab.nodes {
        wait_for("both kubegates ready again", T, || {
            (node.http("GET", &format!("{}/readyz", node.admin)) == 200).then_some(())
        });
    }

    // c. kubegate on the holder stops: /readyz/lifecycle fails at once, keepalived goes to
    // FAULT, the VIP moves while kubegate still accepts (shutdown.delay). Two clients in their
    // own namespace hold connections through the VIP when it moves: an idle watch, which sends
    // nothing, and a client that sends a request every 200 ms on one keep-alive connection.
    // When and how each connection ends is measured.
    let client = client_ns(&lab);
    let _client_ns = scopeguard(client.clone());
    let (admin_crt, admin_key) = pki.client("watcher", "kubernetes-admin", "system:masters");
    let (crt, key) = (admin_crt.to_str().unwrap(), admin_key.to_str().unwrap());
    let url = format!("https://{VIP}:8443/api/v1/namespaces/default/configmaps?watch=1");
    let mut watcher = Group::spawn(
        &client,
        Path::new("curl"),
        &[
            "-sk",
            "-N",
            // client-go's dialer probes an idle connection after 30 s (curl's default is 60).
            "--keepalive-time",
            "30",
            "--max-time",
            "90",
            "--cert",
            crt,
            "--key",
            key,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{errormsg}\n",
            &url,
        ],
        dir.path().join("watcher.log"),
    );
    let writer = Group::spawn(
        &client,
        Path::new("python3"),
        &["-c", WRITING_CLIENT, VIP, crt, key],
        dir.path().join("writer.log"),
    );
    wait_for("the watch held through the VIP", T, || {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.nodes[other].ns,
                "ss",
                "-Htn",
                "state",
                "established",
            ])
            .output()
            .ok()?;
        let held = String::from_utf8_lossy(&out.stdout)
            .matches("169.254.77.50")
            .count();
        (held >= 2 && writer.log().contains("connected")).then_some(())
    });
    let sigterm = std::time::Instant::now();
    let sigterm_at = now_unix();
    lab.nodes[other].procs[1].signal("-TERM");
    let moved = wait_for("the VIP back on the first node", T, || {
        (holder(&lab) == Some(first)).then(|| sigterm.elapsed())
    });
    // The writer's next request after the move reaches the new holder, which has no socket for
    // the connection: a reset at once; its retry on a new connection is served there.
    let events = wait_for("the writing client to fail over", T, || {
        let log = writer.log();
        log.contains("again").then_some(log)
    });
    let at = |event: &str| -> f64 {
        let line = events.lines().find(|l| l.starts_with(event)).unwrap();
        line.split(' ').nth(1).unwrap().parse::<f64>().unwrap() - sigterm_at
    };
    let (failed, again) = (at("failed"), at("again"));
    assert!(
        failed >= moved.as_secs_f64() - 1.0,
        "the writing client's connection is served until the VIP moves: {events}"
    );
    assert!(
        events.trim_end().ends_with(" 200"),
        "served by the new holder after the failure: {events}"
    );
    // How it failed, from the client namespace's kernel: a reset (Python's TLS reads it as an
    // end of stream), not a close by the old node.
    assert_eq!(
        estab_resets(&client),
        1,
        "the new holder reset the writer's connection"
    );
    // The idle watch sends nothing: nothing reaches it from the old node (whose socket lost its
    // address) until its own TCP keepalive probe, 30 s idle, draws the new holder's reset.
    let ended = wait_for("the idle watch to end", Duration::from_secs(100), || {
        watcher.child.try_wait().ok()?.map(|_| sigterm.elapsed())
    });
    let outcome = watcher.log();
    assert!(
        ended > moved,
        "the idle watch outlives the VIP's move: {outcome}"
    );
    assert_eq!(
        estab_resets(&client),
        2,
        "the idle watch ends by a reset too"
    );
    println!(
        "FIGURE vip_move_s={moved:.1} writer_reset_s={failed:.1} writer_served_again_s={again:.1} idle_watch_ended_s={ended:.1} how={:?}",
        outcome.trim(),
        moved = moved.as_secs_f64(),
        ended = ended.as_secs_f64(),
    );
}

/// A client that sends `GET /version` every 200 ms on one keep-alive connection to the VIP,
/// prints `connected`, then at its first failure `failed <unix time> <error>`, retries once on
/// a new connection and prints `again <unix time> <status>`.
const WRITING_CLIENT: &str = r#"
import http.client, ssl, sys, time
vip, crt, key = sys.argv[1:4]
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.load_cert_chain(crt, key)
def get(c):
    c.request("GET", "/version")
    r = c.getresponse()
    r.read()
    return r.status
c = http.client.HTTPSConnection(vip, 8443, context=ctx, timeout=30)
get(c)
print("connected", flush=True)
deadline = time.time() + 90
while time.time() < deadline:
    time.sleep(0.2)
    try:
        get(c)
    except Exception as e:
        print(f"failed {time.time():.3f} {type(e).__name__}: {e}", flush=True)
        c = http.client.HTTPSConnection(vip, 8443, context=ctx, timeout=30)
        print(f"again {time.time():.3f} {get(c)}", flush=True)
        break
"#;

/// Connections in `ns` ended by a reset (the kernel's Tcp EstabResets counter).
fn estab_resets(ns: &str) -> u64 {
    let snmp = Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/snmp"])
        .output()
        .unwrap();
    let snmp = String::from_utf8_lossy(&snmp.stdout);
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    let at = names
        .split_whitespace()
        .position(|n| n == "EstabResets")
        .unwrap();
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Deletes the client namespace when dropped.
fn scopeguard(ns: String) -> impl Drop {
    struct Ns(String);
    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    Ns(ns)
}
