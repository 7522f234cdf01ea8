//! Properties of the config loader over generated input: whatever an operator (or a broken
//! template) writes, loading never panics, and every problem it reports names a position inside
//! the file. `fuzz/` runs the same entry point coverage-guided.

use kubegate_config::{load_str, ConfigError};
use proptest::prelude::*;
use std::path::Path;

const VALID: &str = "listeners:\n  - address: 127.0.0.1:6443\n  - address: 127.0.0.1:7443\n    mode: terminate\n    tls:\n      cert_file: /nonexistent/tls.crt\n      key_file: /nonexistent/tls.key\nbackends:\n  - address: 127.0.0.1:7001\n    name: a\n  - address: 127.0.0.1:7002\nhealth:\n  interval: 2s\n  rise: 2\n  tls:\n    ca_file: /nonexistent/ca.crt\nbalance: least-connections\ndrain:\n  timeout: 30s\nterminate:\n  max_header_list_bytes: 65536\nlimits:\n  max_client_connections: 100\n";

/// Loads `text`; on error, checks each problem's position is inside it.
fn check(text: &str) -> Result<(), TestCaseError> {
    match load_str(text, Path::new("kubegate.yaml"), Path::new("/")) {
        Ok(_) => {}
        Err(ConfigError::Invalid { problems, .. }) => {
            prop_assert!(!problems.is_empty());
            // YAML breaks lines at \n, \r\n and a lone \r alike; positions count as YAML does.
            let lines = text.replace("\r\n", "\n").matches(['\n', '\r']).count() + 1;
            for p in problems {
                prop_assert!(
                    p.line >= 1 && p.line <= lines + 1,
                    "line {} of {lines}: {}",
                    p.line,
                    p.message
                );
                prop_assert!(p.column >= 1, "column {}: {}", p.column, p.message);
                prop_assert!(!p.message.is_empty());
            }
        }
        Err(e) => prop_assert!(false, "a text load cannot fail to read: {e}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_text_loads_or_names_positions_inside_it(text in "[ -~\n\r\t]{0,400}") {
        check(&text)?;
    }

    #[test]
    fn a_valid_config_with_one_byte_changed_loads_or_names_positions(
        at in any::<prop::sample::Index>(),
        byte in prop::sample::select(b" :-\n\t#&*!|>'\"{}[],0123456789abcxyz".to_vec()),
    ) {
        let mut bytes = VALID.as_bytes().to_vec();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        check(&String::from_utf8(bytes).unwrap())?;
    }

    #[test]
    fn a_valid_config_cut_short_loads_or_names_positions(at in any::<prop::sample::Index>()) {
        check(&VALID[..at.index(VALID.len())])?;
    }
}

/// Found by `scripts/fuzz` (config_load): a lone carriage return is a YAML line break, and
/// positions count it as one (the check above once counted lines as Rust's `lines()` does).
#[test]
fn a_lone_carriage_return_is_a_line_break() {
    let text = "listeners:\r  - address: 127.0.0.1:6443\rbackends:\r  - address: nonsense\n";
    let err = load_str(text, Path::new("kubegate.yaml"), Path::new("/")).unwrap_err();
    let p = &err.problems()[0];
    assert_eq!((p.line, p.column), (4, 14), "{}", p.message);
    check(text).unwrap();
}
