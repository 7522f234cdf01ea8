//! PROXY protocol headers: whatever a connection's first bytes are, reading them never panics,
//! asks for at most `MAX_LENGTH` bytes, and reading them as a caller does (as much as each
//! answer asks for) comes to the answer the whole input gets; a header a balancer writes is
//! read back as written.
use kubegate_wire::proxy_header::{read, v1, v2, Header, Progress, MAX_LENGTH};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Reads `data` as a caller does: `Needs(n)` → read until there are `n` bytes.
fn as_a_caller(data: &[u8]) -> Option<Header> {
    let mut have = 1.min(data.len());
    loop {
        match read(&data[..have]) {
            Err(_) => return None,
            Ok(Progress::Done(h)) => return Some(h),
            Ok(Progress::Needs(n)) => {
                assert!(n > have, "asks for {n} having {have}: {data:?}");
                assert!(n <= MAX_LENGTH, "asks for {n}: {data:?}");
                if n > data.len() {
                    return None;
                }
                have = n;
            }
        }
    }
}

/// Addresses made of the input's bytes, IPv4 or IPv6 by its first byte.
fn addresses(data: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    let port = |at: usize| u16::from_be_bytes([data[at], data[at + 1]]);
    if data.first()? % 2 == 0 {
        let d = data.get(..13)?;
        let ip = |at: usize| IpAddr::V4(Ipv4Addr::new(d[at], d[at + 1], d[at + 2], d[at + 3]));
        Some((
            SocketAddr::new(ip(1), port(9)),
            SocketAddr::new(ip(5), port(11)),
        ))
    } else {
        let d = data.get(..37)?;
        let ip = |at: usize| {
            let mut o = [0; 16];
            o.copy_from_slice(&d[at..at + 16]);
            IpAddr::V6(Ipv6Addr::from(o))
        };
        Some((
            SocketAddr::new(ip(1), port(33)),
            SocketAddr::new(ip(17), port(35)),
        ))
    }
}

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    let whole = read(data);
    match whole {
        Ok(Progress::Needs(n)) => assert!(n > data.len() && n <= MAX_LENGTH, "{data:?}"),
        Ok(Progress::Done(h)) => {
            assert!(h.length <= data.len() && h.length <= MAX_LENGTH, "{data:?}");
            assert_eq!(as_a_caller(data), Some(h), "{data:?}");
        }
        Err(_) => {}
    }
    if let Some((source, destination)) = addresses(data) {
        // The rest of the input as one TLV's value.
        let value = &data[data.len().min(37)..];
        let value = &value[..value.len().min(1024)];
        let mut tlv = vec![0xe0];
        tlv.extend((value.len() as u16).to_be_bytes());
        tlv.extend(value);
        let written = v2(source, destination, &tlv).expect("a TLV of at most 1 KiB fits");
        let h = as_a_caller(&written).expect("a written v2 header reads back");
        assert_eq!(h.length, written.len());
        let named = h.addresses.expect("names the client");
        assert_eq!((named.source, named.destination), (source, destination));
        let line = v1(source, destination);
        let h = as_a_caller(line.as_bytes()).expect("a written v1 line reads back");
        assert_eq!(h.length, line.len());
        let named = h.addresses.expect("names the client");
        assert_eq!((named.source, named.destination), (source, destination));
    }
}
