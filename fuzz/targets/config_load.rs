//! The config loader: YAML text to a validated config, or problems with positions inside it.
use kubegate_config::{load_str, ConfigError};
use std::path::Path;

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(ConfigError::Invalid { problems, .. }) =
        load_str(text, Path::new("kubegate.yaml"), Path::new("/"))
    {
        // YAML breaks lines at \n, \r\n and a lone \r alike; positions count as YAML does.
        let lines = text.replace("\r\n", "\n").matches(['\n', '\r']).count() + 1;
        for p in problems {
            assert!(
                p.line >= 1 && p.line <= lines + 1,
                "line {} of {lines}",
                p.line
            );
            assert!(p.column >= 1);
        }
    }
}
