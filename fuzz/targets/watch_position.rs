//! A watch's position across events: any query and any JSON events, observed in order, then
//! asked where to resume and how to ask for it.
use kubegate_wire::framing::{Decoder, Framing};
use kubegate_wire::position::{resumed_query, Asked, Progress};

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (query, events) = text.split_once('\n').unwrap_or((&text, ""));
    let asked = Asked::from_query(Some(query));
    let mut progress = Progress::new(&asked);
    let mut d = Decoder::new(Framing::JsonLines);
    d.push(events.as_bytes());
    d.push(b"\n");
    while let Ok(Some(e)) = d.next_event() {
        progress.observe(&asked, &e);
    }
    if let Ok(from) = progress.resume_from(&asked) {
        progress.resumed(&from);
        let _ = resumed_query(Some(query), from.as_deref(), asked.timeout);
    }
}
