//! The PROXY protocol header an outer balancer (AWS NLB, GCP, HAProxy's `send-proxy-v2`)
//! writes at the start of each connection to name the client it accepted: version 1 (one text
//! line) and version 2 (binary), as HAProxy's specification (`doc/proxy-protocol.txt`) writes
//! them.
//!
//! [`read`] is given the bytes read so far and says how many it needs before it can decide,
//! so a caller reads exactly the header and nothing of what follows (the TLS ClientHello stays
//! in the socket for the data plane). A header is at most [`MAX_LENGTH`] bytes: a longer one is
//! refused, not buffered.
//!
//! What is read:
//! - v1: `PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n`, at most 107 bytes; `PROXY UNKNOWN ...\r\n`
//!   names nobody (the connection's own address stands).
//! - v2: the 12-byte signature, version 2, command `LOCAL` (the balancer's own connection,
//!   such as a health check: nobody named, its address block discarded) or `PROXY`; family
//!   `INET` or `INET6` over `STREAM` names the client; `UNSPEC` and `UNIX` name nobody, as the
//!   specification allows; a datagram protocol or an unknown family is refused (kubegate serves
//!   TCP). The TLVs after the addresses must each fit in the
//!   header; their contents are not used (nor is a CRC32C one checked).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest header accepted, TLVs included. AWS, GCP and Azure add a TLV of a few dozen
/// bytes; HAProxy's SSL TLVs a few hundred.
pub const MAX_LENGTH: usize = 4096;

/// The longest version 1 header, `\r\n` included (the specification's bound).
pub const V1_MAX_LENGTH: usize = 107;

/// What starts every version 2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The fixed part of a version 2 header: signature, version and command, family, length.
const V2_FIXED: usize = 16;

/// Whether a connection's first byte may begin a PROXY header (`P` of `PROXY`, or the `\r`
/// of the v2 signature). A TLS connection starts with 0x16, a handshake record, so one byte
/// tells them apart.
pub fn may_start(first: u8) -> bool {
    first == b'P' || first == V2_SIGNATURE[0]
}

/// Whether `bytes` begin with a whole PROXY signature (`PROXY ` or version 2's twelve bytes):
/// what tells a header from a connection's other first bytes without waiting for more.
pub fn is_signature(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PROXY ") || bytes.starts_with(&V2_SIGNATURE)
}

/// The client and the address it reached, as the header names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The client.
    pub source: SocketAddr,
    /// The address the client connected to (the balancer's).
    pub destination: SocketAddr,
}

/// A whole header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Its length in bytes: what to take off the connection before its payload.
    pub length: usize,
    /// Who it names; `None` for v1 `UNKNOWN`, v2 `LOCAL`, `UNSPEC` or `UNIX`: the
    /// connection's own peer stands.
    pub addresses: Option<Addresses>,
}

/// How far reading got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The bytes so far are a header's beginning: read until there are this many in all
    /// (more than given, at most [`MAX_LENGTH`]), then ask again.
    Needs(usize),
    /// A whole header, from the first byte.
    Done(Header),
}

/// Why bytes are not a PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// They start as neither version's header.
    NotAHeader,
    /// A version 1 line without its `\r\n` within 107 bytes, or a version 2 header longer
    /// than [`MAX_LENGTH`].
    TooLong,
    /// A version 1 line that is not `PROXY` and five fields (or `UNKNOWN`).
    BadLine,
    /// A version 2 header of another version, or with a command other than `LOCAL` and
    /// `PROXY`.
    BadVersion,
    /// A version 2 `PROXY` header of a datagram protocol or an unknown family or protocol.
    BadFamily,
    /// A version 2 header shorter than its family's addresses, or whose TLVs overrun it.
    BadLength,
}

impl Malformed {
    /// As a log line says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::NotAHeader => "not a PROXY header",
            Malformed::TooLong => "longer than allowed",
            Malformed::BadLine => "a version 1 line of the wrong form",
            Malformed::BadVersion => "an unknown version or command",
            Malformed::BadFamily => "an unknown or datagram address family",
            Malformed::BadLength => "addresses or TLVs that do not fit its length",
        }
    }
}

/// Reads the header at the start of `bytes` (the connection's first bytes, as many as read).
pub fn read(bytes: &[u8]) -> Result<Progress, Malformed> {
    match bytes.first() {
        None => Ok(Progress::Needs(1)),
        Some(b'P') => read_v1(bytes),
        Some(_) => read_v2(bytes),
    }
}

fn read_v1(bytes: &[u8]) -> Result<Progress, Malformed> {
    const PREFIX: &[u8] = b"PROXY ";
    let known = bytes.len().min(PREFIX.len());
    if bytes[..known] != PREFIX[..known] {
        return Err(Malformed::NotAHeader);
    }
    let window = &bytes[..bytes.len().min(V1_MAX_LENGTH)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        // A `\r` may be the last byte read; a lone `\r` anywhere else is no line's end, but the
        // line's form is judged once it is whole.
        return if bytes.len() >= V1_MAX_LENGTH {
            Err(Malformed::TooLong)
        } else {
            Ok(Progress::Needs(bytes.len() + 1))
        };
    };
    let line = std::str::from_utf8(&bytes[PREFIX.len()..end]).map_err(|_| Malformed::BadLine)?;
    let length = end + 2;
    if let Some(rest) = line.strip_prefix("UNKNOWN") {
        // The rest of an UNKNOWN line is ignored, whatever it says.
        if rest.is_empty() || rest.starts_with(' ') {
            return Ok(Progress::Done(Header {
                length,
                addresses: None,
            }));
        }
        return Err(Malformed::BadLine);
    }
    let fields: Vec<&str> = line.split(' ').collect();
    let [family, source, destination, source_port, destination_port] = fields[..] else {
        return Err(Malformed::BadLine);
    };
    let (source, destination): (IpAddr, IpAddr) = match family {
        "TCP4" => (
            IpAddr::V4(source.parse().map_err(|_| Malformed::BadLine)?),
            IpAddr::V4(destination.parse().map_err(|_| Malformed::BadLine)?),
        ),
        "TCP6" => (
            IpAddr::V6(source.parse().map_err(|_| Malformed::BadLine)?),
            IpAddr::V6(destination.parse().map_err(|_| Malformed::BadLine)?),
        ),
        _ => return Err(Malformed::BadLine),
    };
    Ok(Progress::Done(Header {
        length,
        addresses: Some(Addresses {
            source: SocketAddr::new(source, port(source_port)?),
            destination: SocketAddr::new(destination, port(destination_port)?),
        }),
    }))
}

/// A v1 port: 0 to 65535 in decimal digits, no sign, no leading zero.
fn port(field: &str) -> Result<u16, Malformed> {
    let digits = field.bytes().all(|b| b.is_ascii_digit());
    if !digits || field.is_empty() || (field.len() > 1 && field.starts_with('0')) {
        return Err(Malformed::BadLine);
    }
    field.parse().map_err(|_| Malformed::BadLine)
}

fn read_v2(bytes: &[u8]) -> Result<Progress, Malformed> {
    let known = bytes.len().min(V2_SIGNATURE.len());
    if bytes[..known] != V2_SIGNATURE[..known] {
        return Err(Malformed::NotAHeader);
    }
    if bytes.len() < V2_FIXED {
        return Ok(Progress::Needs(V2_FIXED));
    }
    let (version, command) = (bytes[12] >> 4, bytes[12] & 0x0f);
    if version != 2 || command > 1 {
        return Err(Malformed::BadVersion);
    }
    let length = V2_FIXED + usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
    if length > MAX_LENGTH {
        return Err(Malformed::TooLong);
    }
    if bytes.len() < length {
        return Ok(Progress::Needs(length));
    }
    if command == 0 {
        // LOCAL: the balancer's own connection. The specification has the receiver discard
        // the address block, family included.
        return Ok(Progress::Done(Header {
            length,
            addresses: None,
        }));
    }
    let body = &bytes[V2_FIXED..length];
    let (family, protocol) = (bytes[13] >> 4, bytes[13] & 0x0f);
    // Each family's addresses: two IPs, two ports; UNIX's two 108-byte paths.
    let address_length = match (family, protocol) {
        (0, 0) => 0,
        (1, 1) => 12,
        (2, 1) => 36,
        (3, 1) => 216,
        _ => return Err(Malformed::BadFamily),
    };
    if body.len() < address_length {
        return Err(Malformed::BadLength);
    }
    tlvs_fit(&body[address_length..])?;
    let addresses = match family {
        1 => {
            let ip = |at: usize| IpAddr::V4(Ipv4Addr::from(take::<4>(body, at)));
            Some(addresses(ip(0), ip(4), body, 8))
        }
        2 => {
            let ip = |at: usize| IpAddr::V6(Ipv6Addr::from(take::<16>(body, at)));
            Some(addresses(ip(0), ip(16), body, 32))
        }
        _ => None,
    };
    Ok(Progress::Done(Header { length, addresses }))
}

/// The source and destination, their ports at `ports` in `body`.
fn addresses(source: IpAddr, destination: IpAddr, body: &[u8], ports: usize) -> Addresses {
    let port = |at: usize| u16::from_be_bytes(take::<2>(body, at));
    Addresses {
        source: SocketAddr::new(source, port(ports)),
        destination: SocketAddr::new(destination, port(ports + 2)),
    }
}

/// `N` bytes of `body` at `at` (the caller checked the length).
fn take<const N: usize>(body: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&body[at..at + N]);
    out
}

/// Whether `tlvs` is whole TLVs (type, 16-bit length, value), none running past the end.
fn tlvs_fit(mut tlvs: &[u8]) -> Result<(), Malformed> {
    while !tlvs.is_empty() {
        if tlvs.len() < 3 {
            return Err(Malformed::BadLength);
        }
        let value = usize::from(u16::from_be_bytes([tlvs[1], tlvs[2]]));
        tlvs = tlvs.get(3 + value..).ok_or(Malformed::BadLength)?;
    }
    Ok(())
}

/// A version 2 `PROXY` header naming `source` → `destination` (an IPv4 pair, or else both as
/// IPv6), with `tlvs` (whole TLVs) after the addresses: what a balancer writes; `None` when
/// the TLVs do not fit its 16-bit length. For tests and the fuzzer's round trip; kubegate
/// itself never sends one.
pub fn v2(source: SocketAddr, destination: SocketAddr, tlvs: &[u8]) -> Option<Vec<u8>> {
    let mut addresses = Vec::new();
    let family = match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            addresses.extend(s.octets());
            addresses.extend(d.octets());
            0x11
        }
        (s, d) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            addresses.extend(v6(s).octets());
            addresses.extend(v6(d).octets());
            0x21
        }
    };
    addresses.extend(source.port().to_be_bytes());
    addresses.extend(destination.port().to_be_bytes());
    let length = u16::try_from(addresses.len() + tlvs.len()).ok()?;
    let mut out = V2_SIGNATURE.to_vec();
    out.extend([0x21, family]);
    out.extend(length.to_be_bytes());
    out.extend(addresses);
    out.extend(tlvs);
    Some(out)
}

/// A version 1 line naming `source` → `destination` (both of one family).
pub fn v1(source: SocketAddr, destination: SocketAddr) -> String {
    let family = if source.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {} {} {} {}\r\n",
        source.ip(),
        destination.ip(),
        source.port(),
        destination.port()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Feeds `bytes` as a caller would: as much as each answer asks for.
    fn read_whole(bytes: &[u8]) -> Result<Header, Malformed> {
        let mut have = 1;
        loop {
            match read(&bytes[..have.min(bytes.len())])? {
                Progress::Done(h) => return Ok(h),
                Progress::Needs(n) => {
                    assert!(n > have && n <= MAX_LENGTH, "asks for {n} after {have}");
                    assert!(n <= bytes.len(), "asks for {n} of {}", bytes.len());
                    have = n;
                }
            }
        }
    }

    #[test]
    fn a_v1_line_names_the_client_and_is_read_to_its_end() {
        let mut bytes = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 6443\r\n".to_vec();
        let length = bytes.len();
        bytes.extend(b"\x16\x03\x01");
        let h = read_whole(&bytes).unwrap();
        assert_eq!(h.length, length);
        assert_eq!(
            h.addresses,
            Some(Addresses {
                source: addr("192.0.2.7:56324"),
                destination: addr("198.51.100.1:6443")
            })
        );
        let six = read_whole(v1(addr("[2001:db8::7]:1"), addr("[2001:db8::1]:6443")).as_bytes());
        assert_eq!(
            six.unwrap().addresses.unwrap().source,
            addr("[2001:db8::7]:1")
        );
        let unknown = read_whole(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n").unwrap();
        assert_eq!(unknown.addresses, None);
    }

    #[test]
    fn a_v1_line_of_the_wrong_form_is_refused() {
        for line in [
            &b"PROXY TCP4 192.0.2.7 198.51.100.1 56324\r\n"[..],
            b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 6443 x\r\n",
            b"PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n",
            b"PROXY TCP6 192.0.2.7 198.51.100.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 65536 2\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 +1 2\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 01 2\r\n",
            b"PROXY TCP4  192.0.2.7 198.51.100.1 1 2\r\n",
            b"PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n",
            b"PROXY UNKNOWNX\r\n",
        ] {
            assert_eq!(read_whole(line), Err(Malformed::BadLine), "{line:?}");
        }
        assert_eq!(read(b"PROXZ"), Err(Malformed::NotAHeader));
        assert_eq!(read(b"POST / HTTP/1.1"), Err(Malformed::NotAHeader));
        let endless = [b"PROXY TCP4 ".as_slice(), &[b'1'; 200]].concat();
        assert_eq!(read(&endless), Err(Malformed::TooLong));
    }

    #[test]
    fn a_v2_header_names_the_client_whatever_tlvs_follow() {
        // An AWS NLB's VPC endpoint TLV (0xEA) and a NOOP.
        let tlvs = [&[0xea, 0, 5, 1][..], b"vpce", &[0x04, 0, 0]].concat();
        let mut bytes = v2(addr("192.0.2.7:56324"), addr("198.51.100.1:6443"), &tlvs).unwrap();
        let length = bytes.len();
        bytes.extend(b"\x16\x03\x01");
        let h = read_whole(&bytes).unwrap();
        assert_eq!(h.length, length);
        assert_eq!(h.addresses.unwrap().source, addr("192.0.2.7:56324"));
        let six = v2(addr("[2001:db8::7]:9"), addr("[2001:db8::1]:6443"), &[]).unwrap();
        assert_eq!(
            read_whole(&six).unwrap().addresses.unwrap().destination,
            addr("[2001:db8::1]:6443")
        );
    }

    #[test]
    fn a_v2_local_or_unspec_header_names_nobody() {
        let mut local = v2(addr("192.0.2.7:1"), addr("198.51.100.1:2"), &[]).unwrap();
        local[12] = 0x20;
        assert_eq!(read_whole(&local).unwrap().addresses, None);
        let mut unspec = V2_SIGNATURE.to_vec();
        unspec.extend([0x21, 0x00, 0, 0]);
        assert_eq!(
            read_whole(&unspec).unwrap(),
            Header {
                length: 16,
                addresses: None
            }
        );
    }

    #[test]
    fn a_bad_v2_header_is_refused_before_its_body_is_read() {
        let good = v2(addr("192.0.2.7:1"), addr("198.51.100.1:2"), &[]).unwrap();
        let with = |at: usize, byte: u8| {
            let mut b = good.clone();
            b[at] = byte;
            b
        };
        assert_eq!(read(&with(12, 0x11)), Err(Malformed::BadVersion));
        assert_eq!(read(&with(12, 0x22)), Err(Malformed::BadVersion));
        assert_eq!(read(&with(13, 0x12)), Err(Malformed::BadFamily));
        assert_eq!(read(&with(13, 0x41)), Err(Malformed::BadFamily));
        assert_eq!(read(&with(13, 0x21)), Err(Malformed::BadLength));
        assert_eq!(read(&with(5, b'x')), Err(Malformed::NotAHeader));
        // Longer than allowed: refused from the fixed part alone.
        let mut huge = good[..16].to_vec();
        huge[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(read(&huge), Err(Malformed::TooLong));
        // A TLV that runs past the header.
        let overrun = v2(
            addr("192.0.2.7:1"),
            addr("198.51.100.1:2"),
            &[0xe0, 0, 9, 1],
        )
        .unwrap();
        assert_eq!(read(&overrun), Err(Malformed::BadLength));
    }

    #[test]
    fn only_the_bytes_a_header_may_start_with_are_taken_for_one() {
        assert!(may_start(b'P') && may_start(b'\r'));
        assert!(!may_start(0x16));
        assert!(is_signature(b"PROXY TCP4") && is_signature(&V2_SIGNATURE));
        assert!(!is_signature(b"\r\n\r\n") && !is_signature(b"POST /") && !is_signature(b"PROXY"));
        assert_eq!(read(b"\x16\x03\x01"), Err(Malformed::NotAHeader));
    }
}
