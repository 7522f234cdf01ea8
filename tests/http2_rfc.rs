//! HTTP/2 as RFC 9113 says it, frame by frame, against the terminate listener: what a
//! conformance suite of the h2spec family asks (h2spec itself cannot be installed on this
//! machine; these cases are ported by hand on `h2raw`).
//!
//! 1. `frames_of_the_wrong_length_are_frame_size_errors`: a PING, WINDOW_UPDATE, RST_STREAM or
//!    SETTINGS frame whose length its type fixes, with another, closes the connection with
//!    GOAWAY `FRAME_SIZE_ERROR` (§4.2, §6.4, §6.5, §6.7, §6.9), where h2 sent
//!    `PROTOCOL_ERROR`.
//! 2. `frames_a_server_must_refuse_close_the_connection_with_the_rfcs_code`: a client's
//!    PUSH_PROMISE (§8.4), DATA or HEADERS on stream 0 (§6.1, §6.2), a frame on an idle
//!    stream (§5.1), CONTINUATION without HEADERS (§6.10), a zero WINDOW_UPDATE on the
//!    connection (§6.9), and SETTINGS out of range (§6.5.2): ENABLE_PUSH 2,
//!    INITIAL_WINDOW_SIZE over 2^31-1 (`FLOW_CONTROL_ERROR`), MAX_FRAME_SIZE under 16,384.
//! 3. `streams_a_client_misuses_are_reset_with_the_rfcs_code`: DATA on a stream the client
//!    half-closed, or after it reset it, is `STREAM_CLOSED` (§6.1, §5.1); a request without a
//!    mandatory pseudo-header, and a CONNECT without `:authority`, are malformed
//!    (`PROTOCOL_ERROR`, §8.1.1, §8.5). Each a stream error or the connection's, as the RFC
//!    lets an endpoint choose.
//! 4. `the_suites_other_cases_are_answered_as_the_rfc_says`: the rest of the suite's cases
//!    ported (§4.1–§8.1, RFC 7541's errors): frames of unknown types or flags ignored, frame
//!    and header-block limits, HPACK's errors, stream states and identifiers, each frame
//!    type's own rules, unknown error codes, flow-control windows, and malformed requests,
//!    each with the RFC's code.
//! 5. `every_case_haproxy_passes_kubegate_passes_side_by_side`: every case above against
//!    kubegate and against HAProxy terminating TLS (`mode http`, h2) in front of the same
//!    replica: kubegate passes each case HAProxy passes; the table of both is printed.

use kubegate_e2e::attack::attacked;
use kubegate_e2e::h2raw::{flag, kind, Ending, RawH2};
use kubegate_e2e::*;
use std::net::SocketAddr;
use std::time::Duration;

/// How long kubegate has to answer a case.
const T: Duration = Duration::from_secs(30);
/// How long HAProxy has, side by side: a case it lets pass without an answer counts as failed
/// after this (which can only spare kubegate, never fail it).
const PEER_T: Duration = Duration::from_secs(5);

/// RFC 9113 §7.
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;

const COMPRESSION_ERROR: u32 = 0x9;

/// PUSH_PROMISE (RFC 9113 §6.6).
const PUSH_PROMISE: u8 = 0x5;
/// PRIORITY (RFC 9113 §6.3).
const PRIORITY: u8 = 0x2;
/// A frame type no RFC defines (§4.1, §5.5: ignored).
const UNKNOWN: u8 = 0x16;
/// PADDED (§6.1, §6.2) and PRIORITY (§6.2) flags.
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

/// One case: what it is, the frame (type, flags, stream, payload), the error code due.
type Case = (&'static str, u8, u8, u32, Vec<u8>, u32);

/// What one case found at a server: its name, and what was wrong (`None`: as the RFC says).
type Outcome = (&'static str, Option<String>);

/// The cases that went wrong, as lines.
fn wrong(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter_map(|(case, w)| w.as_ref().map(|w| format!("{case}: {w}")))
        .collect()
}

/// Each case's frame sent alone on a connection of its own to `at`: the connection must end
/// with GOAWAY and the case's code within `limit`.
async fn frame_cases(at: SocketAddr, pki: &Pki, cases: Vec<Case>, limit: Duration) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for (case, frame, flags, stream, payload, code) in cases {
        let mut raw = RawH2::connect(at, pki).await.unwrap();
        raw.frame(frame, flags, stream, &payload).await.unwrap();
        let ending = raw.ending(limit).await;
        let w = (ending != Ending::GoAway(code)).then(|| format!("{ending:?}, not GoAway({code})"));
        outcomes.push((case, w));
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_of_the_wrong_length_are_frame_size_errors() {
    let s = attacked();
    let outcomes = frame_cases(s.kg.listen, &s.pki, wrong_lengths(), T).await;
    assert!(wrong(&outcomes).is_empty(), "{:#?}", wrong(&outcomes));
}

/// §4.2, §6.4, §6.5, §6.7, §6.9: frames whose length their type fixes, with another.
fn wrong_lengths() -> Vec<Case> {
    let cases: [(&str, u8, u8, u32, &[u8]); 6] = [
        ("PING of 7 bytes", kind::PING, 0, 0, &[0; 7]),
        ("PING of 9 bytes", kind::PING, 0, 0, &[0; 9]),
        (
            "WINDOW_UPDATE of 3 bytes",
            kind::WINDOW_UPDATE,
            0,
            0,
            &[0, 0, 1],
        ),
        ("RST_STREAM of 3 bytes", kind::RST_STREAM, 0, 1, &[0, 0, 8]),
        (
            "SETTINGS of 5 bytes",
            kind::SETTINGS,
            0,
            0,
            &[0, 3, 0, 0, 0],
        ),
        (
            "SETTINGS ACK with a payload",
            kind::SETTINGS,
            flag::ACK,
            0,
            &[0, 3, 0, 0, 0, 1],
        ),
    ];
    cases
        .into_iter()
        .map(|(case, frame, flags, stream, payload)| {
            (
                case,
                frame,
                flags,
                stream,
                payload.to_vec(),
                FRAME_SIZE_ERROR,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_a_server_must_refuse_close_the_connection_with_the_rfcs_code() {
    let s = attacked();
    let outcomes = frame_cases(s.kg.listen, &s.pki, refused_frames(), T).await;
    assert!(wrong(&outcomes).is_empty(), "{:#?}", wrong(&outcomes));
}

/// §8.4, §6.1, §6.2, §5.1, §6.10, §6.9, §6.5.2: frames a server must refuse, each with the
/// connection's error of the RFC's code.
fn refused_frames() -> Vec<Case> {
    let setting = |id: u16, value: u32| {
        let mut p = id.to_be_bytes().to_vec();
        p.extend(value.to_be_bytes());
        p
    };
    let headers = kubegate_e2e::h2raw::request_block("/version", &[]);
    let mut promise = 3u32.to_be_bytes().to_vec();
    promise.extend(&headers);
    vec![
        (
            "a client's PUSH_PROMISE",
            PUSH_PROMISE,
            flag::END_HEADERS,
            1,
            promise,
            PROTOCOL_ERROR,
        ),
        (
            "DATA on stream 0",
            kind::DATA,
            0,
            0,
            b"x".to_vec(),
            PROTOCOL_ERROR,
        ),
        (
            "HEADERS on stream 0",
            kind::HEADERS,
            flag::END_HEADERS,
            0,
            headers.clone(),
            PROTOCOL_ERROR,
        ),
        (
            "DATA on an idle stream",
            kind::DATA,
            0,
            1,
            b"x".to_vec(),
            PROTOCOL_ERROR,
        ),
        (
            "CONTINUATION without HEADERS",
            kind::CONTINUATION,
            flag::END_HEADERS,
            1,
            headers,
            PROTOCOL_ERROR,
        ),
        (
            "a zero WINDOW_UPDATE on the connection",
            kind::WINDOW_UPDATE,
            0,
            0,
            vec![0; 4],
            PROTOCOL_ERROR,
        ),
        (
            "ENABLE_PUSH 2",
            kind::SETTINGS,
            0,
            0,
            setting(0x2, 2),
            PROTOCOL_ERROR,
        ),
        (
            "INITIAL_WINDOW_SIZE 2^31",
            kind::SETTINGS,
            0,
            0,
            setting(0x4, 1 << 31),
            FLOW_CONTROL_ERROR,
        ),
        (
            "MAX_FRAME_SIZE 16383",
            kind::SETTINGS,
            0,
            0,
            setting(0x5, 16_383),
            PROTOCOL_ERROR,
        ),
    ]
}

/// The code of the RST_STREAM for `stream` or of a GOAWAY, whichever comes first within
/// `limit` of each frame.
async fn refusal(raw: &mut RawH2, stream: u32, limit: Duration) -> Option<u32> {
    loop {
        match raw.read(limit).await.ok()?? {
            f if f.kind == kind::GOAWAY => return f.error_code(),
            f if f.kind == kind::RST_STREAM && f.stream == stream => return f.error_code(),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_a_client_misuses_are_reset_with_the_rfcs_code() {
    let s = attacked();
    let outcomes = misused_streams(s.kg.listen, &s.pki, T).await;
    assert!(wrong(&outcomes).is_empty(), "{:#?}", wrong(&outcomes));
}

/// §6.1, §5.1, §8.1.1, §8.5: streams a client misuses, each reset (or the connection ended)
/// with the RFC's code within `limit`.
async fn misused_streams(at: SocketAddr, pki: &Pki, limit: Duration) -> Vec<Outcome> {
    use kubegate_e2e::h2raw::{indexed, literal};
    let mut outcomes = Vec::new();
    let mut found = |case, code: Option<u32>, due| {
        let w = (code != Some(due)).then(|| format!("{code:?}, not {due}"));
        outcomes.push((case, w));
    };

    // DATA on a stream the client ended (half-closed remote).
    let mut raw = RawH2::connect(at, pki).await.unwrap();
    raw.get(1, "/version").await.unwrap();
    raw.frame(kind::DATA, 0, 1, b"late").await.unwrap();
    let code = refusal(&mut raw, 1, limit).await;
    found("DATA after END_STREAM", code, STREAM_CLOSED);

    // DATA after the client reset the stream.
    let mut raw = RawH2::connect(at, pki).await.unwrap();
    let block = kubegate_e2e::h2raw::request_block("/version", &[]);
    raw.frame(kind::HEADERS, flag::END_HEADERS, 1, &block)
        .await
        .unwrap();
    raw.frame(kind::RST_STREAM, 0, 1, &8u32.to_be_bytes())
        .await
        .unwrap();
    raw.frame(kind::DATA, 0, 1, b"late").await.unwrap();
    let code = refusal(&mut raw, 1, limit).await;
    found("DATA after RST_STREAM", code, STREAM_CLOSED);

    // A request without :path, and a CONNECT without :authority.
    let mut no_path = Vec::new();
    indexed(2, &mut no_path); // :method GET
    indexed(7, &mut no_path); // :scheme https
    literal(":authority", b"kubernetes", &mut no_path);
    let mut connect = Vec::new();
    literal(":method", b"CONNECT", &mut connect);
    for (case, block) in [
        ("no :path", no_path),
        ("CONNECT without :authority", connect),
    ] {
        let mut raw = RawH2::connect(at, pki).await.unwrap();
        let flags = flag::END_HEADERS | flag::END_STREAM;
        raw.frame(kind::HEADERS, flags, 1, &block).await.unwrap();
        let code = refusal(&mut raw, 1, limit).await;
        found(case, code, PROTOCOL_ERROR);
    }
    outcomes
}

/// One step of a scripted case.
enum Step {
    /// A frame: type, flags, stream, payload.
    Frame(u8, u8, u32, Vec<u8>),
    /// Read until the server ends the stream (a frame on it with END_STREAM).
    AwaitEnd(u32),
}

/// What the RFC says the server does after a script.
#[derive(Clone, Copy)]
enum Due {
    /// A connection error: GOAWAY with this code.
    Connection(u32),
    /// A stream error (RST_STREAM) or a connection error (GOAWAY), with this code: the RFC
    /// lets an endpoint raise a stream error to the connection.
    Stream(u32),
    /// Either code, as a stream or a connection error (where two rules of the RFC apply).
    Either(u32, u32),
    /// Nothing: a PING sent after the script is answered.
    Ignored,
    /// The request on this stream is answered (a HEADERS on it).
    Answered(u32),
}

/// `HEADERS` for a request of `method` for `path`, with `extra` headers after the
/// pseudo-headers.
fn block(method: &str, path: &str, extra: &[(&str, &[u8])]) -> Vec<u8> {
    use kubegate_e2e::h2raw::{indexed, literal};
    let mut b = Vec::new();
    literal(":method", method.as_bytes(), &mut b);
    indexed(7, &mut b); // :scheme https
    literal(":authority", b"kubernetes", &mut b);
    literal(":path", path.as_bytes(), &mut b);
    for (n, v) in extra {
        literal(n, v, &mut b);
    }
    b
}

/// What the transport lost: a close that reset the connection while frames the server had not
/// read were still coming can discard its GOAWAY before the client reads it.
const LOST: &str = "closed without GOAWAY";

/// Runs `steps` on a connection of its own to `at`: what was wrong, if anything, with what
/// the server did within `limit` of each frame it sent. A case whose answer the transport
/// lost ([`LOST`]) is played again, three times at most: a wrong answer never is.
async fn scripted(
    at: SocketAddr,
    pki: &Pki,
    steps: &[Step],
    due: Due,
    limit: Duration,
) -> Option<String> {
    let mut wrong = None;
    for _ in 0..3 {
        wrong = played(at, pki, steps, due, limit).await;
        if wrong.as_deref() != Some(LOST) {
            break;
        }
    }
    wrong
}

/// One play of [`scripted`]'s case.
async fn played(
    at: SocketAddr,
    pki: &Pki,
    steps: &[Step],
    due: Due,
    limit: Duration,
) -> Option<String> {
    const PROBE: &[u8; 8] = b"kubegate";
    let mut raw = RawH2::connect(at, pki).await.unwrap();
    for step in steps {
        match step {
            // A write the server's close cut short: what it sent before is read below.
            Step::Frame(k, f, st, p) => {
                if raw.frame(*k, *f, *st, p).await.is_err() {
                    break;
                }
            }
            Step::AwaitEnd(stream) => loop {
                match raw.read(limit).await {
                    Ok(Some(fr)) if fr.stream == *stream && fr.flags & flag::END_STREAM != 0 => {
                        break
                    }
                    Ok(Some(_)) => {}
                    other => return Some(format!("stream {stream} never ended: {other:?}")),
                }
            },
        }
    }
    if matches!(due, Due::Ignored) && raw.frame(kind::PING, 0, 0, PROBE).await.is_err() {
        return Some("closed instead of ignoring".into());
    }
    loop {
        let frame = match raw.read(limit).await {
            Ok(Some(f)) => f,
            Ok(None) => return Some(LOST.into()),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Some(format!("no answer in {limit:?}"))
            }
            Err(e) => return Some(format!("the connection failed: {e}")),
        };
        let code = frame.error_code();
        let goaway = frame.kind == kind::GOAWAY;
        let reset = frame.kind == kind::RST_STREAM;
        match due {
            Due::Connection(c) if goaway => {
                return (code != Some(c)).then(|| format!("GOAWAY {code:?}, not {c}"))
            }
            Due::Connection(c) if reset => {
                return Some(format!("RST_STREAM {code:?}, not GOAWAY {c}"))
            }
            Due::Stream(c) if goaway || reset => {
                return (code != Some(c))
                    .then(|| format!("{} {code:?}, not {c}", kind_name(frame.kind)))
            }
            Due::Either(a, b) if goaway || reset => {
                return (code != Some(a) && code != Some(b))
                    .then(|| format!("{} {code:?}, not {a} or {b}", kind_name(frame.kind)))
            }
            Due::Ignored if frame.kind == kind::PING && frame.flags & flag::ACK != 0 => {
                return (frame.payload != PROBE).then(|| "a PING ACK not for its PING".into())
            }
            Due::Ignored | Due::Answered(_) if goaway || reset => {
                return Some(format!("{} {code:?}", kind_name(frame.kind)))
            }
            Due::Answered(stream) if frame.kind == kind::HEADERS && frame.stream == stream => {
                return None
            }
            _ => {}
        }
    }
}

fn kind_name(k: u8) -> &'static str {
    match k {
        kind::GOAWAY => "GOAWAY",
        kind::RST_STREAM => "RST_STREAM",
        _ => "frame",
    }
}

/// The rest of the suite: each case's name, script and what is due.
fn other_cases() -> Vec<(&'static str, Vec<Step>, Due)> {
    use Step::Frame as F;
    let get = block("GET", "/version", &[]);
    let post = block("POST", "/version", &[]);
    let end = flag::END_HEADERS | flag::END_STREAM;
    let open = |b: &Vec<u8>| F(kind::HEADERS, flag::END_HEADERS, 1, b.clone());
    let setting = |id: u16, value: u32| {
        let mut p = id.to_be_bytes().to_vec();
        p.extend(value.to_be_bytes());
        p
    };
    let request =
        |extra: &[(&str, &[u8])]| F(kind::HEADERS, end, 1, block("GET", "/version", extra));
    let mut big = get.clone();
    kubegate_e2e::h2raw::literal("x-filler", &[b'a'; 16_400], &mut big);
    let mut padded_data = vec![6u8];
    padded_data.extend(b"test");
    let mut padded_headers = vec![get.len() as u8 + 1];
    padded_headers.extend(&get);
    let mut self_dependent = 1u32.to_be_bytes().to_vec();
    self_dependent.push(16);
    let mut depending_headers = self_dependent.clone();
    depending_headers.extend(&get);
    let window = |n: u32| n.to_be_bytes().to_vec();
    let mut uppercase = Vec::new();
    kubegate_e2e::h2raw::literal("X-Upper", b"1", &mut uppercase);
    let pseudo_after = {
        use kubegate_e2e::h2raw::{indexed, literal};
        let mut b = Vec::new();
        indexed(2, &mut b);
        indexed(7, &mut b);
        literal(":authority", b"kubernetes", &mut b);
        literal("x-first", b"1", &mut b);
        literal(":path", b"/version", &mut b);
        b
    };
    let without = |skip: &str| {
        use kubegate_e2e::h2raw::literal;
        let mut b = Vec::new();
        for (n, v) in [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "kubernetes"),
            (":path", "/version"),
        ] {
            if n != skip {
                literal(n, v.as_bytes(), &mut b);
            }
        }
        b
    };
    let mut cases = vec![
        // §4.1, §5.5: what a server does not know it ignores.
        (
            "a frame of an unknown type",
            vec![F(UNKNOWN, 0, 0, vec![0; 8])],
            Due::Ignored,
        ),
        (
            "a PING with unknown flags",
            // Its answer carries the probe's payload too: either ACK is for its PING.
            vec![F(kind::PING, 0x16, 0, b"kubegate".to_vec())],
            Due::Ignored,
        ),
        (
            "an unknown setting",
            vec![F(kind::SETTINGS, 0, 0, setting(0xff, 1))],
            Due::Ignored,
        ),
        (
            "the stream identifier's reserved bit",
            vec![F(kind::HEADERS, end, 0x8000_0001, get.clone())],
            Due::Answered(1),
        ),
        // §4.2: over SETTINGS_MAX_FRAME_SIZE.
        (
            "DATA over the maximum frame size",
            vec![open(&post), F(kind::DATA, 0, 1, vec![0; 16_385])],
            Due::Stream(FRAME_SIZE_ERROR),
        ),
        (
            "HEADERS over the maximum frame size",
            vec![F(kind::HEADERS, end, 1, big)],
            Due::Connection(FRAME_SIZE_ERROR),
        ),
        // §4.3: header blocks.
        (
            "an invalid header block",
            vec![F(kind::HEADERS, end, 1, vec![0xff, 0xff, 0xff, 0x7f])],
            Due::Connection(COMPRESSION_ERROR),
        ),
        // RFC 7541 (HPACK) §6.1, §4.2, §6.3: index 0; a table size update over the limit the
        // server set (4,096 by default), or after the block's first field.
        (
            "an HPACK index of 0",
            vec![F(kind::HEADERS, end, 1, [vec![0x80], get.clone()].concat())],
            Due::Connection(COMPRESSION_ERROR),
        ),
        (
            "an HPACK table size update over the limit",
            vec![F(
                kind::HEADERS,
                end,
                1,
                [vec![0x3f, 0xe2, 0x1f], get.clone()].concat(),
            )],
            Due::Connection(COMPRESSION_ERROR),
        ),
        (
            "an HPACK table size update after a field",
            vec![F(kind::HEADERS, end, 1, [get.clone(), vec![0x20]].concat())],
            Due::Connection(COMPRESSION_ERROR),
        ),
        (
            "PRIORITY inside a header block",
            vec![
                F(kind::HEADERS, flag::END_STREAM, 1, get.clone()),
                F(PRIORITY, 0, 1, vec![0, 0, 0, 0, 16]),
            ],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "HEADERS of another stream inside a header block",
            vec![
                F(kind::HEADERS, flag::END_STREAM, 1, get.clone()),
                F(kind::HEADERS, end, 3, get.clone()),
            ],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "an unknown frame inside a header block",
            vec![
                F(kind::HEADERS, flag::END_STREAM, 1, get.clone()),
                F(UNKNOWN, 0, 1, vec![0; 8]),
            ],
            Due::Connection(PROTOCOL_ERROR),
        ),
        // §5.1: stream states.
        (
            "RST_STREAM on an idle stream",
            vec![F(kind::RST_STREAM, 0, 1, window(8))],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "WINDOW_UPDATE on an idle stream",
            vec![F(kind::WINDOW_UPDATE, 0, 1, window(100))],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "HEADERS on a half-closed stream",
            vec![
                F(kind::HEADERS, end, 1, get.clone()),
                F(kind::HEADERS, end, 1, get.clone()),
            ],
            Due::Stream(STREAM_CLOSED),
        ),
        (
            "CONTINUATION on a half-closed stream",
            vec![
                F(kind::HEADERS, end, 1, get.clone()),
                F(kind::CONTINUATION, flag::END_HEADERS, 1, get.clone()),
            ],
            Due::Either(STREAM_CLOSED, PROTOCOL_ERROR),
        ),
        (
            "HEADERS after the client reset the stream",
            vec![
                open(&post),
                F(kind::RST_STREAM, 0, 1, window(8)),
                F(kind::HEADERS, end, 1, get.clone()),
            ],
            Due::Stream(STREAM_CLOSED),
        ),
        (
            "DATA on a closed stream",
            vec![
                F(kind::HEADERS, end, 1, get.clone()),
                Step::AwaitEnd(1),
                F(kind::DATA, 0, 1, b"late".to_vec()),
            ],
            Due::Stream(STREAM_CLOSED),
        ),
        (
            "HEADERS on a closed stream",
            vec![
                F(kind::HEADERS, end, 1, get.clone()),
                Step::AwaitEnd(1),
                F(kind::HEADERS, end, 1, get.clone()),
            ],
            Due::Stream(STREAM_CLOSED),
        ),
        // §5.1.1: stream identifiers.
        (
            "an even stream identifier",
            vec![F(kind::HEADERS, end, 2, get.clone())],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "a stream identifier below one used",
            vec![
                F(kind::HEADERS, end, 5, get.clone()),
                F(kind::HEADERS, end, 3, get.clone()),
            ],
            Due::Connection(PROTOCOL_ERROR),
        ),
        // §5.3.1: a stream cannot depend on itself.
        (
            "HEADERS depending on its own stream",
            vec![F(kind::HEADERS, end | PRIORITY_FLAG, 1, depending_headers)],
            Due::Stream(PROTOCOL_ERROR),
        ),
        (
            "PRIORITY depending on its own stream",
            vec![F(PRIORITY, 0, 1, self_dependent)],
            Due::Stream(PROTOCOL_ERROR),
        ),
        // §6.1–§6.10: each frame's own rules.
        (
            "DATA padded beyond its length",
            vec![open(&post), F(kind::DATA, PADDED, 1, padded_data)],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "HEADERS padded beyond its length",
            vec![F(kind::HEADERS, end | PADDED, 1, padded_headers)],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "PRIORITY on stream 0",
            vec![F(PRIORITY, 0, 0, vec![0, 0, 0, 1, 16])],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "PRIORITY of 4 bytes",
            vec![F(PRIORITY, 0, 1, vec![0, 0, 0, 3])],
            Due::Stream(FRAME_SIZE_ERROR),
        ),
        // §7: an error code it does not know is not an error.
        (
            "RST_STREAM with an unknown error code",
            vec![open(&post), F(kind::RST_STREAM, 0, 1, window(0xff))],
            Due::Ignored,
        ),
        (
            "RST_STREAM on stream 0",
            vec![F(kind::RST_STREAM, 0, 0, window(8))],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "SETTINGS on a stream",
            vec![F(kind::SETTINGS, 0, 1, setting(0x3, 100))],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "SETTINGS of 3 bytes",
            vec![F(kind::SETTINGS, 0, 0, vec![0, 3, 0])],
            Due::Connection(FRAME_SIZE_ERROR),
        ),
        (
            "MAX_FRAME_SIZE 2^24",
            vec![F(kind::SETTINGS, 0, 0, setting(0x5, 1 << 24))],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "a PING ACK is not answered",
            vec![F(kind::PING, flag::ACK, 0, vec![7; 8])],
            Due::Ignored,
        ),
        (
            "PING on a stream",
            vec![F(kind::PING, 0, 1, vec![0; 8])],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "GOAWAY on a stream",
            vec![F(kind::GOAWAY, 0, 1, vec![0; 8])],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "a zero WINDOW_UPDATE on a stream",
            vec![open(&post), F(kind::WINDOW_UPDATE, 0, 1, window(0))],
            Due::Stream(PROTOCOL_ERROR),
        ),
        (
            "the connection's window beyond 2^31-1",
            // 65,535 to begin with: one increment of 2^31-1 overflows it, and no frame follows
            // the error (one the server has not read can reset the connection over its GOAWAY).
            vec![F(kind::WINDOW_UPDATE, 0, 0, window(0x7fff_ffff))],
            Due::Connection(FLOW_CONTROL_ERROR),
        ),
        (
            "a stream's window beyond 2^31-1",
            vec![
                open(&post),
                F(kind::WINDOW_UPDATE, 0, 1, window(0x7fff_ffff)),
                F(kind::WINDOW_UPDATE, 0, 1, window(0x7fff_ffff)),
            ],
            Due::Stream(FLOW_CONTROL_ERROR),
        ),
        (
            "CONTINUATION after END_HEADERS",
            vec![
                open(&post),
                F(kind::CONTINUATION, flag::END_HEADERS, 1, get.clone()),
            ],
            Due::Connection(PROTOCOL_ERROR),
        ),
        (
            "CONTINUATION of another stream",
            vec![
                F(kind::HEADERS, flag::END_STREAM, 1, get.clone()),
                F(kind::CONTINUATION, flag::END_HEADERS, 3, get.clone()),
            ],
            Due::Connection(PROTOCOL_ERROR),
        ),
    ];
    // §8.1: malformed requests, each reset with PROTOCOL_ERROR.
    let malformed: Vec<(&str, Vec<Step>)> = vec![
        (
            "a second HEADERS that does not end the stream",
            vec![
                open(&post),
                F(kind::DATA, 0, 1, b"x".to_vec()),
                F(kind::HEADERS, flag::END_HEADERS, 1, block("GET", "/", &[])),
            ],
        ),
        (
            "an uppercase header name",
            vec![F(kind::HEADERS, end, 1, [get.clone(), uppercase].concat())],
        ),
        ("an empty header name", vec![request(&[("", b"1")])]),
        (
            "an unknown pseudo-header",
            vec![request(&[(":test", b"1")])],
        ),
        (
            "a response's pseudo-header in a request",
            vec![request(&[(":status", b"200")])],
        ),
        (
            "a pseudo-header after a regular one",
            vec![F(kind::HEADERS, end, 1, pseudo_after)],
        ),
        (
            "a pseudo-header twice",
            vec![request(&[(":path", b"/version")])],
        ),
        (
            "a connection-specific header",
            vec![request(&[("connection", b"keep-alive")])],
        ),
        ("TE other than trailers", vec![request(&[("te", b"gzip")])]),
        (
            "an empty :path",
            vec![F(kind::HEADERS, end, 1, block("GET", "", &[]))],
        ),
        (
            "no :method",
            vec![F(kind::HEADERS, end, 1, without(":method"))],
        ),
        (
            "no :scheme",
            vec![F(kind::HEADERS, end, 1, without(":scheme"))],
        ),
        (
            "a body longer than its content-length",
            vec![
                F(
                    kind::HEADERS,
                    flag::END_HEADERS,
                    1,
                    block("POST", "/version", &[("content-length", b"1")]),
                ),
                F(kind::DATA, flag::END_STREAM, 1, b"test".to_vec()),
            ],
        ),
    ];
    cases.extend(
        malformed
            .into_iter()
            .map(|(name, steps)| (name, steps, Due::Stream(PROTOCOL_ERROR))),
    );
    cases
}

/// The rest of the suite at `at`, each answered within `limit`.
async fn others(at: SocketAddr, pki: &Pki, limit: Duration) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for (case, steps, due) in other_cases() {
        outcomes.push((case, scripted(at, pki, &steps, due, limit).await));
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suites_other_cases_are_answered_as_the_rfc_says() {
    let s = attacked();
    let outcomes = others(s.kg.listen, &s.pki, T).await;
    assert!(wrong(&outcomes).is_empty(), "{:#?}", wrong(&outcomes));
}

/// Every case at `at`, each answered within `limit`.
async fn every_case(at: SocketAddr, pki: &Pki, limit: Duration) -> Vec<Outcome> {
    let mut outcomes = frame_cases(at, pki, wrong_lengths(), limit).await;
    outcomes.extend(frame_cases(at, pki, refused_frames(), limit).await);
    outcomes.extend(misused_streams(at, pki, limit).await);
    outcomes.extend(others(at, pki, limit).await);
    outcomes
}

/// HAProxy terminating TLS with kubegate's serving names on a free port, HTTP/2 on both sides
/// (`alpn h2`), in front of `replica`.
fn haproxy_h2(dir: &std::path::Path, pki: &Pki, replica: SocketAddr) -> (Proc, SocketAddr) {
    let listen = SocketAddr::from(([127, 0, 0, 1], kubegate_testbed::ports::free_port()));
    let (crt, key) = pki.serving("haproxy");
    let pem = dir.join("haproxy.pem");
    let both = std::fs::read_to_string(&crt).unwrap() + &std::fs::read_to_string(&key).unwrap();
    std::fs::write(&pem, both).unwrap();
    let cfg = format!(
        "global\n    maxconn 100\n    nbthread 1\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nfrontend apiserver\n    bind {listen} ssl crt {} alpn h2,http/1.1\n    default_backend replica\nbackend replica\n    server replica-1 {replica} ssl verify none alpn h2\n",
        pem.display()
    );
    (haproxy(dir, "haproxy-h2", &cfg, listen), listen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_haproxy_passes_kubegate_passes_side_by_side() {
    let s = attacked();
    let (_haproxy, front) = haproxy_h2(s.dir.path(), &s.pki, s.sims[0].addr);
    let ours = every_case(s.kg.listen, &s.pki, T).await;
    let peer = every_case(front, &s.pki, PEER_T).await;
    let mut table = String::from("| case | kubegate | HAProxy |\n|---|---|---|\n");
    let mut behind = Vec::new();
    let shown = |w: &Option<String>| w.as_deref().unwrap_or("passes").to_string();
    for ((case, k), (peer_case, h)) in ours.iter().zip(&peer) {
        assert_eq!(case, peer_case);
        table.push_str(&format!("| {case} | {} | {} |\n", shown(k), shown(h)));
        if k.is_some() && h.is_none() {
            behind.push(*case);
        }
    }
    eprintln!("{table}");
    let passed = |o: &[Outcome]| o.iter().filter(|(_, w)| w.is_none()).count();
    eprintln!(
        "kubegate passes {} of {}, HAProxy {}",
        passed(&ours),
        ours.len(),
        passed(&peer)
    );
    assert!(
        behind.is_empty(),
        "HAProxy passes, kubegate does not: {behind:?}\n{table}"
    );
}
