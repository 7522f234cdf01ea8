//! HAProxy run by a test: its configuration written out, the process started in the
//! foreground (`-db`), and the listener answering before the test goes on.

use crate::kubegate::wait_for;
use crate::proc::Proc;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// HAProxy with configuration `cfg` (written to `dir/NAME.cfg`, logging to `dir/NAME.log`),
/// once its frontend on `listen` accepts connections; ended with the returned process.
pub fn haproxy(dir: &Path, name: &str, cfg: &str, listen: SocketAddr) -> Proc {
    let path = dir.join(format!("{name}.cfg"));
    std::fs::write(&path, cfg).unwrap();
    let mut cmd = std::process::Command::new("haproxy");
    cmd.arg("-db").arg("-f").arg(&path);
    let p = Proc::spawn("haproxy", cmd, dir.join(format!("{name}.log")));
    wait_for("HAProxy to listen", Duration::from_secs(30), || {
        std::net::TcpStream::connect(listen).ok()
    });
    p
}
