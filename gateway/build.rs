//! Build facts that `kubegate --version` and `kubegate_build_info` report: the commit, whether
//! the checkout had changes to tracked files, and the compiler. From git when building in a
//! checkout; `KUBEGATE_COMMIT` and `KUBEGATE_TREE_STATE` override them (a build from a source
//! tarball). The tree state is as of the last change to git's HEAD or index (a rebuild after
//! editing a file without `git add` keeps the state it had): release builds start from a clean
//! clone, where it is exact.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=KUBEGATE_COMMIT");
    println!("cargo:rerun-if-env-changed=KUBEGATE_TREE_STATE");
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        for f in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{reference}");
        }
    }
    let commit = std::env::var("KUBEGATE_COMMIT")
        .ok()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let tree = std::env::var("KUBEGATE_TREE_STATE")
        .ok()
        .or_else(|| {
            git(&["status", "--porcelain", "--untracked-files=no"])
                .map(|s| if s.is_empty() { "clean" } else { "dirty" }.to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=KUBEGATE_COMMIT={commit}");
    println!("cargo:rustc-env=KUBEGATE_TREE_STATE={tree}");
    println!("cargo:rustc-env=KUBEGATE_RUSTC={rustc}");
}
