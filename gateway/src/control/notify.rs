//! systemd's readiness protocol (`sd_notify`), spoken only when `NOTIFY_SOCKET` is set.

use std::os::unix::net::UnixDatagram;

/// Tells systemd the gateway is serving.
pub fn ready() {
    send("READY=1\nSTATUS=serving");
}

/// Tells systemd a reload is under way and when it ended.
pub fn reloading() {
    send("RELOADING=1");
}

/// Tells systemd the reload ended.
pub fn reloaded() {
    send("READY=1");
}

/// Tells systemd this process is the service's main process now (it took over from its
/// predecessor; the unit needs `NotifyAccess=all` to accept it from a new PID).
pub fn main_pid() {
    send(&format!(
        "MAINPID={}\nREADY=1\nSTATUS=serving",
        std::process::id()
    ));
}

/// Tells systemd the gateway is shutting down.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=draining");
}

fn send(message: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let result = UnixDatagram::unbound().and_then(|sock| {
        let bytes = path.as_encoded_bytes();
        if let Some(abstract_name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)?;
            sock.send_to_addr(message.as_bytes(), &addr)
        } else {
            sock.send_to(message.as_bytes(), &path)
        }
    });
    if let Err(e) = result {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}
