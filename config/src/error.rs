//! Configuration errors that always say where: `FILE:LINE:COLUMN: what is wrong`.

use std::fmt;
use std::path::PathBuf;

/// One thing wrong with a configuration, with its position in the file (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Line of the offending value, 1-based.
    pub line: usize,
    /// Column of the offending value, 1-based.
    pub column: usize,
    /// What is wrong, in words an operator can act on.
    pub message: String,
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read at all.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file that was asked for.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file was read; these problems were found in it (at least one).
    #[error("{}", render(.path, .problems))]
    Invalid {
        /// The file the problems are in.
        path: PathBuf,
        /// Every problem found, in file order.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The problems found, empty for a read error.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { problems, .. } => problems,
        }
    }
}

fn render(path: &std::path::Path, problems: &[Problem]) -> String {
    let mut out = String::new();
    for (i, p) in problems.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!(
            "{}:{}:{}: {}",
            path.display(),
            p.line,
            p.column,
            p.message
        ));
    }
    out
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}
