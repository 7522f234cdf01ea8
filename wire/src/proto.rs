//! The protobuf wire format, as much as kubegate reads of it: a message's fields, one at a time,
//! without a schema (watch events and `Status` answers in `application/vnd.kubernetes.protobuf`).
//! A malformed field ends the iteration with an error; nothing is allocated.

use bytes::Buf;

/// A protobuf field's payload.
pub enum Wire<'a> {
    /// A varint.
    Varint(u64),
    /// Length-delimited bytes.
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value, not read.
    Fixed,
}

/// The fields of one protobuf message.
pub struct Fields<'a>(pub &'a [u8]);

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.0.split_first().ok_or("truncated varint")?;
            self.0 = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long")
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.0.len() {
            return Err("truncated field");
        }
        let head = &self.0[..n];
        self.0.advance(n);
        Ok(head)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>), &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let field = (|| {
            let key = self.varint()?;
            let wire = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Wire::Fixed
                }
                2 => {
                    let n = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                    Wire::Bytes(self.take(n)?)
                }
                5 => {
                    self.take(4)?;
                    Wire::Fixed
                }
                _ => return Err("unknown wire type"),
            };
            Ok((key >> 3, wire))
        })();
        if field.is_err() {
            self.0 = &[];
        }
        Some(field)
    }
}
