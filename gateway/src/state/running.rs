//! The running configuration: read lock-free per connection, replaced whole by a reload.

use arc_swap::ArcSwap;
use kubegate_config::Config;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// The configuration in force and the file it came from.
pub struct RunningConfig {
    current: ArcSwap<Config>,
    path: PathBuf,
    /// Counts applied reloads. Tasks that carry configuration into something they own (the
    /// accept loops: the listeners' keepalive) wait on it.
    applied: watch::Sender<u64>,
}

impl RunningConfig {
    /// `config`, loaded from `path`.
    pub fn new(config: Config, path: PathBuf) -> RunningConfig {
        RunningConfig {
            current: ArcSwap::from_pointee(config),
            path,
            applied: watch::Sender::new(0),
        }
    }

    /// The configuration in force.
    pub fn load(&self) -> arc_swap::Guard<Arc<Config>> {
        self.current.load()
    }

    /// The configuration in force, as an owned handle.
    pub fn load_full(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// The file reloads read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Puts `config` in force and tells the followers.
    pub fn replace(&self, config: Config) {
        self.current.store(Arc::new(config));
        self.applied.send_modify(|n| *n += 1);
    }

    /// Follows reloads.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }
}
