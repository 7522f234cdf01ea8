//! The patched h2 (`vendor/h2/KUBEGATE.md`) is the one every build links.
//!
//! 1. `cargo_lock_links_the_vendored_h2_only`: each lock file has one `h2`, the vendored
//!    version, from no registry (a path dependency has no `source`). The build itself fails
//!    without the patch (`h2::KUBEGATE_PATCH` in `gateway/src/terminate/exchange/h2client.rs`); this
//!    names the cause in words.
//! 2. `the_patch_file_covers_every_marked_change`: `vendor/h2.patch` (what
//!    `scripts/update-h2` applies to a new release) touches every file with a `kubegate:`
//!    mark.

use std::path::Path;

fn repo(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `[[package]]` entries named `name` in a Cargo.lock, as their text.
fn packages<'a>(lock: &'a str, name: &str) -> Vec<&'a str> {
    lock.split("[[package]]")
        .filter(|p| p.lines().any(|l| l.trim() == format!("name = \"{name}\"")))
        .collect()
}

#[test]
fn cargo_lock_links_the_vendored_h2_only() {
    let vendored = repo("vendor/h2/Cargo.toml");
    let version = vendored
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .expect("vendor/h2 has a version")
        .trim_matches('"')
        .to_string();
    for lock in ["Cargo.lock", "fuzz/Cargo.lock"] {
        let text = repo(lock);
        let h2 = packages(&text, "h2");
        if lock == "fuzz/Cargo.lock" && h2.is_empty() {
            continue;
        }
        assert_eq!(h2.len(), 1, "{lock}: one h2, found {}", h2.len());
        assert!(
            h2[0].contains(&format!("version = \"{version}\"")),
            "{lock}: h2 {version} expected:{}",
            h2[0]
        );
        assert!(
            !h2[0].contains("source = "),
            "{lock}: h2 comes from a registry, not vendor/h2 ([patch.crates-io] ignored?):{}",
            h2[0]
        );
    }
}

#[test]
fn the_patch_file_covers_every_marked_change() {
    let patch = repo("vendor/h2.patch");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("vendor/h2/src");
    let mut marked = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if std::fs::read_to_string(&p).unwrap().contains("kubegate:") {
                out.push(p);
            }
        }
    }
    walk(&src, &mut marked);
    assert!(marked.len() >= 5, "marked files: {marked:?}");
    for file in marked {
        let rel = file
            .strip_prefix(src.parent().unwrap())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            patch.contains(&format!("+++ b/{rel}")),
            "vendor/h2.patch does not cover {rel}: run scripts/update-h2 --diff"
        );
    }
}
