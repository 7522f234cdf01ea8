//! What this binary is: its version, the commit it was built from and whether that checkout
//! had changes, and the compiler (set by `gateway/build.rs`).

/// The crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit (12 hex digits), or `unknown`.
pub const COMMIT: &str = env!("KUBEGATE_COMMIT");

/// `clean`, `dirty` (tracked files had changes) or `unknown`.
pub const TREE_STATE: &str = env!("KUBEGATE_TREE_STATE");

/// `rustc --version` of the compiler.
pub const RUSTC: &str = env!("KUBEGATE_RUSTC");

/// `kubegate --version`'s text.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KUBEGATE_COMMIT"),
    ", tree ",
    env!("KUBEGATE_TREE_STATE"),
    "; ",
    env!("KUBEGATE_RUSTC"),
    ")"
);
