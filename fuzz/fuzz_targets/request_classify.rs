//! A request's verb and long-running class from any method and request target.
#![no_main]
use http::{Method, Uri};
use kubegate_wire::classify::{classify, Verb};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|b| *b == b' ').unwrap_or(0);
    let (method, target) = data.split_at(split);
    let Ok(method) = Method::from_bytes(method) else {
        return;
    };
    let Ok(uri) = Uri::try_from(target.get(1..).unwrap_or_default()) else {
        return;
    };
    let class = classify(&method, &uri);
    assert!(class.verb != Verb::Watch || class.long_running.is_some());
});
