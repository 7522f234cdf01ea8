//! Watch-event framing of a backend's response: the first byte picks JSON lines or protobuf and
//! the read sizes; the rest is the stream. Never a panic, and what is held stays bounded.
use kubegate_wire::framing::{Decoder, Framing, MAX_EVENT};

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let framing = if first & 1 == 0 {
        Framing::JsonLines
    } else {
        Framing::Protobuf
    };
    let read = usize::from(first >> 1).max(1);
    let mut d = Decoder::new(framing);
    for chunk in stream.chunks(read) {
        d.push(chunk);
        loop {
            match d.next_event() {
                Ok(Some(e)) => assert!(!e.bytes.is_empty()),
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(d.pending() <= MAX_EVENT + read);
    }
}
