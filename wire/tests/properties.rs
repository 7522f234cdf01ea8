//! Properties of the wire rules over generated input: they never panic on any bytes, a watch
//! stream cut anywhere decodes to the same events with the same bytes, a resumed watch continues
//! from the last position the client saw, and no identity header a client sends survives.
//! Fast (a few hundred cases each): part of the normal test suite. `fuzz/` runs the same
//! entry points coverage-guided for as long as one likes.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri};
use kubegate_config::FrontProxy;
use kubegate_wire::classify::{classify, ReadTarget, Verb};
use kubegate_wire::framing::{Decoder, Framing, Kind, MAX_EVENT};
use kubegate_wire::identity::{IdentityHeaders, UserInfo};
use kubegate_wire::position::{Asked, Progress};
use proptest::prelude::*;

/// One generated watch event: its type, its object's resourceVersion, whether it is the
/// initial-events-end BOOKMARK.
#[derive(Debug, Clone)]
struct Ev {
    kind: &'static str,
    rv: u64,
    end_marker: bool,
}

fn events() -> impl Strategy<Value = Vec<Ev>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]),
            1u64..1_000_000,
            any::<bool>(),
        )
            .prop_map(|(kind, rv, end)| Ev {
                kind,
                rv,
                end_marker: end && kind == "BOOKMARK",
            }),
        0..20,
    )
}

fn json_line(e: &Ev) -> Vec<u8> {
    let annotations = if e.end_marker {
        r#","annotations":{"k8s.io/initial-events-end":"true"}"#
    } else {
        ""
    };
    format!(
        "{{\"type\":\"{}\",\"object\":{{\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"n\",\"resourceVersion\":\"{}\"{annotations}}}}}}}\n",
        e.kind, e.rv
    )
    .into_bytes()
}

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn field(n: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    varint(n << 3 | 2, &mut v);
    varint(payload.len() as u64, &mut v);
    v.extend_from_slice(payload);
    v
}

/// A protobuf watch frame as the apiserver writes it: length, then `WatchEvent{type,
/// object: RawExtension{raw: "k8s\0" Unknown{typeMeta, raw: ConfigMap{metadata}}}}`.
fn protobuf_frame(e: &Ev) -> Vec<u8> {
    let mut meta = [field(1, b"n"), field(6, e.rv.to_string().as_bytes())].concat();
    if e.end_marker {
        let entry = [field(1, b"k8s.io/initial-events-end"), field(2, b"true")].concat();
        meta.extend(field(12, &entry));
    }
    let object = field(1, &meta);
    let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
    let unknown = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &object)].concat();
    let event = [field(1, e.kind.as_bytes()), field(2, &field(1, &unknown))].concat();
    [(event.len() as u32).to_be_bytes().to_vec(), event].concat()
}

/// Feeds `stream` to a decoder in pieces cut at `cuts` (positions, any order).
fn decode_cut(
    framing: Framing,
    stream: &[u8],
    cuts: &[usize],
) -> Vec<kubegate_wire::framing::Event> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    at.push(0);
    at.push(stream.len());
    at.sort_unstable();
    at.dedup();
    let mut d = Decoder::new(framing);
    let mut out = Vec::new();
    for w in at.windows(2) {
        d.push(&stream[w[0]..w[1]]);
        while let Some(e) = d.next_event().expect("well-formed events") {
            out.push(e);
        }
    }
    assert_eq!(d.pending(), 0, "bytes left over");
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_timeout_reads_as_go_reads_it_or_not_at_all(
        text in "[-+]?([0-9.]{0,6}(ns|us|µs|ms|s|m|h|x)?){0,4}",
        whole in 0u64..1_000_000,
        unit in prop::sample::select(vec![("ms", 1_000_000u128), ("s", 1_000_000_000), ("m", 60_000_000_000)]),
    ) {
        // Anything: an answer or a refusal, never a panic.
        let _ = kubegate_wire::go_duration::parse(&text);
        // A whole number of a unit is exactly that many.
        let d = kubegate_wire::go_duration::parse(&format!("{whole}{}", unit.0)).unwrap();
        prop_assert_eq!(d.as_nanos(), u128::from(whole) * unit.1);
    }

    #[test]
    fn a_watch_stream_cut_anywhere_gives_the_same_events(
        evs in events(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        protobuf in any::<bool>(),
    ) {
        let (framing, frames): (Framing, Vec<Vec<u8>>) = if protobuf {
            (Framing::Protobuf, evs.iter().map(protobuf_frame).collect())
        } else {
            (Framing::JsonLines, evs.iter().map(json_line).collect())
        };
        let stream = frames.concat();
        let out = decode_cut(framing, &stream, &cuts);
        prop_assert_eq!(out.len(), evs.len());
        for ((e, want), bytes) in out.iter().zip(&evs).zip(&frames) {
            prop_assert_eq!(&e.bytes[..], &bytes[..], "forwarded bytes are the bytes received");
            let kind = if want.kind == "BOOKMARK" { Kind::Bookmark } else { Kind::Change };
            prop_assert_eq!(e.kind, kind);
            let rv = want.rv.to_string();
            prop_assert_eq!(e.resource_version.as_deref(), Some(rv.as_str()));
            prop_assert_eq!(e.initial_events_end, want.end_marker);
        }
    }

    #[test]
    fn any_bytes_never_panic_and_hold_bounded_memory(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..600), 0..20),
        protobuf in any::<bool>(),
    ) {
        let mut d = Decoder::new(if protobuf { Framing::Protobuf } else { Framing::JsonLines });
        'feed: for c in &chunks {
            d.push(c);
            loop {
                match d.next_event() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    // A malformed or oversized event ends the watch: nothing more is read.
                    Err(_) => break 'feed,
                }
            }
            prop_assert!(d.pending() <= MAX_EVENT + c.len());
        }
    }

    #[test]
    fn a_resumed_watch_continues_after_the_last_event_the_client_saw(
        start in 1u64..1000,
        steps in prop::collection::vec(1u64..50, 1..30),
        bookmarks in prop::collection::vec(any::<bool>(), 30),
    ) {
        let query = format!("watch=1&resourceVersion={start}");
        let asked = Asked::from_query(Some(&query));
        let mut progress = Progress::new(&asked);
        let mut rv = start;
        for (i, step) in steps.iter().enumerate() {
            rv += step;
            let kind = if bookmarks[i] { "BOOKMARK" } else { "MODIFIED" };
            let line = json_line(&Ev { kind, rv, end_marker: false });
            let mut d = Decoder::new(Framing::JsonLines);
            d.push(&line);
            let event = d.next_event().unwrap().unwrap();
            progress.observe(&asked, &event);
        }
        let from = progress.resume_from(&asked).expect("resumable");
        let rv = rv.to_string();
        prop_assert_eq!(from.as_deref(), Some(rv.as_str()));
    }

    #[test]
    fn classify_takes_any_request_and_finds_every_watch(
        path in "(/[a-zA-Z0-9.%:-]{0,12}){0,8}",
        query in "[a-zA-Z0-9=&%.-]{0,40}",
        method in prop::sample::select(vec!["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT"]),
    ) {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let Ok(uri) = format!("{}?{query}", if path.is_empty() { "/" } else { &path }).parse::<Uri>() else {
            return Ok(());
        };
        // A target that does not decode is refused, never guessed at.
        if let Ok(class) = classify(&method, &uri) {
            prop_assert!(class.verb != Verb::Watch || class.long_running.is_some());
        }
        // Every GET of a collection whose first `watch` is true is a watch, and a watch is
        // long-running.
        let watched = Uri::try_from(format!("/api/v1/namespaces/ns/configmaps?watch=true&{query}"));
        if let Ok(w) = watched {
            let c = classify(&Method::GET, &w).unwrap();
            prop_assert_eq!(c.verb, Verb::Watch);
            prop_assert!(c.long_running.is_some());
        }
    }

    #[test]
    fn encoding_unreserved_characters_changes_no_classification(
        path in "(/[a-zA-Z0-9._~-]{0,10}){0,8}",
        query in "(&[a-zA-Z]{1,8}(=[a-zA-Z0-9._~-]{0,6})?){0,4}",
        method in prop::sample::select(vec!["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]),
        mask in any::<u64>(),
    ) {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let plain = format!("{}?{}", if path.is_empty() { "/" } else { &path }, query.trim_start_matches('&'));
        // The same target with some unreserved characters written as %XX (chosen by `mask`).
        let encoded: String = plain
            .chars()
            .enumerate()
            .map(|(i, c)| {
                let unreserved = c.is_ascii_alphanumeric() || "-._~".contains(c);
                if unreserved && mask >> (i % 64) & 1 == 1 {
                    format!("%{:02X}", c as u8)
                } else {
                    c.to_string()
                }
            })
            .collect();
        let (Ok(a), Ok(b)) = (plain.parse::<Uri>(), encoded.parse::<Uri>()) else {
            return Ok(());
        };
        let (ra, rb) = (ReadTarget::of(&a), ReadTarget::of(&b));
        prop_assert_eq!(ra.is_ok(), rb.is_ok());
        if let (Ok(ra), Ok(rb)) = (ra, rb) {
            prop_assert_eq!(ra.info(&method), rb.info(&method), "{} vs {}", plain, encoded);
        }
    }

    #[test]
    fn no_identity_header_a_client_sends_survives(
        names in prop::collection::vec("(x-remote-(user|group|uid|extra-[a-z]{0,6})|x-other-[a-z]{1,4}|authorization)", 0..12),
        values in prop::collection::vec("[ -~]{0,20}", 12),
        user in "[a-z:-]{1,20}",
        groups in prop::collection::vec("[a-z:-]{1,12}", 0..4),
    ) {
        let identity_headers = IdentityHeaders::new(&front_proxy()).unwrap();
        let mut headers = uppercase_headers(&names, &values);
        identity_headers.strip(&mut headers);
        for n in headers.keys() {
            prop_assert!(!n.as_str().starts_with("x-remote-"), "{} survived", n);
        }
        let identity = UserInfo { user: user.clone(), groups: groups.clone(), uid: None, extra: Default::default() };
        prop_assert!(identity_headers.apply(&identity, &mut headers));
        let users: Vec<_> = headers.get_all("x-remote-user").iter().collect();
        prop_assert_eq!(users.len(), 1);
        prop_assert_eq!(users[0].to_str().unwrap(), user.as_str());
        let got: Vec<_> = headers.get_all("x-remote-group").iter().map(|v| v.to_str().unwrap().to_string()).collect();
        prop_assert_eq!(got, groups);
    }

    #[test]
    fn with_lists_of_names_none_survives_and_the_first_carries_the_identity(
        names in prop::collection::vec("x-(auth|alt|remote)-(user|group|uid|extra-[a-z]{0,6})|authorization|x-trace", 0..12),
        values in prop::collection::vec("[ -~]{0,20}", 12),
        user in "[a-z:-]{1,20}",
        groups in prop::collection::vec("[a-z:-]{1,12}", 0..4),
    ) {
        let fp: FrontProxy = serde_yaml_ng::from_str(
            "cert_file: a\nkey_file: b\nusername_headers: [X-Auth-User, X-Alt-User]\ngroup_headers: [X-Auth-Group, X-Alt-Group]\nextra_prefixes: [X-Auth-Extra-, X-Alt-Extra-]\nuid_headers: [X-Auth-Uid, X-Alt-Uid]\n",
        ).unwrap();
        let identity_headers = IdentityHeaders::new(&fp).unwrap();
        let mut headers = uppercase_headers(&names, &values);
        identity_headers.strip(&mut headers);
        for n in headers.keys() {
            let n = n.as_str();
            prop_assert!(
                !(n.starts_with("x-auth-") || n.starts_with("x-alt-") || n.starts_with("x-remote-")),
                "{} survived", n
            );
        }
        let identity = UserInfo { user: user.clone(), groups: groups.clone(), uid: None, extra: Default::default() };
        prop_assert!(identity_headers.apply(&identity, &mut headers));
        let users: Vec<_> = headers.get_all("x-auth-user").iter().collect();
        prop_assert_eq!(users.len(), 1);
        prop_assert_eq!(users[0].to_str().unwrap(), user.as_str());
        prop_assert!(headers.get("x-alt-user").is_none());
        let got: Vec<_> = headers.get_all("x-auth-group").iter().map(|v| v.to_str().unwrap().to_string()).collect();
        prop_assert_eq!(got, groups);
    }

    #[test]
    fn certificate_parsing_takes_any_bytes(der in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = UserInfo::from_der(&der);
    }
}

fn front_proxy() -> FrontProxy {
    serde_yaml_ng::from_str("cert_file: a\nkey_file: b\n").unwrap()
}

/// Headers named `names` with `values`, each name in upper case: HTTP/1.1 names arrive in any
/// case, as the client wrote them.
fn uppercase_headers(names: &[String], values: &[String]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (n, v) in names.iter().zip(values) {
        let n = HeaderName::from_bytes(n.to_uppercase().as_bytes()).unwrap();
        headers.append(n, HeaderValue::from_str(v).unwrap());
    }
    headers
}
