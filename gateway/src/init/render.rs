//! The text of each file `kubegate init` writes, from what it was told and where the shipped
//! files put things. The pod manifests are the shipped ones (`deploy/`), the image replaced;
//! everything else is rendered here, and `tests/operator.rs` runs each with the tool that
//! reads it.

use super::spec::{Init, Mode, Shape, ADMIN_SERVER_NAME, FRONT_PROXY_CN, SHIPPED_IMAGE};
use std::fmt::Write as _;

/// The shipped static pod (passthrough and terminate) and node-local pod.
const STATIC_POD: &str = include_str!("../../../deploy/static-pod/kubegate.yaml");
const STATIC_POD_TERMINATE: &str =
    include_str!("../../../deploy/static-pod/kubegate-terminate.yaml");
const NODE_LOCAL_POD: &str = include_str!("../../../deploy/node-local/kubegate-node-local.yaml");

/// The pod manifest for `init`'s shape and mode (none for systemd).
pub fn manifest(init: &Init) -> Option<String> {
    let shipped = match (init.shape, init.mode) {
        (Shape::StaticPod, Mode::Passthrough) => STATIC_POD,
        (Shape::StaticPod, Mode::Terminate) => STATIC_POD_TERMINATE,
        (Shape::NodeLocal, _) => NODE_LOCAL_POD,
        (Shape::Systemd, _) => return None,
    };
    Some(shipped.replace(
        &format!("image: {SHIPPED_IMAGE}"),
        &format!("image: {}", init.image),
    ))
}

/// kubegate's configuration.
pub fn config(init: &Init) -> String {
    let pki = init.pki_dir_seen();
    let ca = init.ca_seen();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Written by `kubegate init --shape {} --mode {}` for {}: kubegate's configuration\n\
         # (docs/configuration.md has every key). Edit it in place or replace it: kubegate\n\
         # reloads within a second of a change, and refuses a bad file (FILE:LINE:COLUMN) while\n\
         # the running configuration stays.",
        init.shape.as_str(),
        init.mode.as_str(),
        init.addresses().join(" and ")
    );
    let _ = writeln!(out, "listeners:\n  - address: {}", yaml(init.listen));
    if init.mode == Mode::Terminate {
        let _ = writeln!(
            out,
            "    mode: terminate\n    tls:\n      cert_file: {pki}/serving.crt\n      key_file: {pki}/serving.key\n      client_ca_file: {ca}"
        );
    }
    out.push_str("backends:\n");
    for (name, addr) in &init.backends {
        let _ = writeln!(out, "  - name: {name}\n    address: {}", yaml(*addr));
    }
    let _ = writeln!(
        out,
        "health:\n  tls:\n    ca_file: {ca}\n    server_name: kubernetes"
    );
    if init.mode == Mode::Terminate {
        let _ = writeln!(
            out,
            "upstream:\n  front_proxy:\n    # kubegate's own ({FRONT_PROXY_CN}), listed in the apiservers'\n    # --requestheader-allowed-names.\n    cert_file: {pki}/front-proxy-client.crt\n    key_file: {pki}/front-proxy-client.key\n# The rules `kubegate shed` writes to the cluster, put in force here (kubegate-rbac.yaml\n# lets kubegate read them). Left out so that 0.2 can still read this file (a rollback);\n# uncomment once no node will run 0.2 again:\n# terminate:\n#   shed_object: kube-system/kubegate-shed"
        );
    }
    let delay = match init.shape {
        // Nothing in front of a node-local gateway needs time to notice it leave.
        Shape::NodeLocal => "0s",
        Shape::StaticPod | Shape::Systemd => "5s",
    };
    let _ = writeln!(out, "shutdown:\n  delay: {delay}\n  grace: 30s");
    let _ = writeln!(
        out,
        "admin:\n  # Scraped from other hosts over TLS ({ADMIN_SERVER_NAME}, signed by the cluster CA) with the\n  # token in metrics-token; the probe paths stay public for the kubelet and keepalived.\n  address: {}\n  tls:\n    cert_file: {pki}/admin.crt\n    key_file: {pki}/admin.key\n  bearer_token_file: {pki}/metrics-token",
        yaml(std::net::SocketAddr::new(init.admin_any, init.admin_port))
    );
    out
}

/// `address` as a YAML value: an IPv6 one quoted (`[::]:8443` unquoted is a YAML list).
fn yaml(address: std::net::SocketAddr) -> String {
    match address {
        std::net::SocketAddr::V4(a) => a.to_string(),
        std::net::SocketAddr::V6(a) => format!("\"{a}\""),
    }
}

/// keepalived's configuration: the shipped checks, this node's address as the source of its
/// adverts and the peers as unicast destinations (multicast VRRP is dropped by most clouds'
/// networks and by many switches).
pub fn keepalived(init: &Init) -> Option<String> {
    let vip = init.vip.as_ref()?;
    let mut peers = String::new();
    for p in &init.peers {
        let _ = writeln!(peers, "        {p}");
    }
    Some(format!(
        r#"# Written by `kubegate init` for {address}: the VIP {vip} follows a serving kubegate that sees a
# ready apiserver (docs/deploy.md, "VIP mode with keepalived"). The same file on every node
# but for unicast_src_ip and unicast_peer.
global_defs {{
    router_id kubegate
    enable_script_security
    script_user root
}}

vrrp_script chk_kubegate_serving {{
    script "/usr/bin/curl --silent --fail --insecure --max-time 1 https://127.0.0.1:{admin}/readyz/lifecycle"
    interval 1
    timeout 2
    fall 2
    rise 2
}}

vrrp_script chk_kubegate_backends {{
    script "/usr/bin/curl --silent --fail --insecure --max-time 1 https://127.0.0.1:{admin}/readyz/backends"
    interval 1
    timeout 2
    fall 2
    rise 2
    weight -50
}}

vrrp_instance kubegate_vip {{
    state BACKUP
    interface {interface}
    virtual_router_id 51
    priority 100
    advert_int 1
    authentication {{
        auth_type PASS
        auth_pass kubegate
    }}
    unicast_src_ip {address}
    unicast_peer {{
{peers}    }}
    virtual_ipaddress {{
        {vip}
    }}
    track_script {{
        chk_kubegate_serving
        chk_kubegate_backends
    }}
}}
"#,
        address = init.address,
        admin = init.admin_port,
        interface = init.interface,
    ))
}

/// A Prometheus scrape configuration for this node and its peers, whose TLS settings match
/// the admin certificate `init` wrote.
pub fn prometheus(init: &Init) -> String {
    let mut targets: Vec<String> = std::iter::once(init.address)
        .chain(init.peers.iter().copied())
        .map(|ip| format!("\"{}\"", std::net::SocketAddr::new(ip, init.admin_port)))
        .collect();
    targets.sort();
    format!(
        r#"# Written by `kubegate init`: kubegate's admin endpoints as Prometheus scrapes them. Merge
# into prometheus.yml's scrape_configs, with the cluster CA ({ca}) and the token
# ({pki}/metrics-token) copied to the files named here on the Prometheus host.
scrape_configs:
  - job_name: kubegate
    scheme: https
    tls_config:
      ca_file: /etc/prometheus/kubegate/ca.crt
      server_name: {ADMIN_SERVER_NAME}
    authorization:
      credentials_file: /etc/prometheus/kubegate/metrics-token
    static_configs:
      - targets: [{}]
"#,
        targets.join(", "),
        ca = init.ca_seen(),
        pki = init.pki_dir_seen(),
    )
}

/// The kubeadm `ClusterConfiguration` fragment the apiservers need for this kubegate.
pub fn kubeadm(init: &Init) -> String {
    let mut sans = vec![init.endpoint_host()];
    // The VIP is of one family: a client of the other reaches kubegate at the node's address.
    sans.extend(init.other_address.map(|a| a.to_string()));
    sans.extend(init.loopbacks());
    sans.dedup();
    let sans: Vec<String> = sans.iter().map(|s| format!("\"{s}\"")).collect();
    let mut out = format!(
        r#"# Written by `kubegate init`: what the apiservers need for kubegate in front of them. Merge
# into the ClusterConfiguration given to `kubeadm init --config` (kubeadm.k8s.io/v1beta4).
# - controlPlaneEndpoint: what every kubeconfig kubeadm writes points at.
# - certSANs: the apiservers' certificate holds the names clients reach them by through
#   kubegate{passthrough_note}.
# - shutdown-delay-duration: an apiserver keeps serving after /readyz fails long enough for
#   kubegate to stop sending to it (docs/deploy.md, "Timing rules").
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
controlPlaneEndpoint: "{endpoint}"
apiServer:
  certSANs: [{sans}]
  extraArgs:
    - name: shutdown-delay-duration
      value: 5s
"#,
        endpoint = init.endpoint,
        sans = sans.join(", "),
        passthrough_note = if init.mode == Mode::Passthrough {
            " (in passthrough mode clients verify the apiserver's own certificate)"
        } else {
            ""
        },
    );
    if init.mode == Mode::Terminate {
        let _ = write!(
            out,
            "    # kubegate's front-proxy certificate ({FRONT_PROXY_CN}) beside kubeadm's own.\n    - name: requestheader-allowed-names\n      value: front-proxy-client,{FRONT_PROXY_CN}\n"
        );
    }
    out
}

/// What kubegate's own user needs in terminate mode, and who may shed (the shipped bindings).
pub const RBAC: &str = concat!(
    include_str!("../../../deploy/rbac/kubegate-token-review.yaml"),
    "---\n",
    include_str!("../../../deploy/rbac/kubegate-shed.yaml"),
);
