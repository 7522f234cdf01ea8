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

use kubegate_e2e::attack::attacked;
use kubegate_e2e::h2raw::{flag, kind, Ending, RawH2};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// RFC 9113 §7.
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;

/// PUSH_PROMISE (RFC 9113 §6.6).
const PUSH_PROMISE: u8 = 0x5;

/// One case: what it is, the frame (type, flags, stream, payload), the error code due.
type Case = (&'static str, u8, u8, u32, Vec<u8>, u32);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_of_the_wrong_length_are_frame_size_errors() {
    let s = attacked();
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
    for (case, frame, flags, stream, payload) in cases {
        let mut raw = RawH2::connect(s.kg.listen, &s.pki).await.unwrap();
        raw.frame(frame, flags, stream, payload).await.unwrap();
        assert_eq!(
            raw.ending(T).await,
            Ending::GoAway(FRAME_SIZE_ERROR),
            "{case}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_a_server_must_refuse_close_the_connection_with_the_rfcs_code() {
    let s = attacked();
    let setting = |id: u16, value: u32| {
        let mut p = id.to_be_bytes().to_vec();
        p.extend(value.to_be_bytes());
        p
    };
    let headers = kubegate_e2e::h2raw::request_block("/version", &[]);
    let mut promise = 3u32.to_be_bytes().to_vec();
    promise.extend(&headers);
    let cases: Vec<Case> = vec![
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
    ];
    let mut wrong = Vec::new();
    for (case, frame, flags, stream, payload, code) in cases {
        let mut raw = RawH2::connect(s.kg.listen, &s.pki).await.unwrap();
        raw.frame(frame, flags, stream, &payload).await.unwrap();
        let ending = raw.ending(T).await;
        if ending != Ending::GoAway(code) {
            wrong.push(format!("{case}: {ending:?}, not GoAway({code})"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The code of the RST_STREAM for `stream` or of a GOAWAY, whichever comes first.
async fn refusal(raw: &mut RawH2, stream: u32) -> Option<u32> {
    loop {
        match raw.read(T).await.ok()?? {
            f if f.kind == kind::GOAWAY => return f.error_code(),
            f if f.kind == kind::RST_STREAM && f.stream == stream => return f.error_code(),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_a_client_misuses_are_reset_with_the_rfcs_code() {
    use kubegate_e2e::h2raw::{indexed, literal};
    let s = attacked();
    let mut wrong = Vec::new();

    // DATA on a stream the client ended (half-closed remote).
    let mut raw = RawH2::connect(s.kg.listen, &s.pki).await.unwrap();
    raw.get(1, "/version").await.unwrap();
    raw.frame(kind::DATA, 0, 1, b"late").await.unwrap();
    let code = refusal(&mut raw, 1).await;
    if code != Some(STREAM_CLOSED) {
        wrong.push(format!("DATA after END_STREAM: {code:?}"));
    }

    // DATA after the client reset the stream.
    let mut raw = RawH2::connect(s.kg.listen, &s.pki).await.unwrap();
    let block = kubegate_e2e::h2raw::request_block("/version", &[]);
    raw.frame(kind::HEADERS, flag::END_HEADERS, 1, &block)
        .await
        .unwrap();
    raw.frame(kind::RST_STREAM, 0, 1, &8u32.to_be_bytes())
        .await
        .unwrap();
    raw.frame(kind::DATA, 0, 1, b"late").await.unwrap();
    let code = refusal(&mut raw, 1).await;
    if code != Some(STREAM_CLOSED) {
        wrong.push(format!("DATA after RST_STREAM: {code:?}"));
    }

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
        let mut raw = RawH2::connect(s.kg.listen, &s.pki).await.unwrap();
        let flags = flag::END_HEADERS | flag::END_STREAM;
        raw.frame(kind::HEADERS, flags, 1, &block).await.unwrap();
        let code = refusal(&mut raw, 1).await;
        if code != Some(PROTOCOL_ERROR) {
            wrong.push(format!("{case}: {code:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
