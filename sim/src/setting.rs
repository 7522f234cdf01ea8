//! A value the fault port sets while requests read it: a stand-in's answer.

use std::sync::RwLock;

/// The value now; [`Setting::set`] replaces it for every later [`Setting::get`].
#[derive(Debug, Default)]
pub struct Setting<T>(RwLock<T>);

impl<T: Clone> Setting<T> {
    /// From now on, `value`.
    pub fn set(&self, value: T) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = value;
    }

    /// The value now.
    pub fn get(&self) -> T {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
