mod decoder;
mod encoder;
pub(crate) mod header;
pub(crate) mod huffman;
mod table;

#[cfg(test)]
mod test;

// kubegate: `NeedMore` is named through `DecoderError` only, since `header.rs` no longer does.
pub use self::decoder::{Decoder, DecoderError};
pub use self::encoder::Encoder;
pub use self::header::{BytesStr, Header};
