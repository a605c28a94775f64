//! Reading JSON into [`Py`] without losing key order or the int/float distinction. It never
//! reorders or normalizes anything.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::Py;

struct PyVisitor;

impl<'de> Visitor<'de> for PyVisitor {
    type Value = Py;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Py, E> {
        Ok(Py::None)
    }

    fn visit_none<E>(self) -> Result<Py, E> {
        Ok(Py::None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Py, D::Error> {
        Py::deserialize(d)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Py, E> {
        Ok(Py::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Py, E> {
        Ok(Py::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Py, E> {
        // Integers beyond i64 do not occur in tau2's data; keep them as floats rather than fail.
        Ok(i64::try_from(v).map(Py::Int).unwrap_or(Py::Float(v as f64)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Py, E> {
        Ok(Py::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Py, E> {
        Ok(Py::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Py, E> {
        Ok(Py::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Py, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Py::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Py, A::Error> {
        let mut entries: Vec<(String, Py)> = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Py>()? {
            // A repeated key keeps its first position and its last value, as a Python dict does.
            match entries.iter_mut().find(|(k, _)| *k == key) {
                Some((_, existing)) => *existing = value,
                None => entries.push((key, value)),
            }
        }
        Ok(Py::Dict(entries))
    }
}

impl<'de> Deserialize<'de> for Py {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Py, D::Error> {
        d.deserialize_any(PyVisitor)
    }
}

impl serde::Serialize for Py {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Py::None => s.serialize_none(),
            Py::Bool(b) => s.serialize_bool(*b),
            Py::Int(i) => s.serialize_i64(*i),
            Py::Float(f) => s.serialize_f64(*f),
            Py::Str(v) => s.serialize_str(v),
            Py::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Py::Dict(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}
