//! HTTP/2 as RFC 9113 says it, frame by frame, against the terminate listener: what a
//! conformance suite of the h2spec family asks (h2spec itself cannot be installed on this
//! machine; these cases are ported by hand on `h2raw`).
//!
//! 1. `frames_of_the_wrong_length_are_frame_size_errors`: a PING, WINDOW_UPDATE, RST_STREAM or
//!    SETTINGS frame whose length its type fixes, with another, closes the connection with
//!    GOAWAY `FRAME_SIZE_ERROR` (§4.2, §6.4, §6.5, §6.7, §6.9), where h2 sent
//!    `PROTOCOL_ERROR`.

use kubegate_e2e::attack::attacked;
use kubegate_e2e::h2raw::{flag, kind, Ending, RawH2};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// RFC 9113 §7.
const FRAME_SIZE_ERROR: u32 = 0x6;

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
