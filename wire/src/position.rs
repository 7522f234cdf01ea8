//! Where a client's watch stands, and from where it can continue on another replica. Pure:
//! fed the events as they pass, asked after a break.
//!
//! An event's resourceVersion is a position in the stream only once the stream is past any
//! listing of current objects: the synthetic ADDED events a watch starts with (no
//! `resourceVersion`, or `"0"`, or `sendInitialEvents`) carry each object's own version, in no
//! order. So positions count from the start for a watch from a given version; otherwise from the
//! first BOOKMARK (the initial-events-end one with `sendInitialEvents`). A watch that broke
//! before any event reached the client is simply asked for again.

use crate::framing::{Event, Kind};
use crate::target::{self, Query};
use std::time::Duration;

/// What the client asked of its watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// `resourceVersion`, when it names a version (not absent, `""` or `"0"`).
    pub from: Option<String>,
    /// `allowWatchBookmarks`: the client wants BOOKMARKs (kubegate asks for them anyway).
    pub bookmarks: bool,
    /// `timeoutSeconds`, when it is a positive number of seconds (`0`, as none, leaves the
    /// apiserver to choose).
    pub timeout: Option<Duration>,
    /// `timeoutSeconds` is there but is not a number: the apiserver refuses the watch (400), so
    /// it goes upstream as the client wrote it.
    pub timeout_unreadable: bool,
    /// `sendInitialEvents`.
    pub initial_events: bool,
}

impl Asked {
    /// Reads a watch request's query as the apiserver decodes its `ListOptions`.
    pub fn from_query(query: Option<&str>) -> Asked {
        let q = Query::new(query);
        let timeout = q.text("timeoutSeconds").map(|t| t.parse::<u64>());
        Asked {
            from: q
                .text("resourceVersion")
                .filter(|v| !v.is_empty() && v != "0")
                .map(|v| v.into_owned()),
            bookmarks: q.flag("allowWatchBookmarks"),
            timeout: match timeout {
                Some(Ok(secs)) if secs > 0 => Some(Duration::from_secs(secs)),
                _ => None,
            },
            timeout_unreadable: matches!(timeout, Some(Err(_))),
            initial_events: q.flag("sendInitialEvents"),
        }
    }
}

/// Why a broken watch cannot continue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotResumable {
    /// Events of a listing reached the client, and no position followed them.
    NoPosition,
    /// `sendInitialEvents`, broken before the initial events ended.
    InitialEvents,
}

/// What to do with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deliver {
    /// Send it to the client as it came.
    AsIs,
    /// Send it without its `Table` column definitions (the client has them).
    WithoutTableHeader,
    /// Keep it from the client (a BOOKMARK it did not ask for).
    Drop,
}

/// A client's watch as it passes through kubegate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Events the client received.
    pub delivered: u64,
    /// The last position the client's stream reached.
    pub position: Option<String>,
    /// Event versions are positions from here on.
    positional: bool,
    /// `sendInitialEvents`: their end was passed.
    initial_events_done: bool,
    /// The client received a `Table` header.
    table_header_sent: bool,
    /// The stream carried an ERROR (with this code): it ends.
    pub error: Option<u16>,
}

impl Progress {
    /// A watch just opened as `asked`.
    pub fn new(asked: &Asked) -> Progress {
        Progress {
            positional: asked.from.is_some() && !asked.initial_events,
            position: asked.from.clone().filter(|_| !asked.initial_events),
            ..Progress::default()
        }
    }

    /// Records `event`; says how it goes to the client.
    pub fn observe(&mut self, asked: &Asked, event: &Event) -> Deliver {
        match event.kind {
            Kind::Bookmark => {
                if event.initial_events_end {
                    self.initial_events_done = true;
                }
                if let Some(rv) = &event.resource_version {
                    self.position = Some(rv.clone());
                    self.positional = true;
                }
            }
            Kind::Change => {
                if self.positional {
                    if let Some(rv) = &event.resource_version {
                        self.position = Some(rv.clone());
                    }
                }
            }
            Kind::Error => self.error = event.code.or(Some(500)),
        }
        let deliver = if event.kind == Kind::Bookmark && !asked.bookmarks {
            Deliver::Drop
        } else if event.table_header && self.table_header_sent {
            Deliver::WithoutTableHeader
        } else {
            Deliver::AsIs
        };
        if deliver != Deliver::Drop {
            self.delivered += 1;
            self.table_header_sent |= event.table_header;
        }
        deliver
    }

    /// Whether the watch could continue on another replica from a position now (what
    /// [`resume_from`] says is `Ok(Some(_))`): a watch kubegate moves of its own accord must
    /// not lose what happened while nothing had reached its client yet.
    ///
    /// [`resume_from`]: Progress::resume_from
    pub fn resumable(&self, asked: &Asked) -> bool {
        if self.delivered == 0 {
            return (self.positional && self.position.is_some() && !asked.initial_events)
                || asked.from.is_some();
        }
        let initial_events_done = self.initial_events_done || !asked.initial_events;
        initial_events_done && self.positional && self.position.is_some()
    }

    /// From where the watch continues after a break: `Ok(Some(version))`, or `Ok(None)` to
    /// ask again exactly as the client did (nothing reached it yet).
    pub fn resume_from(&self, asked: &Asked) -> Result<Option<String>, NotResumable> {
        if self.delivered == 0 {
            // Nothing reached the client, but a BOOKMARK it did not ask for still marks a
            // position: continuing from it is exact and closer to the replica's window.
            if let (Some(rv), true, false) = (&self.position, self.positional, asked.initial_events)
            {
                return Ok(Some(rv.clone()));
            }
            return Ok(asked.from.clone());
        }
        if asked.initial_events && !self.initial_events_done {
            return Err(NotResumable::InitialEvents);
        }
        match (&self.position, self.positional) {
            (Some(rv), true) => Ok(Some(rv.clone())),
            _ => Err(NotResumable::NoPosition),
        }
    }

    /// The stream continues from `from` on another replica: its versions are positions.
    pub fn resumed(&mut self, from: &Option<String>) {
        if from.is_some() {
            self.positional = true;
        }
    }
}

/// The query of the request that continues a watch: from `from` (or as asked, when `None`),
/// with BOOKMARKs (positions), `left` of the watch's time (when given), and, once past the
/// initial events, without asking for them again. The client's other pairs are kept as it
/// wrote them; a pair is replaced when its decoded key is one kubegate sets, so that an
/// encoded key (`allowWatchBookm%61rks=false`) cannot come first and win.
pub fn resumed_query(original: Option<&str>, from: Option<&str>, left: Option<Duration>) -> String {
    let replaced = |key: &[u8]| {
        key == b"allowWatchBookmarks"
            || (left.is_some() && key == b"timeoutSeconds")
            || (from.is_some()
                && matches!(
                    key,
                    b"resourceVersion" | b"sendInitialEvents" | b"resourceVersionMatch"
                ))
    };
    let mut out = String::with_capacity(original.map_or(0, str::len) + 64);
    let mut push = |pair: &str| {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(pair);
    };
    for raw in original.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        if !target::key_of(raw).is_some_and(|k| replaced(&k)) {
            push(raw);
        }
    }
    if let Some(rv) = from {
        push(&format!("resourceVersion={}", target::escape_component(rv)));
    }
    push("allowWatchBookmarks=true");
    if let Some(left) = left {
        push(&format!("timeoutSeconds={}", left.as_secs().max(1)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn event(kind: Kind, rv: &str) -> Event {
        Event {
            bytes: Bytes::new(),
            kind,
            resource_version: Some(rv.to_string()),
            initial_events_end: false,
            code: None,
            table_header: false,
        }
    }

    /// Where `p` resumes a watch asked so, checked against what `resumable` says of it.
    fn resumes(p: &Progress, asked: &Asked) -> Result<Option<String>, NotResumable> {
        let from = p.resume_from(asked);
        assert_eq!(p.resumable(asked), matches!(from, Ok(Some(_))));
        from
    }

    fn end_of_initial_events(rv: &str) -> Event {
        Event {
            initial_events_end: true,
            ..event(Kind::Bookmark, rv)
        }
    }

    #[test]
    fn a_watch_from_a_version_resumes_from_its_last_event() {
        let asked = Asked::from_query(Some("watch=1&resourceVersion=100"));
        let mut p = Progress::new(&asked);
        assert_eq!(p.resume_from(&asked), Ok(Some("100".into())));
        p.observe(&asked, &event(Kind::Change, "105"));
        p.observe(&asked, &event(Kind::Change, "107"));
        assert_eq!(p.resume_from(&asked), Ok(Some("107".into())));
    }

    #[test]
    fn a_listing_watch_resumes_only_from_a_bookmark() {
        let asked = Asked::from_query(Some("watch=1"));
        let mut p = Progress::new(&asked);
        // Nothing delivered: ask again exactly as the client did.
        assert_eq!(resumes(&p, &asked), Ok(None));
        // Synthetic ADDED events of the listing: their versions are not positions.
        p.observe(&asked, &event(Kind::Change, "90"));
        p.observe(&asked, &event(Kind::Change, "40"));
        assert_eq!(resumes(&p, &asked), Err(NotResumable::NoPosition));
        // A bookmark (dropped: the client did not ask for bookmarks) gives a position.
        assert_eq!(
            p.observe(&asked, &event(Kind::Bookmark, "120")),
            Deliver::Drop
        );
        assert_eq!(resumes(&p, &asked), Ok(Some("120".into())));
        p.observe(&asked, &event(Kind::Change, "125"));
        assert_eq!(p.resume_from(&asked), Ok(Some("125".into())));
        assert_eq!(p.delivered, 3);
    }

    #[test]
    fn send_initial_events_resumes_only_after_their_end() {
        let asked = Asked::from_query(Some(
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        ));
        let mut p = Progress::new(&asked);
        p.observe(&asked, &event(Kind::Change, "30"));
        assert_eq!(resumes(&p, &asked), Err(NotResumable::InitialEvents));
        assert_eq!(
            p.observe(&asked, &end_of_initial_events("50")),
            Deliver::AsIs
        );
        assert_eq!(resumes(&p, &asked), Ok(Some("50".into())));
    }

    #[test]
    fn a_resumed_stream_does_not_repeat_the_table_header() {
        let asked = Asked::from_query(Some("watch=1&resourceVersion=5"));
        let mut p = Progress::new(&asked);
        let header = Event {
            table_header: true,
            ..event(Kind::Change, "6")
        };
        assert_eq!(p.observe(&asked, &header), Deliver::AsIs);
        assert_eq!(p.observe(&asked, &header), Deliver::WithoutTableHeader);
    }

    #[test]
    fn an_error_event_is_delivered_and_remembered() {
        let asked = Asked::from_query(Some("watch=1&resourceVersion=5"));
        let mut p = Progress::new(&asked);
        let expired = Event {
            code: Some(410),
            ..event(Kind::Error, "")
        };
        assert_eq!(p.observe(&asked, &expired), Deliver::AsIs);
        assert_eq!(p.error, Some(410));
    }

    #[test]
    fn the_resumed_query_asks_from_the_position_with_the_time_left() {
        let q = resumed_query(
            Some("watch=1&resourceVersion=5&timeoutSeconds=300&labelSelector=a%3Db&allowWatchBookmarks=false&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
            Some("77"),
            Some(Duration::from_secs(120)),
        );
        assert_eq!(
            q,
            "watch=1&labelSelector=a%3Db&resourceVersion=77&allowWatchBookmarks=true&timeoutSeconds=120"
        );
        // Keys are compared decoded: an encoded one cannot come first and win.
        assert_eq!(
            resumed_query(
                Some("watch=1&allowWatchBookm%61rks=false&timeout%53econds=9&x=%zz"),
                None,
                Some(Duration::from_secs(30))
            ),
            "watch=1&x=%zz&allowWatchBookmarks=true&timeoutSeconds=30"
        );
        // Without a time of kubegate's, the client's timeoutSeconds stays as written.
        assert_eq!(
            resumed_query(Some("watch=1&timeoutSeconds=abc"), None, None),
            "watch=1&timeoutSeconds=abc&allowWatchBookmarks=true"
        );
        // Nothing delivered yet: the same request, bookmarks added.
        assert_eq!(
            resumed_query(Some("watch=true"), None, None),
            "watch=true&allowWatchBookmarks=true"
        );
        let asked = Asked::from_query(Some("w%61tch=yes&timeoutSeconds=0&allowWatchBookmarks"));
        assert!(asked.bookmarks);
        assert_eq!(asked.timeout, None);
        assert!(!asked.timeout_unreadable);
        assert!(Asked::from_query(Some("timeoutSeconds=soon")).timeout_unreadable);
    }
}
