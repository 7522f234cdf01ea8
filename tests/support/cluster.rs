//! A whole set-up in a few lines: a folder, a PKI, replicas (on a shared etcd, trusting a
//! front-proxy CA when kubegate terminates TLS), kubegate in front of them, and the wait until
//! kubegate finds every replica ready.
//!
//! ```ignore
//! let mut c = Cluster::new().replicas(3).etcd().terminate().start();
//! let (kg, pki) = (&c.kg, &c.pki);
//! c.sims[0].kill();
//! ```

use crate::kubegate::{Kubegate, KubegateConfig};
use crate::sim::{Sim, SimOptions};
use kubegate_testbed::{free_port, Etcd, FrontProxyPki, Pki};
use std::time::Duration;

/// How long kubegate may take to find a replica ready.
const READY: Duration = Duration::from_secs(30);

/// A change to kubegate's configuration, made before it starts.
type Configure = Box<dyn FnOnce(&mut KubegateConfig)>;

/// What to start.
pub struct Cluster {
    replicas: usize,
    etcd: bool,
    terminate: bool,
    sim_args: Vec<String>,
    tokens: Vec<(String, String, String)>,
    configure: Vec<Configure>,
    wrapper: Vec<String>,
    ipv6: bool,
}

/// A started set-up. Dropped in field order: kubegate, then the replicas, etcd, the folder.
pub struct Started {
    /// kubegate.
    pub kg: Kubegate,
    /// The replicas, `replica-1`, `replica-2`, ...
    pub sims: Vec<Sim>,
    /// The etcd the replicas share, if asked for.
    pub etcd: Option<Etcd>,
    /// The front-proxy CA and kubegate's certificate, when terminating.
    pub fp: Option<FrontProxyPki>,
    /// The PKI.
    pub pki: Pki,
    /// The configuration kubegate was started with.
    pub config: KubegateConfig,
    /// The folder holding every file and log.
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// One replica with an in-memory store, kubegate in passthrough mode in front.
    pub fn new() -> Cluster {
        Cluster {
            replicas: 1,
            etcd: false,
            terminate: false,
            sim_args: Vec::new(),
            tokens: Vec::new(),
            configure: Vec::new(),
            wrapper: Vec::new(),
            ipv6: false,
        }
    }

    /// Everything over IPv6 loopback: the replicas and kubegate's listener on `::1` (its
    /// admin endpoint stays on 127.0.0.1).
    pub fn over_ipv6(mut self) -> Cluster {
        self.ipv6 = true;
        self
    }

    /// `n` replicas.
    pub fn replicas(mut self, n: usize) -> Cluster {
        self.replicas = n;
        self
    }

    /// The replicas share one etcd.
    pub fn etcd(mut self) -> Cluster {
        self.etcd = true;
        self
    }

    /// kubegate terminates TLS; the replicas trust its front-proxy certificate.
    pub fn terminate(mut self) -> Cluster {
        self.terminate = true;
        self
    }

    /// Extra flags for every replica.
    pub fn sim_args(mut self, args: &[&str]) -> Cluster {
        self.sim_args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// Every replica accepts these bearer tokens: (token, user, group).
    pub fn tokens(mut self, tokens: &[(&str, &str, &str)]) -> Cluster {
        self.tokens.extend(
            tokens
                .iter()
                .map(|(t, u, g)| (t.to_string(), u.to_string(), g.to_string())),
        );
        self
    }

    /// kubegate is run by `wrapper` (a command and its arguments that runs the rest; it must
    /// `exec` it, so that the process is kubegate's own).
    pub fn wrapped(mut self, wrapper: &[&str]) -> Cluster {
        self.wrapper = wrapper.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Changes kubegate's configuration before it starts.
    pub fn configure(mut self, f: impl FnOnce(&mut KubegateConfig) + 'static) -> Cluster {
        self.configure.push(Box::new(f));
        self
    }

    /// kubegate's `dispatch:` rules, written as YAML (a list).
    pub fn dispatch(self, rules: &str) -> Cluster {
        let rules = crate::dispatch_rules(rules);
        self.configure(move |c| c.dispatch = rules)
    }

    /// Starts everything, and waits until kubegate finds every replica ready.
    pub fn start(self) -> Started {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let pki = Pki::new(dir.path());
        let fp = self.terminate.then(|| pki.front_proxy());
        let etcd = self.etcd.then(|| crate::etcd(dir.path()));
        let mut args = self.sim_args;
        if !self.tokens.is_empty() {
            let tokens: Vec<(&str, &str, &str)> = self
                .tokens
                .iter()
                .map(|(t, u, g)| (t.as_str(), u.as_str(), g.as_str()))
                .collect();
            args.push("--token-auth-file".into());
            args.push(pki.token_file(&tokens).display().to_string());
        }
        let sims: Vec<Sim> = (1..=self.replicas)
            .map(|i| {
                Sim::start(
                    &pki,
                    &format!("replica-{i}"),
                    SimOptions {
                        args: args.clone(),
                        front_proxy_ca: fp.as_ref().map(|fp| fp.ca.clone()),
                        etcd: etcd.as_ref().map(Etcd::url),
                        address: self.ipv6.then(|| {
                            std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, free_port()))
                        }),
                        ..Default::default()
                    },
                )
            })
            .collect();
        let refs: Vec<&Sim> = sims.iter().collect();
        let mut config = match &fp {
            Some(fp) => KubegateConfig::terminating(&pki, fp, &refs),
            None => KubegateConfig::new(&refs),
        };
        if self.ipv6 {
            config.listeners[0].address = "[::1]:6443".parse().unwrap();
        }
        for f in self.configure {
            f(&mut config);
        }
        let wrapper: Vec<&str> = self.wrapper.iter().map(String::as_str).collect();
        let kg = Kubegate::start_under(&pki, &config, &[], &wrapper);
        for s in &sims {
            kg.wait_state(&s.name, "ready", READY);
        }
        Started {
            kg,
            sims,
            etcd,
            fp,
            pki,
            config,
            dir,
        }
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster::new()
    }
}

impl Started {
    /// The front-proxy files (panics unless terminating).
    pub fn front_proxy(&self) -> &FrontProxyPki {
        self.fp.as_ref().expect("started terminating")
    }
}

/// Two bearer tokens the replicas accept, of two users of group `dev` (`tok-a`, `tok-b`).
pub const DEV_TOKENS: &[(&str, &str, &str)] = &[
    ("tok-a", "token-user-a", "dev"),
    ("tok-b", "token-user-b", "dev"),
];

/// `n` replicas (each started with `args`, accepting the token `tok-ops`), kubegate
/// terminating in front, configured by `configure`.
pub fn terminating(
    n: usize,
    args: &[&str],
    configure: impl FnOnce(&mut KubegateConfig) + 'static,
) -> Started {
    Cluster::new()
        .replicas(n)
        .terminate()
        .tokens(&[("tok-ops", "ops-bot", "ops")])
        .sim_args(args)
        .configure(configure)
        .start()
}

/// Ready after one probe, then probed every two minutes: what kubegate learns of a replica
/// during a test comes from its answers, not its probes.
pub fn probes_rarely(cfg: &mut KubegateConfig) {
    cfg.health.interval = crate::kubegate::secs(120);
    cfg.health.fast_interval = crate::kubegate::secs(120);
    cfg.health.rise = 1;
}
