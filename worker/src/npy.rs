//! NumPy's `.npy` format (version 1.0 and 2.0 read, 1.0 written) for array
//! arguments and results: little-endian `bool`, `int8/16/32/64`,
//! `uint8`, `float32` and `float64`, C order.
//!
//! ```text
//! \x93NUMPY 01 00 <u16 header length> {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), } <pad> <data>
//! ```

use compiler_core::interp::value::{Elems, Value};
use compiler_core::syntax::ast::BaseType;

const MAGIC: &[u8] = b"\x93NUMPY";

/// Reads an `.npy` file into a value (rank 0 becomes a scalar).
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated .npy header".into());
            }
            (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
        }
        v => return Err(format!(".npy version {v} is not supported")),
    };
    let header = bytes.get(start..start + header_len).ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(header).map_err(|_| "the .npy header is not text")?;
    let descr = field(header, "descr").ok_or("the .npy header has no 'descr'")?;
    let descr = descr.trim().trim_matches(|c| c == '\'' || c == '"');
    if field(header, "fortran_order").is_some_and(|f| f.trim().starts_with("True")) {
        return Err("Fortran-order .npy arrays are not supported; save with C order".into());
    }
    let shape_text = field(header, "shape").ok_or("the .npy header has no 'shape'")?;
    let inner = shape_text.trim().trim_start_matches('(');
    let inner = &inner[..inner.find(')').ok_or("malformed 'shape' in the .npy header")?];
    let shape: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| format!("malformed extent `{s}` in the .npy header")))
        .collect::<Result<_, _>>()?;
    let count = compiler_core::interp::value::shape_size(&shape).ok_or("the .npy shape overflows")?;
    let data = &bytes[start + header_len..];
    let take = |size: usize| -> Result<&[u8], String> {
        let need = count.checked_mul(size).ok_or("the .npy shape overflows")?;
        data.get(..need).ok_or_else(|| format!("the .npy data has {} bytes, the shape needs {need}", data.len()))
    };
    let elems = match descr {
        "|b1" => Elems::Bool(take(1)?.iter().map(|&b| b != 0).collect()),
        "|u1" => Elems::Char(take(1)?.to_vec()),
        "|i1" => Elems::Int(BaseType::Byte, take(1)?.iter().map(|&b| b as i8 as i64).collect()),
        "<i2" => Elems::Int(
            BaseType::Short,
            take(2)?.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as i64).collect(),
        ),
        "<i4" => Elems::Int(
            BaseType::Int,
            take(4)?.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).collect(),
        ),
        "<i8" => Elems::Int(
            BaseType::Long,
            take(8)?.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
        ),
        "<f4" => Elems::Float(take(4)?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        "<f8" => Elems::Double(
            take(8)?.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
        ),
        other => {
            return Err(format!(
                "the .npy element type `{other}` is not supported (use bool, int8–64, uint8, float32, float64)"
            ));
        }
    };
    Ok(Value::from_parts(shape, elems))
}

/// The value of `key` in the header dictionary, as text up to the next key.
fn field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'")).or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?;
    if rest.trim_start().starts_with('(') {
        let end = rest.find(')')?;
        return Some(&rest[..=end]);
    }
    let end = rest.find(',').unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Writes a value as `.npy` version 1.0; `None` for strings.
pub fn encode(value: &Value) -> Option<Vec<u8>> {
    let (shape, elems): (Vec<usize>, Elems) = match value {
        Value::Array(a) => (a.shape.clone(), a.elems.clone()),
        Value::Scalar(s) => (Vec::new(), Elems::filled(*s, 1).ok()?),
        Value::Str(_) => return None,
    };
    let (descr, data): (&str, Vec<u8>) = match &elems {
        Elems::Bool(v) => ("|b1", v.iter().map(|&b| b as u8).collect()),
        Elems::Char(v) => ("|u1", v.clone()),
        Elems::Int(BaseType::Byte, v) => ("|i1", v.iter().map(|&x| x as i8 as u8).collect()),
        Elems::Int(BaseType::Short, v) => ("<i2", v.iter().flat_map(|&x| (x as i16).to_le_bytes()).collect()),
        Elems::Int(BaseType::Int, v) => ("<i4", v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect()),
        Elems::Int(_, v) => ("<i8", v.iter().flat_map(|&x| x.to_le_bytes()).collect()),
        Elems::Float(v) => ("<f4", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        Elems::Double(v) => ("<f8", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
    };
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Magic (6) + version (2) + length (2) + header + newline, padded to 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.div_ceil(64) * 64 - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_bit_exactly() {
        let data: Vec<f64> =
            (0..1000).map(|i| (i as f64).sin() * 1e300).chain([f64::NAN, -0.0, f64::MIN_POSITIVE]).collect();
        let v = Value::from_parts(vec![1003], Elems::Double(data.clone()));
        let bytes = encode(&v).unwrap();
        assert_eq!((bytes.len() - data.len() * 8) % 64, 0, "the header is padded to 64 bytes");
        let back = decode(&bytes).unwrap();
        let Value::Array(a) = back else { panic!("an array") };
        let Elems::Double(d) = &a.elems else { panic!("doubles") };
        assert!(d.iter().zip(&data).all(|(x, y)| x.to_bits() == y.to_bits()));
        let m = Value::from_parts(vec![2, 3], Elems::Int(BaseType::Int, vec![1, -2, 3, 4, 5, 6]));
        assert_eq!(decode(&encode(&m).unwrap()).unwrap(), m);
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        assert!(decode(b"not numpy").is_err());
        let v = Value::from_parts(vec![4], Elems::Double(vec![1.0; 4]));
        let mut bytes = encode(&v).unwrap();
        bytes.truncate(bytes.len() - 8);
        assert!(decode(&bytes).unwrap_err().contains("bytes"));
    }
}
