//! A request's verb and long-running class from any method and request target, and the same
//! reading whatever unreserved characters the target percent-encodes: the apiserver decodes
//! before it classifies, so `secret%73` is `secrets` to kubegate too.
use http::{Method, Uri};
use kubegate_wire::classify::{ReadTarget, Verb};

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    let split = data.iter().position(|b| *b == b' ').unwrap_or(0);
    let (method, target) = data.split_at(split);
    let Ok(method) = Method::from_bytes(method) else {
        return;
    };
    let target = target.get(1..).unwrap_or_default();
    let Ok(uri) = Uri::try_from(target) else {
        return;
    };
    let Ok(read) = ReadTarget::of(&uri) else {
        return;
    };
    let info = read.info(&method);
    assert!(info.class.verb != Verb::Watch || info.class.long_running.is_some());
    // Every unreserved character written as %XX: the same request to the apiserver.
    // (An escape already there is copied as it is.)
    let mut encoded = Vec::with_capacity(target.len() * 3);
    let mut i = 0;
    while i < target.len() {
        let b = target[i];
        if b == b'%' {
            let end = (i + 3).min(target.len());
            encoded.extend_from_slice(&target[i..end]);
            i = end;
            continue;
        }
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            encoded.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            encoded.push(b);
        }
        i += 1;
    }
    let Ok(uri2) = Uri::try_from(encoded) else {
        return;
    };
    let read2 = ReadTarget::of(&uri2).expect("an encoded readable target stays readable");
    assert_eq!(info, read2.info(&method));
}
