//! Start-up and the process's end: the configuration is loaded and everything that can fail is
//! prepared — listeners bound (or taken over from a running kubegate), certificates and
//! credentials read — before pingora starts (`prepare`); then pingora's server runs the
//! listeners and the control plane until the shutdown sequence ends (`serve`, `shutdown`).

mod descriptors;
mod prepare;
mod serve;
mod shutdown;

use std::path::Path;

/// Loads `config_path`, binds (or, with `upgrade`, takes the sockets over from the running
/// process), and runs until the shutdown sequence ends; returns the exit status.
pub fn run(config_path: &Path, upgrade: bool) -> anyhow::Result<u8> {
    let prepared = prepare::prepare(config_path, upgrade)?;
    Ok(serve::serve(prepared))
}
