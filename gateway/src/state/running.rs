//! The running generation: the configuration in force and the clusters it made, read lock-free
//! per connection and replaced whole, together, by start-up and by each reload
//! (`control::generation`). A reader never sees one reload's configuration with another's
//! clusters.

use crate::state::cluster::Clusters;
use arc_swap::ArcSwap;
use kubegate_config::Config;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// What one configuration made: the configuration and its clusters.
pub struct Generation {
    /// The configuration.
    pub config: Arc<Config>,
    /// Its clusters, each matched by name with the one of the generation before (a kept
    /// cluster is the same `Cluster`, its pool and what it learned kept).
    pub clusters: Arc<Clusters>,
}

impl Generation {
    /// Nothing yet: no configuration, no cluster (what is served before start-up put its
    /// first generation in force).
    pub fn empty() -> Generation {
        Generation {
            config: Arc::new(Config::new(Vec::new(), Vec::new())),
            clusters: Arc::new(Clusters::new(Vec::new(), false)),
        }
    }
}

/// The generation in force and the file it came from.
pub struct RunningConfig {
    current: ArcSwap<Generation>,
    path: PathBuf,
    /// Counts generations put in force. Tasks that carry configuration into something they
    /// own (the accept loops: the listeners' keepalive) wait on it.
    applied: watch::Sender<u64>,
}

/// The configuration in force, borrowed from its generation.
pub struct ConfigGuard(arc_swap::Guard<Arc<Generation>>);

impl Deref for ConfigGuard {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.0.config
    }
}

impl RunningConfig {
    /// `config`, loaded from `path`, with no cluster yet: start-up puts its clusters in force
    /// as a reload does (`control::generation`).
    pub fn new(config: Config, path: PathBuf) -> RunningConfig {
        let clusters = Clusters::new(Vec::new(), config.names_clusters());
        RunningConfig {
            current: ArcSwap::from_pointee(Generation {
                config: Arc::new(config),
                clusters: Arc::new(clusters),
            }),
            path,
            applied: watch::Sender::new(0),
        }
    }

    /// The configuration in force.
    pub fn load(&self) -> ConfigGuard {
        ConfigGuard(self.current.load())
    }

    /// The configuration in force, as an owned handle.
    pub fn load_full(&self) -> Arc<Config> {
        self.current.load().config.clone()
    }

    /// The generation in force.
    pub fn generation(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// The clusters in force.
    pub fn clusters(&self) -> Arc<Clusters> {
        self.current.load().clusters.clone()
    }

    /// The file reloads read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Puts `generation` in force and tells the followers.
    pub fn put(&self, generation: Arc<Generation>) {
        self.current.store(generation);
        self.applied.send_modify(|n| *n += 1);
    }

    /// Follows the generations put in force.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }
}
