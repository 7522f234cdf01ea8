//! Every fuzz target's committed corpus replayed on stable, as an ordinary test: each input
//! of `fuzz/corpus/TARGET` through the property `fuzz/targets/TARGET.rs` states (the same file
//! the coverage-guided target runs under cargo-fuzz, `scripts/fuzz SECONDS`, which grows the
//! corpora). A failing input is named by its file.

// The request targets each read their input with `fuzz/targets/head.rs`, a module of each
// (each is a binary of its own under cargo-fuzz): here, where they are one crate, it is loaded
// once per target.
#![allow(clippy::duplicate_mod)]

use std::panic::AssertUnwindSafe;
use std::path::Path;

#[path = "../fuzz/targets/bearer_token.rs"]
mod bearer_token;
#[path = "../fuzz/targets/client_certificate.rs"]
mod client_certificate;
#[path = "../fuzz/targets/config_load.rs"]
mod config_load;
#[path = "../fuzz/targets/identity_headers.rs"]
mod identity_headers;
#[path = "../fuzz/targets/join_key.rs"]
mod join_key;
#[path = "../fuzz/targets/proxy_header.rs"]
mod proxy_header;
#[path = "../fuzz/targets/readyz_verbose.rs"]
mod readyz_verbose;
#[path = "../fuzz/targets/request_classify.rs"]
mod request_classify;
#[path = "../fuzz/targets/request_shaping.rs"]
mod request_shaping;
#[path = "../fuzz/targets/watch_framing.rs"]
mod watch_framing;
#[path = "../fuzz/targets/watch_position.rs"]
mod watch_position;

/// A target's property: panics on an input it does not hold for.
type Property = fn(&[u8]);

/// Each target and its property.
const TARGETS: [(&str, Property); 11] = [
    ("bearer_token", bearer_token::run),
    ("client_certificate", client_certificate::run),
    ("config_load", config_load::run),
    ("identity_headers", identity_headers::run),
    ("join_key", join_key::run),
    ("proxy_header", proxy_header::run),
    ("readyz_verbose", readyz_verbose::run),
    ("request_classify", request_classify::run),
    ("request_shaping", request_shaping::run),
    ("watch_framing", watch_framing::run),
    ("watch_position", watch_position::run),
];

/// The largest input the fuzzer tries (`scripts/fuzz`'s `-max_len`).
const MAX_LEN: usize = 65_536;

#[test]
fn every_fuzz_targets_corpus_holds_its_property() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let listed: Vec<String> = std::fs::read_dir(root.join("fuzz_targets"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    for name in &listed {
        assert!(
            TARGETS.iter().any(|(t, _)| t == name),
            "fuzz target {name} is not replayed here"
        );
    }
    let mut failed = Vec::new();
    for (target, run) in TARGETS {
        let dir = root.join("corpus").join(target);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{target}: an empty corpus");
        for input in &inputs {
            let mut data = std::fs::read(input).unwrap();
            data.truncate(MAX_LEN);
            if std::panic::catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
                failed.push(input.display().to_string());
            }
        }
        println!("{target}: {} inputs", inputs.len());
    }
    assert!(
        failed.is_empty(),
        "inputs that break a property: {failed:#?}"
    );
}
