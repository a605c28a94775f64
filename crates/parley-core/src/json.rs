//! Compact JSON out of any `Serialize` value, byte for byte what `serde_json::to_writer` writes,
//! with strings escaped eight bytes at a time.
//!
//! serde_json looks up every byte of a string in its escape table, one at a time: over a
//! multi-step rollout's three request bodies and its JSONL row, most of them copies of the same
//! system prompt and tool outputs, that loop was a sixth of the instructions of the thread that
//! drives the sessions (`docs/performance.md`). Here a string is read a word at a time: one test
//! tells whether any of a word's eight bytes needs an escape, and where the first one is, so a
//! run of plain text is skipped at a few instructions a word and copied whole. Text as escaped
//! as a tool call's arguments (a `\"` every few bytes) gains little; over a rollout, a quarter of
//! the loop's instructions went.
//!
//! Everything but the scan is serde_json's own: numbers, escapes and punctuation are written by
//! its `CompactFormatter`, a `RawValue` is written as its text, the errors are its errors. What
//! serde_json writes for a value, this writes (`tests` below compare the two on every kind of
//! value serde knows and on strings of every byte).

use std::io;

use serde::ser::{self, Impossible, Serialize};
use serde_json::Error;
use serde_json::ser::{CharEscape, CompactFormatter, Formatter};

/// Writes `value` as compact JSON into `writer`.
pub fn to_writer<W: io::Write, T: Serialize + ?Sized>(writer: W, value: &T) -> Result<(), Error> {
    value.serialize(&mut Serializer { writer })
}

/// `value` as compact JSON in a buffer of `capacity` bytes to start with.
pub fn to_vec_sized<T: Serialize + ?Sized>(value: &T, capacity: usize) -> Result<Vec<u8>, Error> {
    let mut text = Vec::with_capacity(capacity);
    to_writer(&mut text, value)?;
    Ok(text)
}

/// `value` as compact JSON text.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    let text = to_vec_sized(value, 128)?;
    // Only whole strings and ASCII are written: this cannot fail.
    String::from_utf8(text).map_err(<Error as ser::Error>::custom)
}

/// The names serde_json gives the struct a `RawValue` (and, with `arbitrary_precision`, a
/// `Number`) serializes as, whose one field is text to be written as it is.
const RAW_VALUE: &str = "$serde_json::private::RawValue";
const NUMBER: &str = "$serde_json::private::Number";

struct Serializer<W> {
    writer: W,
}

impl<W: io::Write> Serializer<W> {
    fn formatted(&mut self, write: impl FnOnce(&mut CompactFormatter, &mut W) -> io::Result<()>) -> Result<(), Error> {
        write(&mut CompactFormatter, &mut self.writer).map_err(Error::io)
    }

    fn raw(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.writer.write_all(bytes).map_err(Error::io)
    }

    fn string(&mut self, text: &str) -> Result<(), Error> {
        write_string(&mut self.writer, text).map_err(Error::io)
    }

    /// `{"variant":`, what an enum's variant with data opens with.
    fn open_variant(&mut self, variant: &str) -> Result<(), Error> {
        self.raw(b"{")?;
        self.string(variant)?;
        self.raw(b":")
    }

    /// `[` or `{`, and the compound that writes the rest and `close`: written shut at once when
    /// it is known to be empty, as serde_json does.
    fn open(&mut self, open: &[u8], close: &'static [u8], len: Option<usize>) -> Result<Compound<'_, W>, Error> {
        self.raw(open)?;
        if len == Some(0) {
            self.raw(close)?;
            return Ok(Compound::Items { ser: self, state: State::Empty, close });
        }
        Ok(Compound::Items { ser: self, state: State::First, close })
    }
}

/// Writes `text` as a JSON string: quoted, with `"`, `\` and the control characters escaped as
/// serde_json escapes them.
fn write_string<W: io::Write + ?Sized>(writer: &mut W, text: &str) -> io::Result<()> {
    let bytes = text.as_bytes();
    writer.write_all(b"\"")?;
    // `bytes[start..]` is not yet written.
    let mut start = 0;
    while let Some(found) = next_escape(bytes, start) {
        if start < found {
            writer.write_all(&bytes[start..found])?;
        }
        CompactFormatter.write_char_escape(writer, escape(bytes[found]).expect("the byte found needs an escape"))?;
        start = found + 1;
    }
    if start < bytes.len() {
        writer.write_all(&bytes[start..])?;
    }
    writer.write_all(b"\"")
}

/// Where the first byte at or after `at` is that a JSON string cannot hold as it is (`"`, `\`,
/// or a control character below 0x20), read eight bytes at a time: where a string's plain run
/// ends, for a reader as for the writer here. `None` when there is none, or `at` is past the end.
pub fn next_special(bytes: &[u8], at: usize) -> Option<usize> {
    bytes.get(at..)?;
    next_escape(bytes, at)
}

/// Where the first byte at or after `at` that needs an escape is, read a word at a time: the
/// last few bytes of a text of eight or more as the word that ends it, those of a shorter one a
/// byte at a time.
fn next_escape(bytes: &[u8], mut at: usize) -> Option<usize> {
    while let Some(word) = bytes.get(at..at + 8) {
        let found = escapes(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let left = bytes.len() - at;
    if left == 0 {
        return None;
    }
    if let Some(last) = bytes.len().checked_sub(8) {
        // The last word, whose first `8 - left` bytes were read already: made `@`, which needs
        // no escape and borrows nothing from the bytes above, and shifted out.
        let read = (8 - left) * 8;
        let before = (1u64 << read) - 1;
        let word = u64::from_le_bytes(bytes[last..].try_into().expect("eight bytes"));
        let found = escapes((word & !before) | ((u64::from(b'@') * ONES) & before)) >> read;
        return (found != 0).then(|| at + (found.trailing_zeros() / 8) as usize);
    }
    bytes[at..].iter().position(|&b| escape(b).is_some()).map(|i| at + i)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that needs an escape (`"`, `\`, or below 0x20) set, the
/// lowest of them exactly: a byte above one that is set may be set by the borrow too, and
/// below the first, none is. Zero when no byte needs one.
fn escapes(word: u64) -> u64 {
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let control = word.wrapping_sub(0x20 * ONES) & !word & HIGHS;
    control | zero(word ^ (b'"' as u64 * ONES)) | zero(word ^ (b'\\' as u64 * ONES))
}

/// How serde_json escapes `byte`, if it does.
fn escape(byte: u8) -> Option<CharEscape> {
    Some(match byte {
        b'"' => CharEscape::Quote,
        b'\\' => CharEscape::ReverseSolidus,
        b'\x08' => CharEscape::Backspace,
        b'\x0c' => CharEscape::FormFeed,
        b'\n' => CharEscape::LineFeed,
        b'\r' => CharEscape::CarriageReturn,
        b'\t' => CharEscape::Tab,
        0x00..=0x1f => CharEscape::AsciiControl(byte),
        _ => return None,
    })
}

impl<'a, W: io::Write> ser::Serializer for &'a mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a, W>;
    type SerializeTuple = Compound<'a, W>;
    type SerializeTupleStruct = Compound<'a, W>;
    type SerializeTupleVariant = Compound<'a, W>;
    type SerializeMap = Compound<'a, W>;
    type SerializeStruct = Compound<'a, W>;
    type SerializeStructVariant = Compound<'a, W>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.formatted(|f, w| f.write_bool(w, v))
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.formatted(|f, w| f.write_i8(w, v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.formatted(|f, w| f.write_i16(w, v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.formatted(|f, w| f.write_i32(w, v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.formatted(|f, w| f.write_i64(w, v))
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.formatted(|f, w| f.write_i128(w, v))
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.formatted(|f, w| f.write_u8(w, v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.formatted(|f, w| f.write_u16(w, v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.formatted(|f, w| f.write_u32(w, v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.formatted(|f, w| f.write_u64(w, v))
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.formatted(|f, w| f.write_u128(w, v))
    }
    /// A number that is not finite is written `null`, as serde_json writes it.
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        match v.is_finite() {
            true => self.formatted(|f, w| f.write_f32(w, v)),
            false => self.serialize_unit(),
        }
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        match v.is_finite() {
            true => self.formatted(|f, w| f.write_f64(w, v)),
            false => self.serialize_unit(),
        }
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.string(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.string(v)
    }
    /// Bytes are a list of numbers, as serde_json writes them.
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        self.formatted(|f, w| f.write_byte_array(w, v))
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.formatted(|f, w| f.write_null(w))
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<(), Error> {
        self.string(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.open_variant(variant)?;
        value.serialize(&mut *self)?;
        self.raw(b"}")
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a, W>, Error> {
        self.open(b"[", b"]", len)
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, W>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Compound<'a, W>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, W>, Error> {
        self.open_variant(variant)?;
        self.open(b"[", b"]}", Some(len))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a, W>, Error> {
        self.open(b"{", b"}", len)
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a, W>, Error> {
        match name {
            RAW_VALUE | NUMBER => Ok(Compound::Raw { ser: self }),
            _ => self.serialize_map(Some(len)),
        }
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, W>, Error> {
        self.open_variant(variant)?;
        self.open(b"{", b"}}", Some(len))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Empty,
    First,
    Rest,
}

/// A list, map or struct being written, or a raw value's one field.
enum Compound<'a, W> {
    /// `close` is what ends it: `]` or `}`, and a second `}` for an enum's variant.
    Items {
        ser: &'a mut Serializer<W>,
        state: State,
        close: &'static [u8],
    },
    Raw {
        ser: &'a mut Serializer<W>,
    },
}

impl<W: io::Write> Compound<'_, W> {
    /// The comma before an item, but the first.
    fn item(&mut self) -> Result<&mut Serializer<W>, Error> {
        match self {
            Compound::Items { ser, state, .. } => {
                if *state == State::Rest {
                    ser.raw(b",")?;
                }
                *state = State::Rest;
                Ok(ser)
            }
            Compound::Raw { .. } => Err(ser::Error::custom("a raw value holds no items")),
        }
    }

    fn close(self) -> Result<(), Error> {
        match self {
            // `open` shut an empty one already.
            Compound::Items { state: State::Empty, .. } | Compound::Raw { .. } => Ok(()),
            Compound::Items { ser, close, .. } => ser.raw(close),
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(self.item()?)
    }

    fn entry<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        if let Compound::Raw { ser } = self {
            // serde_json's raw value is a struct of one field, its text.
            return value.serialize(RawText(ser));
        }
        let ser = self.item()?;
        ser.string(key)?;
        ser.raw(b":")?;
        value.serialize(ser)
    }
}

/// The lists' compounds, each item written by [`Compound::element`], and the structs', each
/// field by [`Compound::entry`].
macro_rules! compound {
    ($($list:ident::$item:ident),*; $($fields:ident),*) => {
        $(impl<W: io::Write> ser::$list for Compound<'_, W> {
            type Ok = ();
            type Error = Error;
            fn $item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                self.close()
            }
        })*
        $(impl<W: io::Write> ser::$fields for Compound<'_, W> {
            type Ok = ();
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
                self.entry(key, value)
            }
            fn end(self) -> Result<(), Error> {
                self.close()
            }
        })*
    };
}

compound!(SerializeSeq::serialize_element, SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field, SerializeTupleVariant::serialize_field;
    SerializeStruct, SerializeStructVariant);

impl<W: io::Write> ser::SerializeMap for Compound<'_, W> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        key.serialize(MapKey(self.item()?))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        match self {
            Compound::Items { ser, .. } => {
                ser.raw(b":")?;
                value.serialize(&mut **ser)
            }
            Compound::Raw { .. } => Err(ser::Error::custom("a raw value holds no entries")),
        }
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

/// Refuses, with serde_json's words, what a serializer of one kind of value is given instead.
macro_rules! refuse {
    ($why:expr; $($method:ident($($arg:ty),*)),* $(,)?) => {$(
        fn $method(self, $(_: $arg),*) -> Result<(), Error> {
            Err(ser::Error::custom($why))
        }
    )*};
}

/// The compound values and newtype variants, which neither a map's key nor a raw value's text
/// can be, refused with `$why`.
macro_rules! refuse_compounds {
    ($why:expr) => {
        type SerializeSeq = Impossible<(), Error>;
        type SerializeTuple = Impossible<(), Error>;
        type SerializeTupleStruct = Impossible<(), Error>;
        type SerializeTupleVariant = Impossible<(), Error>;
        type SerializeMap = Impossible<(), Error>;
        type SerializeStruct = Impossible<(), Error>;
        type SerializeStructVariant = Impossible<(), Error>;
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<(), Error> {
            Err(ser::Error::custom($why))
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Impossible<(), Error>, Error> {
            Err(ser::Error::custom($why))
        }
        fn serialize_tuple(self, _: usize) -> Result<Impossible<(), Error>, Error> {
            Err(ser::Error::custom($why))
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Impossible<(), Error>, Error> {
            Err(ser::Error::custom($why))
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Impossible<(), Error>, Error> {
            Err(ser::Error::custom($why))
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Impossible<(), Error>, Error> {
            Err(ser::Error::custom($why))
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Impossible<(), Error>, Error> {
            Err(ser::Error::custom($why))
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Impossible<(), Error>, Error> {
            Err(ser::Error::custom($why))
        }
    };
}

/// A map's key: a string, or a number or boolean written as one (serde_json's rule).
struct MapKey<'a, W>(&'a mut Serializer<W>);

impl<W: io::Write> MapKey<'_, W> {
    /// `write`'s text between quotes.
    fn quoted(self, write: impl FnOnce(&mut CompactFormatter, &mut W) -> io::Result<()>) -> Result<(), Error> {
        self.0.raw(b"\"")?;
        self.0.formatted(write)?;
        self.0.raw(b"\"")
    }
}

/// serde_json's words for the keys it refuses.
const KEY_MUST_BE_A_STRING: &str = "key must be a string";
const FLOAT_KEY_MUST_BE_FINITE: &str = "float key must be finite (got NaN or +/-inf)";

impl<W: io::Write> ser::Serializer for MapKey<'_, W> {
    type Ok = ();
    type Error = Error;

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.0.string(v)
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.0.string(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<(), Error> {
        self.0.string(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.quoted(|f, w| f.write_bool(w, v))
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.quoted(|f, w| f.write_i8(w, v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.quoted(|f, w| f.write_i16(w, v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.quoted(|f, w| f.write_i32(w, v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.quoted(|f, w| f.write_i64(w, v))
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.quoted(|f, w| f.write_i128(w, v))
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.quoted(|f, w| f.write_u8(w, v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.quoted(|f, w| f.write_u16(w, v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.quoted(|f, w| f.write_u32(w, v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.quoted(|f, w| f.write_u64(w, v))
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.quoted(|f, w| f.write_u128(w, v))
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        match v.is_finite() {
            true => self.quoted(|f, w| f.write_f32(w, v)),
            false => Err(ser::Error::custom(FLOAT_KEY_MUST_BE_FINITE)),
        }
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        match v.is_finite() {
            true => self.quoted(|f, w| f.write_f64(w, v)),
            false => Err(ser::Error::custom(FLOAT_KEY_MUST_BE_FINITE)),
        }
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    refuse!(KEY_MUST_BE_A_STRING; serialize_bytes(&[u8]), serialize_none(), serialize_unit(),
        serialize_unit_struct(&'static str));
    refuse_compounds!(KEY_MUST_BE_A_STRING);
}

/// A raw value's text, written as it is.
struct RawText<'a, W>(&'a mut Serializer<W>);

const RAW_TEXT: &str = "a raw value's field must be its text";

impl<W: io::Write> ser::Serializer for RawText<'_, W> {
    type Ok = ();
    type Error = Error;

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.0.raw(v.as_bytes())
    }
    refuse!(RAW_TEXT; serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
        serialize_i64(i64), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32), serialize_u64(u64),
        serialize_f32(f32), serialize_f64(f64), serialize_char(char), serialize_bytes(&[u8]), serialize_none(),
        serialize_unit(), serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str));
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Error> {
        Err(ser::Error::custom(RAW_TEXT))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, _: &T) -> Result<(), Error> {
        Err(ser::Error::custom(RAW_TEXT))
    }
    refuse_compounds!(RAW_TEXT);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;
    use serde_json::Value;
    use serde_json::value::RawValue;

    /// What serde_json writes, or its error's text.
    fn theirs<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
        serde_json::to_string(value).map_err(|e| e.to_string())
    }

    fn ours<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
        super::to_string(value).map_err(|e| e.to_string())
    }

    #[track_caller]
    fn same<T: Serialize + ?Sized>(value: &T) {
        assert_eq!(ours(value), theirs(value));
    }

    #[test]
    fn every_ascii_byte_is_escaped_as_serde_json_escapes_it_wherever_it_falls_in_a_word() {
        for byte in 0..0x80u8 {
            let c = char::from(byte);
            // At every place of texts shorter than a word, of a word or two and a short tail,
            // and of four words and more, among bytes that a borrow from an escaped byte below
            // would mark too (` `, `#`, `]`) and bytes above ASCII.
            for filler in ['a', ' ', '#', ']', '\u{ff}'] {
                for len in [3, 8, 15, 16, 19, 32, 37] {
                    for at in 0..len {
                        let text: String = (0..len).map(|i| if i == at { c } else { filler }).collect();
                        same(&text);
                    }
                }
            }
            same(&c);
            same(&c.to_string());
        }
        // Next to each other, and in runs longer than a word.
        same("\"\\\n\t\r\x08\x0c\x00\x1f\x7f/");
        same(&"\u{1}".repeat(20));
        same(&"\"".repeat(17));
        same("");
    }

    /// A reader's scan finds the first byte a string cannot hold as it is, from any place in
    /// any text, the place itself and the end included: the one the byte-by-byte test finds.
    #[test]
    fn a_readers_scan_stops_where_a_plain_run_ends() {
        let long = format!("{}\u{1f}{}\\{}", "x".repeat(17), "é".repeat(9), "y".repeat(20));
        let texts = [
            "",
            "a",
            "ab\"",
            "\\",
            "0123456789abcdef",
            "0123456\n89abcdef\"",
            "é😀\u{1}x",
            "abcdefgh\"ijklmnop",
            "0123456789abcdef0123456789abcde\"",
            &long,
        ];
        for text in texts {
            let bytes = text.as_bytes();
            for at in 0..=bytes.len() + 1 {
                let byte_by_byte =
                    bytes.get(at..).and_then(|rest| rest.iter().position(|&b| super::escape(b).is_some()));
                assert_eq!(super::next_special(bytes, at), byte_by_byte.map(|i| at + i), "{text:?} from {at}");
            }
        }
    }

    #[test]
    fn bytes_above_ascii_are_copied_unescaped() {
        // Every lead byte of a two-, three- and four-byte character, and continuation bytes that
        // differ from `"`, `\` and the control characters by their high bit alone (0xa2, 0xdc,
        // 0x80 to 0x9f).
        for c in
            ['é', 'ÿ', 'Ā', '€', '\u{a2}', '\u{dc}', '\u{9f}', '\u{80}', '\u{2022}', '\u{ffff}', '😀', '\u{10ffff}']
        {
            for at in 0..12 {
                let text: String = (0..12).map(|i| if i == at { c } else { 'x' }).collect();
                same(&text);
                same(&format!("{text}\"{c}\n"));
            }
        }
    }

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(text in "(\\PC|[\\x00-\\x1f\"\\\\]){0,80}") {
            prop_assert_eq!(ours(&text), theirs(&text));
        }

        #[test]
        fn any_json_value_is_written_as_serde_json_writes_it(value in json_value()) {
            prop_assert_eq!(ours(&value), theirs(&value));
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "(\\PC|[\\x00-\\x1f\"\\\\]){0,24}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"\\\\\n]{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Newtype(u8);

    #[derive(Serialize)]
    struct Pair(i32, &'static str);

    #[derive(Serialize)]
    enum Kind {
        Plain,
        Wrapped(Option<u8>),
        Listed(u8, char),
        Nothing(),
        Named { a: f32, b: Vec<u8> },
        NoFields {},
    }

    #[derive(Serialize)]
    struct Record<'a> {
        unit: Unit,
        newtype: Newtype,
        pair: Pair,
        tuple: (u8, bool, ()),
        empty_list: Vec<u8>,
        empty_map: BTreeMap<String, u8>,
        kinds: Vec<Kind>,
        wide: (i128, u128, i8, i16, u16, u32),
        floats: (f32, f64, f64, f64, f32),
        raw: &'a RawValue,
        #[serde(with = "bytes")]
        bytes: &'a [u8],
        none: Option<u8>,
    }

    mod bytes {
        pub fn serialize<S: serde::Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(bytes)
        }
    }

    #[test]
    fn every_kind_of_value_serde_knows_is_written_as_serde_json_writes_it() {
        let raw = RawValue::from_string(r#"{"b": [1, 2] , "a":"x"}"#.to_owned()).unwrap();
        let record = Record {
            unit: Unit,
            newtype: Newtype(7),
            pair: Pair(-3, "p\"q"),
            tuple: (1, true, ()),
            empty_list: Vec::new(),
            empty_map: BTreeMap::new(),
            kinds: vec![
                Kind::Plain,
                Kind::Wrapped(None),
                Kind::Wrapped(Some(2)),
                Kind::Listed(4, '\n'),
                Kind::Nothing(),
                Kind::Named { a: 0.1, b: vec![1, 2] },
                Kind::NoFields {},
            ],
            wide: (i128::MIN, u128::MAX, i8::MIN, i16::MAX, u16::MAX, u32::MAX),
            floats: (1.5e-7, f64::NAN, f64::INFINITY, -0.0, f32::NEG_INFINITY),
            raw: &raw,
            bytes: &[0, 255, 10],
            none: None,
        };
        same(&record);
        // The raw value's text is written as it came, spaces and key order kept.
        assert!(ours(&record).unwrap().contains(r#""raw":{"b": [1, 2] , "a":"x"}"#));
    }

    #[test]
    fn map_keys_are_strings_numbers_and_booleans_as_serde_json_writes_them() {
        same(&BTreeMap::from([(1u8, 'a'), (200, 'b')]));
        same(&BTreeMap::from([(-5i64, ()), (i64::MAX, ())]));
        same(&BTreeMap::from([(true, 1), (false, 2)]));
        same(&BTreeMap::from([('k', 1), ('"', 2)]));
        same(&BTreeMap::from([(Some("a"), 1)]));
        same(&MapOf(&[(Kind::Plain, 1)]));
        same(&MapOf(&[(Newtype(3), 1)]));
        same(&MapOf(&[(1.5f64, 1), (-0.25, 2)]));
        same(&MapOf(&[(2.5f32, 1)]));
        // Keys serde_json refuses are refused here, with its words.
        same(&MapOf(&[(1.5f64, 1), (f64::NAN, 2)]));
        same(&MapOf(&[(vec![1u8], 1u8)]));
        same(&MapOf(&[((), 1u8)]));
        same(&MapOf(&[(None::<u8>, 1u8)]));
    }

    /// A map from any key type, in the order given.
    struct MapOf<'a, K, V>(&'a [(K, V)]);

    impl<K: Serialize, V: Serialize> Serialize for MapOf<'_, K, V> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
        }
    }

    #[test]
    fn a_writers_failure_is_the_error() {
        struct Full;
        impl std::io::Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let err = super::to_writer(Full, &"text").unwrap_err();
        assert!(err.is_io(), "{err}");
        assert!(err.to_string().contains("disk full"), "{err}");
    }
}
