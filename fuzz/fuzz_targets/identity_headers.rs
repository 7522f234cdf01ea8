//! Identity headers: whatever a client sends, no front-proxy header survives stripping.
#![no_main]
use http::header::{HeaderMap, HeaderName, HeaderValue};
use kubegate_wire::identity::IdentityHeaders;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fp = serde_yaml_ng::from_str("cert_file: a\nkey_file: b\n").unwrap();
    let identity = IdentityHeaders::new(&fp).unwrap();
    let mut headers = HeaderMap::new();
    // Lines of `name:value`, as a client could send them.
    for line in data.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(&line[colon + 1..]),
        ) else {
            continue;
        };
        headers.append(n, v);
    }
    identity.strip(&mut headers);
    for n in headers.keys() {
        let n = n.as_str();
        assert!(
            n != "x-remote-user"
                && n != "x-remote-group"
                && n != "x-remote-uid"
                && !n.starts_with("x-remote-extra-"),
            "{n} survived"
        );
    }
});
