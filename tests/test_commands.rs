//! The test commands docs/operations.md gives ("Running the tests") select tests that exist:
//! each `./scripts/test --test e2e NAME::FILTER` names a module of `tests/e2e.rs`, and a test
//! of `tests/NAME.rs` whose name holds FILTER. (The whole suite, `./scripts/test`, is what CI
//! runs as written; running each slice again here would build and run the suite inside itself.)
//!
//! 1. `every_slice_the_docs_name_selects_tests`

use std::path::Path;

#[test]
fn every_slice_the_docs_name_selects_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let e2e = std::fs::read_to_string(root.join("tests/e2e.rs")).unwrap();
    let mut checked = 0;
    for line in docs.lines() {
        let Some(rest) = line.strip_prefix("./scripts/test --test e2e ") else {
            continue;
        };
        let selector = rest.split_whitespace().next().unwrap();
        let (module, filter) = selector.split_once("::").expect("a NAME:: selector");
        assert!(
            e2e.contains(&format!("mod {module};")),
            "docs/operations.md runs `{selector}`: tests/e2e.rs has no module {module}"
        );
        let tests = std::fs::read_to_string(root.join(format!("tests/{module}.rs"))).unwrap();
        let selects = tests.lines().any(|l| {
            l.trim_start()
                .strip_prefix("async fn ")
                .or_else(|| l.trim_start().strip_prefix("fn "))
                .is_some_and(|f| f.split('(').next().unwrap_or("").contains(filter))
        });
        assert!(
            selects,
            "docs/operations.md runs `{selector}`: no test of tests/{module}.rs has {filter:?}"
        );
        checked += 1;
    }
    assert!(
        checked >= 4,
        "read {checked} test commands in docs/operations.md"
    );
}
