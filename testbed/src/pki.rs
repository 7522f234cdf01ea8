//! Certificates made at run time, never checked in.
//!
//! - [`Authority`]: a CA in a folder, issuing leaves (the one place certificates are signed).
//! - [`Pki`]: what a test needs — one CA, a serving certificate per replica (its common name
//!   names the replica, so a client can tell which replica it reached), client certificates,
//!   a front-proxy CA, kubeconfigs and a token file. A test bed: a file it cannot write is a
//!   broken set-up, reported by a panic naming the file.
//! - [`write_kubeadm_layout`]: the files of a small kubeadm control plane, for the load test
//!   and `kubegate-sim certs` / `cluster`.

mod authority;
mod kubeadm;
mod kubeconfig;

pub use authority::{Authority, Leaf, Usage};
pub use kubeadm::{write_kubeadm_layout, write_kubeadm_layout_answering, KUBEADM_SERVING_NAMES};
pub use kubeconfig::{kubeconfig_with_certificate, kubeconfig_with_token};

use std::path::{Path, PathBuf};

/// Names every serving certificate of a test [`Pki`] is valid for, unless a test asks
/// otherwise.
pub const SERVING_NAMES: &[&str] = &["kubernetes", "localhost", "127.0.0.1", "::1"];

/// The front-proxy CA and kubegate's certificate from it.
pub struct FrontProxyPki {
    /// The CA (`--requestheader-client-ca-file`).
    pub ca: PathBuf,
    /// kubegate's front-proxy client certificate (CN `front-proxy-client`).
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// The CA itself, which issues it again (a rotation).
    issuer: Pki,
}

impl FrontProxyPki {
    /// Issues kubegate's front-proxy certificate again, valid from a minute ago for `valid_for`
    /// from now, over the same files (each written by a rename, as a rotation tool does).
    pub fn rotate(&self, valid_for: std::time::Duration) {
        let dir = self.issuer.dir();
        let (cert, key) = self.issuer.issue(
            "front-proxy-client.next",
            Leaf {
                not_before: time::Duration::minutes(-1),
                not_after: time::Duration::seconds(valid_for.as_secs() as i64),
                ..Leaf::new(crate::replica::FRONT_PROXY_CN, Usage::Client)
            },
        );
        // The key first: a pair read between the two renames does not load, and the one in
        // use stays until both are in place.
        std::fs::rename(&key, dir.join("front-proxy-client.key")).expect("rename the key");
        std::fs::rename(&cert, dir.join("front-proxy-client.crt")).expect("rename the certificate");
    }
}

/// A test's CA and the files it signed, in a folder of the test's.
pub struct Pki {
    ca: Authority,
}

impl Pki {
    /// A new CA in `dir` (`ca.crt`), plus an admin client pair (`admin.crt`, `admin.key`).
    pub fn new(dir: &Path) -> Pki {
        let cn = format!("test-ca-{}", std::process::id());
        let ca = Authority::create(dir, &cn, "ca").unwrap_or_else(|e| panic!("{e:#}"));
        let pki = Pki { ca };
        pki.client("admin", "kubernetes-admin", "system:masters");
        pki
    }

    /// The folder holding the files.
    pub fn dir(&self) -> &Path {
        self.ca.dir()
    }

    /// `ca.crt`.
    pub fn ca_file(&self) -> PathBuf {
        self.ca.cert_file()
    }

    fn issue(&self, file: &str, leaf: Leaf<'_>) -> (PathBuf, PathBuf) {
        self.ca
            .issue(file, &leaf)
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Writes `<file>.crt`/`.key`: a serving certificate with common name `cn`, valid for
    /// `names`, from `not_before_days` to `not_after_days` relative to now.
    pub fn serving_with(
        &self,
        file: &str,
        cn: &str,
        names: &[&str],
        not_before_days: i64,
        not_after_days: i64,
    ) -> (PathBuf, PathBuf) {
        self.issue(
            file,
            Leaf {
                names,
                not_before: time::Duration::days(not_before_days),
                not_after: time::Duration::days(not_after_days),
                ..Leaf::new(cn, Usage::Server)
            },
        )
    }

    /// A valid serving certificate for replica `cn`.
    pub fn serving(&self, cn: &str) -> (PathBuf, PathBuf) {
        self.serving_with(cn, cn, SERVING_NAMES, -1, 30)
    }

    /// Writes `<file>.crt`/`.key`: a client certificate for `user` in `group`.
    pub fn client(&self, file: &str, user: &str, group: &str) -> (PathBuf, PathBuf) {
        self.client_in(file, user, &[group])
    }

    /// Writes `<file>.crt`/`.key`: a client certificate for `user` in `groups` (one O each,
    /// at most two).
    pub fn client_in(&self, file: &str, user: &str, groups: &[&str]) -> (PathBuf, PathBuf) {
        self.issue(
            file,
            Leaf {
                orgs: groups,
                ..Leaf::new(user, Usage::Client)
            },
        )
    }

    /// Writes `<file>.crt`/`.key`: a client certificate for `user` whose subject names its
    /// UID (the attribute 1.33+ reads).
    pub fn client_with_uid(&self, file: &str, user: &str, uid: &str) -> (PathBuf, PathBuf) {
        self.issue(
            file,
            Leaf {
                uid: Some(uid),
                ..Leaf::new(user, Usage::Client)
            },
        )
    }

    /// A second CA, in `front-proxy/`, with kubegate's front-proxy client certificate
    /// (`front-proxy-client.crt`, CN `front-proxy-client`), as kubeadm lays them out.
    pub fn front_proxy(&self) -> FrontProxyPki {
        let pki = Pki::new(&self.dir().join("front-proxy"));
        let (cert, key) = pki.client_in("front-proxy-client", crate::replica::FRONT_PROXY_CN, &[]);
        FrontProxyPki {
            ca: pki.ca_file(),
            cert,
            key,
            issuer: pki,
        }
    }

    /// Writes `<file>.crt`/`.key`: a client certificate for `user` in `groups`, valid from a
    /// minute ago until `valid_for` from now.
    pub fn client_valid_for(
        &self,
        file: &str,
        user: &str,
        groups: &[&str],
        valid_for: std::time::Duration,
    ) -> (PathBuf, PathBuf) {
        self.issue(
            file,
            Leaf {
                orgs: groups,
                not_before: time::Duration::minutes(-1),
                not_after: time::Duration::seconds(valid_for.as_secs() as i64),
                ..Leaf::new(user, Usage::Client)
            },
        )
    }

    /// Writes `kubeconfig-<port>` for the admin user against `server` (`https://IP:PORT`).
    pub fn kubeconfig(&self, server: &str) -> PathBuf {
        let read = |f: &str| std::fs::read(self.dir().join(f)).expect("the admin pair");
        let text = kubeconfig_with_certificate(
            server,
            &read("ca.crt"),
            &read("admin.crt"),
            &read("admin.key"),
        );
        self.write(&format!("kubeconfig-{}", port_of(server)), &text)
    }

    /// Writes a kubeconfig against `server` that authenticates with a bearer `token`.
    pub fn token_kubeconfig(&self, server: &str, token: &str) -> PathBuf {
        let ca = std::fs::read(self.ca_file()).expect("ca.crt");
        let text = kubeconfig_with_token(server, &ca, token);
        self.write(&format!("kubeconfig-token-{}", port_of(server)), &text)
    }

    /// Writes `tokens.csv` for `--token-auth-file` with one token per (token, user, group).
    pub fn token_file(&self, tokens: &[(&str, &str, &str)]) -> PathBuf {
        let text: String = tokens
            .iter()
            .enumerate()
            .map(|(i, (t, u, g))| format!("{t},{u},uid{i},\"{g}\"\n"))
            .collect();
        self.write("tokens.csv", &text)
    }

    fn write(&self, file: &str, text: &str) -> PathBuf {
        let path = self.dir().join(file);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}

fn port_of(server: &str) -> &str {
    server.rsplit(':').next().unwrap_or("x")
}
