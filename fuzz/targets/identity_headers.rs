//! Identity headers: whatever a client sends, no front-proxy header survives stripping, with
//! the apiserver's default names and with lists of several.
use http::header::{HeaderMap, HeaderName, HeaderValue};
use kubegate_wire::identity::IdentityHeaders;

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    // The first byte picks the configuration: the defaults, or two names of each kind.
    let (lists, data) = match data.split_first() {
        Some((first, rest)) => (first & 1 == 1, rest),
        None => (false, data),
    };
    let fp = serde_yaml_ng::from_str(if lists {
        "cert_file: a\nkey_file: b\nusername_headers: [X-Auth-User, X-Alt-User]\ngroup_headers: [X-Auth-Group, X-Alt-Group]\nextra_prefixes: [X-Auth-Extra-, X-Alt-Extra-]\nuid_headers: [X-Auth-Uid, X-Alt-Uid]\n"
    } else {
        "cert_file: a\nkey_file: b\n"
    })
    .unwrap();
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
        assert!(!n.starts_with("x-remote-"), "{n} survived");
        if lists {
            assert!(
                !matches!(
                    n,
                    "x-auth-user"
                        | "x-alt-user"
                        | "x-auth-group"
                        | "x-alt-group"
                        | "x-auth-uid"
                        | "x-alt-uid"
                ) && !n.starts_with("x-auth-extra-")
                    && !n.starts_with("x-alt-extra-"),
                "{n} survived"
            );
        }
    }
}
