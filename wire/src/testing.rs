//! Protobuf written by hand, for tests of what reads the apiserver's protobuf (here and in the
//! crates above, through the `testing` feature): the encoder is a few lines that a reader can
//! check against the wire format, not a second implementation of what is tested.

/// A length-delimited protobuf field: its key (`n`, wire type 2), then `payload`'s length and
/// bytes.
pub fn field(n: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = varint(n << 3 | 2);
    out.extend(varint(payload.len() as u64));
    out.extend_from_slice(payload);
    out
}

/// `n` as a protobuf varint: seven bits a byte, low first.
pub fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// A `Failure` Status as the apiserver writes it in protobuf, with the `k8s\0` magic and its
/// `Unknown` envelope; `cause`, when given, is its one cause's reason.
pub fn protobuf_status(message: &str, reason: &str, cause: Option<&str>, code: u64) -> Vec<u8> {
    let mut details = Vec::new();
    if let Some(c) = cause {
        details.extend(field(4, &field(1, c.as_bytes())));
    }
    let mut raw = field(1, b"");
    raw.extend(field(2, b"Failure"));
    raw.extend(field(3, message.as_bytes()));
    raw.extend(field(4, reason.as_bytes()));
    raw.extend(field(5, &details));
    raw.extend(varint(6 << 3));
    raw.extend(varint(code));
    let mut type_meta = field(1, b"v1");
    type_meta.extend(field(2, b"Status"));
    let mut out = b"k8s\0".to_vec();
    out.extend(field(1, &type_meta));
    out.extend(field(2, &raw));
    out
}
