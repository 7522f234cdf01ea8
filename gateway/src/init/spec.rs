//! What `kubegate init` was asked to write for, resolved: the node's shape and mode, its
//! addresses and names, and where each of its files goes (as seen on the node, and under
//! `--root` here).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

/// The server name the admin certificate carries and the shipped scrape configurations verify.
pub const ADMIN_SERVER_NAME: &str = "kubegate-admin";
/// The common name of kubegate's own front-proxy certificate (in the apiservers'
/// `--requestheader-allowed-names`).
pub const FRONT_PROXY_CN: &str = "kubegate-front-proxy";
/// The image the shipped manifests name.
pub const SHIPPED_IMAGE: &str = concat!("kubegate:", env!("CARGO_PKG_VERSION"));
/// The user the image runs as.
pub const POD_UID: u32 = 65532;

/// Where kubegate runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A static pod on each control-plane node, clients reaching it through a VIP or a DNS
    /// name.
    StaticPod,
    /// A pod on every node, its clients on the node itself (`127.0.0.1`).
    NodeLocal,
    /// A systemd service (the Debian package's unit).
    Systemd,
}

impl Shape {
    /// As written on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::StaticPod => "static-pod",
            Shape::NodeLocal => "node-local",
            Shape::Systemd => "systemd",
        }
    }
}

/// How kubegate treats client connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// TLS passed through to the apiservers.
    Passthrough,
    /// TLS ended at kubegate (needs the front-proxy CA's key).
    Terminate,
}

impl Mode {
    /// As written on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Passthrough => "passthrough",
            Mode::Terminate => "terminate",
        }
    }
}

/// What the operator asked for, as given on the command line.
#[derive(Debug, Clone)]
pub struct InitArgs {
    /// Where kubegate runs.
    pub shape: Shape,
    /// Passthrough or terminate.
    pub mode: Mode,
    /// This node's address: the admin endpoint's, in the certificates, keepalived's source.
    pub address: IpAddr,
    /// On a dual-stack node, its address of the other family: kubegate listens on both
    /// families and the certificates name both (backends, peers and keepalived stay in
    /// `address`'s family: a replica is a host, listed once).
    pub other_address: Option<IpAddr>,
    /// The apiservers, `NAME=HOST:PORT`; none: this node and its peers on 6443.
    pub backends: Vec<(String, SocketAddr)>,
    /// The other kubegate nodes (keepalived's unicast peers, scrape targets).
    pub peers: Vec<IpAddr>,
    /// The VIP (`10.0.0.10/24`) keepalived holds; none: no keepalived file.
    pub vip: Option<String>,
    /// keepalived's interface.
    pub interface: String,
    /// Where kubegate listens; none: the shape's default.
    pub listen: Option<SocketAddr>,
    /// More names the serving certificate holds (terminate mode).
    pub sans: Vec<String>,
    /// The image the manifest names.
    pub image: Option<String>,
    /// Where the files go: `/` on the node itself.
    pub root: PathBuf,
    /// Print, write nothing.
    pub dry_run: bool,
    /// Rewrite files that differ from what `init` would write.
    pub force: bool,
}

/// What `init` writes for, resolved.
pub struct Init {
    pub(super) shape: Shape,
    pub(super) mode: Mode,
    pub(super) address: IpAddr,
    pub(super) other_address: Option<IpAddr>,
    pub(super) backends: Vec<(String, SocketAddr)>,
    pub(super) peers: Vec<IpAddr>,
    pub(super) vip: Option<String>,
    pub(super) interface: String,
    pub(super) listen: SocketAddr,
    /// What clients use: the VIP on the listener's port, or the listener.
    pub(super) endpoint: SocketAddr,
    pub(super) admin_port: u16,
    /// What the admin endpoint binds: every address of the node's families.
    pub(super) admin_any: IpAddr,
    pub(super) sans: Vec<String>,
    pub(super) image: String,
    pub(super) root: PathBuf,
}

impl Init {
    /// Resolves `args`' defaults.
    pub fn new(args: InitArgs) -> Result<Init, String> {
        if let Some(other) = args.other_address {
            if other.is_ipv4() == args.address.is_ipv4() {
                return Err(format!(
                    "--address {} and {other}: a dual-stack node's two addresses are one IPv4 and one IPv6",
                    args.address
                ));
            }
        }
        // Every address of the node: `::` takes both families where there are two.
        let any: IpAddr = match args.other_address.is_some() || args.address.is_ipv6() {
            true => Ipv6Addr::UNSPECIFIED.into(),
            false => Ipv4Addr::UNSPECIFIED.into(),
        };
        let (listen, admin_port) = match args.shape {
            Shape::StaticPod => (SocketAddr::new(any, 8443), 9444),
            Shape::NodeLocal => (SocketAddr::from(([127, 0, 0, 1], 7443)), 9445),
            Shape::Systemd => (SocketAddr::new(any, 6443), 9444),
        };
        let listen = args.listen.unwrap_or(listen);
        let vip_ip = match &args.vip {
            Some(v) => Some(
                v.split('/')
                    .next()
                    .unwrap_or_default()
                    .parse::<IpAddr>()
                    .map_err(|e| format!("--vip {v}: {e} (write it as 10.0.0.10/24)"))?,
            ),
            None => None,
        };
        let endpoint = match (vip_ip, listen.ip().is_unspecified()) {
            (Some(ip), _) => SocketAddr::new(ip, listen.port()),
            (None, true) => SocketAddr::new(args.address, listen.port()),
            (None, false) => listen,
        };
        let backends = if args.backends.is_empty() {
            let mut nodes: Vec<IpAddr> = std::iter::once(args.address)
                .chain(args.peers.iter().copied())
                .collect();
            nodes.sort();
            nodes.dedup();
            nodes
                .into_iter()
                .enumerate()
                .map(|(i, ip)| (format!("cp-{}", i + 1), SocketAddr::new(ip, 6443)))
                .collect()
        } else {
            args.backends
        };
        if args.shape == Shape::StaticPod && listen.port() == 6443 && listen.ip().is_unspecified() {
            return Err(format!("--listen {listen} conflicts with the apiserver on the same node (kubeadm binds port 6443 on every address): keep 8443, or see docs/deploy.md, \"The address kubegate binds\""));
        }
        // keepalived speaks one family: its unicast peers and VIP are in the source's.
        let family = |ip: IpAddr| ip.is_ipv4() == args.address.is_ipv4();
        if let Some(p) = args.peers.iter().find(|p| !family(**p)) {
            return Err(format!(
                "--peer {p}: the peers are in the first --address's family ({})",
                args.address
            ));
        }
        if let Some(vip) = vip_ip.filter(|v| !family(*v)) {
            return Err(format!(
                "--vip {vip}: the VIP is in the first --address's family ({})",
                args.address
            ));
        }
        let mut peers = args.peers;
        peers.sort();
        peers.dedup();
        Ok(Init {
            shape: args.shape,
            mode: args.mode,
            address: args.address,
            other_address: args.other_address,
            admin_any: any,
            backends,
            peers,
            vip: args.vip,
            interface: args.interface,
            listen,
            endpoint,
            admin_port,
            sans: args.sans,
            image: args.image.unwrap_or_else(|| SHIPPED_IMAGE.to_string()),
            root: args.root,
        })
    }

    /// The folder of kubegate's certificates, token and CA as kubegate sees it (the pods mount
    /// it at the same path as on the host).
    pub(super) fn pki_dir_seen(&self) -> &'static str {
        match self.shape {
            Shape::StaticPod | Shape::NodeLocal => "/etc/kubernetes/pki/kubegate",
            Shape::Systemd => "/etc/kubegate/pki",
        }
    }

    /// The cluster CA as kubegate sees it.
    pub(super) fn ca_seen(&self) -> &'static str {
        match self.shape {
            Shape::StaticPod | Shape::NodeLocal => "/etc/kubernetes/pki/ca.crt",
            Shape::Systemd => "/etc/kubegate/pki/ca.crt",
        }
    }

    /// The configuration file on the host (the pods mount its folder as `/etc/kubegate`).
    pub(super) fn config_path(&self) -> &'static str {
        match self.shape {
            Shape::StaticPod => "/etc/kubegate/pod/kubegate.yaml",
            Shape::NodeLocal => "/etc/kubegate/node-local/kubegate.yaml",
            Shape::Systemd => "/etc/kubegate/kubegate.yaml",
        }
    }

    pub(super) fn manifest_path(&self) -> Option<&'static str> {
        match self.shape {
            Shape::StaticPod => Some("/etc/kubernetes/manifests/kubegate.yaml"),
            Shape::NodeLocal => Some("/etc/kubernetes/manifests/kubegate-node-local.yaml"),
            Shape::Systemd => None,
        }
    }

    /// The node's addresses, as the certificates name them.
    pub(super) fn addresses(&self) -> Vec<String> {
        std::iter::once(self.address)
            .chain(self.other_address)
            .map(|a| a.to_string())
            .collect()
    }

    /// The loopback addresses a client on the node reaches kubegate at: `::1` too where it
    /// listens on IPv6 (`kubegate status` on the node asks its admin endpoint there).
    pub(super) fn loopbacks(&self) -> Vec<String> {
        let mut l = vec!["127.0.0.1".to_string()];
        if self.admin_any.is_ipv6() {
            l.push("::1".into());
        }
        l
    }

    pub(super) fn endpoint_host(&self) -> String {
        self.endpoint.ip().to_string()
    }

    /// `path` (as on the node) under the root.
    pub(super) fn at(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}
