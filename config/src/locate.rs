//! Where each value sits in the YAML text, so that errors found after deserializing (duplicate
//! backends, missing files) can still name `LINE:COLUMN`.
//!
//! Paths are written like `backends[1].address`. The index maps each path to the position of
//! its value, and `key:<path>` to the position of the key itself.

use std::collections::HashMap;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// Positions (1-based line, column) of every value in one YAML document.
#[derive(Debug, Default)]
pub struct PathIndex {
    positions: HashMap<String, (usize, usize)>,
}

impl PathIndex {
    /// Indexes `text`. Text that does not parse yields an empty index (serde reports that error).
    pub fn build(text: &str) -> PathIndex {
        let mut builder = Builder::default();
        let mut parser = Parser::new_from_str(text);
        if parser.load(&mut builder, false).is_err() {
            return PathIndex::default();
        }
        PathIndex {
            positions: builder.positions,
        }
    }

    /// Every key written in the document, as a path (`listeners[0].tls.cert_file`), with the
    /// key's position; in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = (&str, (usize, usize))> {
        self.positions
            .iter()
            .filter_map(|(k, p)| Some((k.strip_prefix("key:")?, *p)))
    }

    /// Position of `path`'s value, or of its nearest ancestor that exists, or 1:1.
    pub fn position(&self, path: &str) -> (usize, usize) {
        let mut current = path;
        loop {
            if let Some(p) = self.positions.get(current) {
                return *p;
            }
            match parent(current) {
                Some(up) => current = up,
                None => return (1, 1),
            }
        }
    }
}

/// `a.b[2].c` → `a.b[2]` → `a.b` → `a` → None.
fn parent(path: &str) -> Option<&str> {
    let cut = path.rfind(['.', '['])?;
    Some(&path[..cut])
}

enum Frame {
    Mapping { path: String, key: Option<String> },
    Sequence { path: String, next: usize },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    positions: HashMap<String, (usize, usize)>,
}

impl Builder {
    /// The path the next value takes, advancing the parent frame. `None` when the next scalar is
    /// a mapping key.
    fn next_value_path(&mut self) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Mapping { path, key }) => key.take().map(|k| join(path, &k)),
            Some(Frame::Sequence { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                Some(p)
            }
        }
    }

    fn record(&mut self, path: &str, mark: Marker) {
        self.positions
            .entry(path.to_string())
            .or_insert((mark.line(), mark.col() + 1));
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        match ev {
            Event::Scalar(text, ..) => match self.next_value_path() {
                Some(path) => self.record(&path, mark),
                None => {
                    if let Some(Frame::Mapping { path, key }) = self.stack.last_mut() {
                        let key_path = format!("key:{}", join(path, &text));
                        let mapping_path = path.clone();
                        *key = Some(text);
                        self.record(&key_path, mark);
                        // The parser marks a block mapping's start past its first key; the
                        // first key is where a reader sees the mapping begin.
                        self.record(&mapping_path, mark);
                    }
                }
            },
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let path = self.next_value_path().unwrap_or_default();
                if matches!(ev, Event::SequenceStart(..)) {
                    self.record(&path, mark);
                }
                self.stack.push(if matches!(ev, Event::MappingStart(..)) {
                    Frame::Mapping { path, key: None }
                } else {
                    Frame::Sequence { path, next: 0 }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            Event::Alias(_) => {
                self.next_value_path();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "listeners:\n  - address: 127.0.0.1:6443\nbackends:\n  - address: 127.0.0.1:7001\n  - name: b\n    address: 127.0.0.1:7002\nhealth:\n  tls: {ca_file: ca.crt}\n";

    #[test]
    fn values_are_found_by_path() {
        let index = PathIndex::build(DOC);
        assert_eq!(index.position("listeners[0].address"), (2, 14));
        assert_eq!(index.position("backends[1].address"), (6, 14));
        assert_eq!(index.position("backends[1].name"), (5, 11));
        assert_eq!(index.position("health.tls.ca_file"), (8, 18));
    }

    #[test]
    fn missing_paths_fall_back_to_the_nearest_ancestor() {
        let index = PathIndex::build(DOC);
        assert_eq!(index.position("backends[1].health_address"), (5, 5));
        assert_eq!(index.position("admin.address"), (1, 1));
    }
}
