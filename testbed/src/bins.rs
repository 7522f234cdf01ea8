//! The workspace's binaries (`kubegate`, `kubegate-sim`, `kubegate-loadtest`), built by
//! `cargo build --bins` next to whatever runs.

use std::path::{Path, PathBuf};

/// Path of workspace binary `name`: beside the running executable (the load test, the
/// simulator), or one folder up from it (a test, in `target/<profile>/deps`). Panics naming
/// the command that builds it when it is missing.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("own executable path");
    let here = exe.parent().expect("executable folder");
    let candidates = [here.join(name), here.parent().unwrap_or(here).join(name)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{} is missing: run `cargo build --bins` first (scripts/test does)",
                Path::new(&candidates[0]).display()
            )
        })
}

/// `name` on PATH, if installed.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}
