//! Turning values into text: SaC literal syntax (what `withloop run` prints for
//! returned values), the layouts of sac2c's `StdIO::print` (ScalarIO for scalars,
//! ArrayIO's `PrintArr` for arrays, byte for byte), and C `printf`.

use super::value::{Scalar, Value, is_u64};
use crate::syntax::ast::BaseType;

// ------------------------------------------------------------------ SaC literals

/// A scalar as a SaC literal that reads back as the same value and type.
pub fn scalar_literal(s: Scalar) -> String {
    match s {
        Scalar::Bool(b) => b.to_string(),
        Scalar::Char(c) => format!("'{}'", escape_char(c)),
        Scalar::Int(t, v) => {
            let digits = if is_u64(t) { (v as u64).to_string() } else { v.to_string() };
            let suffix = match t {
                BaseType::Byte => "b",
                BaseType::Short => "s",
                BaseType::Long => "l",
                BaseType::LongLong => "ll",
                BaseType::UByte => "ub",
                BaseType::UShort => "us",
                BaseType::UInt => "ui",
                BaseType::ULong => "ul",
                BaseType::ULongLong => "ull",
                _ => "",
            };
            format!("{digits}{suffix}")
        }
        Scalar::Double(d) => real_literal(d, format!("{d:?}"), ""),
        Scalar::Float(f) => real_literal(f as f64, format!("{f:?}"), "f"),
    }
}

/// `shortest` is Rust's `{:?}` of the value in its own width: the shortest text that
/// reads back exactly, always with a `.` or an exponent.
fn real_literal(d: f64, shortest: String, suffix: &str) -> String {
    if d.is_nan() {
        return "nan".to_string();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".to_string() } else { "-inf".to_string() };
    }
    format!("{shortest}{suffix}")
}

fn escape_char(c: u8) -> String {
    match c {
        b'\n' => "\\n".into(),
        b'\t' => "\\t".into(),
        b'\r' => "\\r".into(),
        b'\\' => "\\\\".into(),
        b'\'' => "\\'".into(),
        0 => "\\0".into(),
        c if c.is_ascii_graphic() || c == b' ' => (c as char).to_string(),
        c => format!("\\x{c:02x}"),
    }
}

/// A value in SaC syntax: `42`, `[[1, 2], [3, 4]]`, `genarray([0, 3], 0.0)`.
pub fn value_literal(v: &Value) -> String {
    match v {
        Value::Scalar(s) => scalar_literal(*s),
        Value::Str(s) => format!(
            "\"{}\"",
            s.iter().map(|&c| if c == b'"' { "\\\"".to_string() } else { escape_char(c) }).collect::<String>()
        ),
        Value::Array(a) => {
            if a.elems.is_empty() {
                if a.shape == [0] && a.elems.base() == BaseType::Int {
                    return "[]".to_string();
                }
                let shape = a.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
                return format!("genarray([{shape}], {})", scalar_literal(Scalar::zero(a.elems.base())));
            }
            let mut out = String::new();
            nested(&mut out, &a.shape, &|i| a.elems.get(i).map(scalar_literal).unwrap_or_default(), 0, 0);
            out
        }
    }
}

fn nested(out: &mut String, shape: &[usize], elem: &dyn Fn(usize) -> String, axis: usize, offset: usize) {
    if axis == shape.len() {
        out.push_str(&elem(offset));
        return;
    }
    out.push('[');
    let inner: usize = shape[axis + 1..].iter().product();
    for k in 0..shape[axis] {
        if k > 0 {
            out.push_str(", ");
        }
        nested(out, shape, elem, axis + 1, offset + k * inner);
    }
    out.push(']');
}

// ------------------------------------------------------------------ StdIO::print

/// sac2c's `ScalarIO::print`: a rank-0 header, then the value.
pub fn print_scalar(s: Scalar) -> Vec<u8> {
    let mut out = b"Dimension:  0\nShape    : < >\n".to_vec();
    match s {
        Scalar::Bool(b) => out.extend_from_slice(if b { b" true\n" } else { b" false\n" }),
        Scalar::Char(c) => {
            out.extend_from_slice(b" '");
            out.push(c);
            out.extend_from_slice(b"'\n");
        }
        Scalar::Int(t, v) => out.extend_from_slice(format!(" {}\n", int_text(t, v)).as_bytes()),
        Scalar::Float(f) => out.extend_from_slice(format!(" {}\n", format_g(f as f64, 6, false, false)).as_bytes()),
        Scalar::Double(d) => out.extend_from_slice(format!(" {}\n", format_g(d, 6, false, false)).as_bytes()),
    }
    out
}

fn int_text(t: BaseType, v: i64) -> String {
    if is_u64(t) { (v as u64).to_string() } else { v.to_string() }
}

/// sac2c's `ArrayIO::print` (`PrintArr`): header, then rows bracketed `< >` for odd
/// ranks and `| |` for even ranks, with its exact spacing and blank lines.
pub fn print_array(v: &Value) -> Vec<u8> {
    let shape = v.shape().to_vec();
    let dim = shape.len();
    let mut out = format!("Dimension: {dim:>2}\nShape    : <").into_bytes();
    for (i, s) in shape.iter().enumerate() {
        out.extend_from_slice(format!(" {s:>2}").as_bytes());
        if i + 1 < dim {
            out.push(b',');
        }
    }
    out.extend_from_slice(b">\n");
    let elem = |i: usize| -> Vec<u8> {
        match v.elem(i) {
            Some(Scalar::Int(t, x)) => format!("{:>2} ", int_text(t, x)).into_bytes(),
            Some(Scalar::Bool(b)) => format!("{:>2} ", b as i32).into_bytes(),
            Some(Scalar::Double(d)) => format!("{} ", format_e(d, 6, false)).into_bytes(),
            Some(Scalar::Float(f)) => format!("{:>4} ", format_f(f as f64, 6)).into_bytes(),
            Some(Scalar::Char(c)) => vec![c],
            None => Vec::new(),
        }
    };
    if dim == 0 {
        out.extend(elem(0));
        out.push(b'\n');
        return out;
    }
    if v.is_empty() {
        out.extend_from_slice(b"<>\n");
        return out;
    }
    let offset = |index: &[usize]| index.iter().zip(&shape).fold(0usize, |acc, (&i, &s)| acc * s + i);
    let mut index = vec![0usize; dim];
    let mut n: isize = dim as isize - 1;
    let mut space: &[u8] = b" ";
    let odd = dim % 2 == 1;
    loop {
        out.push(if odd { b'<' } else { b'|' });
        let last = n as usize;
        while index[last] < shape[dim - 1] {
            out.extend(elem(offset(&index)));
            index[last] += 1;
        }
        if odd {
            index[last] = 0;
            n -= 1;
            out.extend_from_slice(b"> ");
        } else {
            out.extend_from_slice(b"| ");
        }
        while n > 0 && index[n as usize] + 1 >= shape[n as usize] {
            index[n as usize] = 0;
            n -= 2;
            if n < 0 {
                space = b"\n";
                n = ((dim as isize - 2) / 2) * 2;
            }
            out.extend_from_slice(space);
        }
        if n >= 0 && index[n as usize] + 1 < shape[n as usize] {
            index[n as usize] += 1;
            n = dim as isize - 1;
            space = b" ";
        }
        if n <= 0 {
            break;
        }
    }
    out.push(b'\n');
    out
}

// ------------------------------------------------------------------ C number formats

/// C `%.{prec}f`.
pub fn format_f(v: f64, prec: usize) -> String {
    if !v.is_finite() {
        return non_finite(v, false);
    }
    format!("{v:.prec$}")
}

fn non_finite(v: f64, upper: bool) -> String {
    let s = if v.is_nan() {
        if v.is_sign_negative() { "-nan" } else { "nan" }
    } else if v > 0.0 {
        "inf"
    } else {
        "-inf"
    };
    if upper { s.to_uppercase() } else { s.to_string() }
}

/// C `%.{prec}e`: mantissa, `e`, sign, at least two exponent digits.
pub fn format_e(v: f64, prec: usize, upper: bool) -> String {
    if !v.is_finite() {
        return non_finite(v, upper);
    }
    let s = format!("{v:.prec$e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let e = if upper { 'E' } else { 'e' };
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}{e}{sign}{:02}", exp.abs())
}

/// C `%.{prec}g` (with `#` keeping trailing zeros).
pub fn format_g(v: f64, prec: usize, alternate: bool, upper: bool) -> String {
    if !v.is_finite() {
        return non_finite(v, upper);
    }
    let p = if prec == 0 { 1 } else { prec };
    // The exponent as %e would print it with p-1 digits (after rounding).
    let e_form = format!("{:.*e}", p - 1, v);
    let exp: i32 = e_form.split_once('e').and_then(|(_, x)| x.parse().ok()).unwrap_or(0);
    let mut s = if exp < -4 || exp >= p as i32 {
        format_e(v, p - 1, upper)
    } else {
        format_f(v, (p as i32 - 1 - exp).max(0) as usize)
    };
    if !alternate {
        // Strip trailing zeros of the fraction (and a bare point).
        let (num, tail) = match s.find(['e', 'E']) {
            Some(i) => (s[..i].to_string(), s[i..].to_string()),
            None => (s.clone(), String::new()),
        };
        if num.contains('.') {
            let trimmed = num.trim_end_matches('0').trim_end_matches('.');
            s = format!("{trimmed}{tail}");
        }
    }
    s
}

/// C `%a` / `%.{prec}a`: hexadecimal mantissa rounded (ties to even) to `prec`
/// hex digits, binary exponent.
fn format_a(v: f64, precision: Option<usize>, alternate: bool, upper: bool) -> String {
    if !v.is_finite() {
        return non_finite(v, upper);
    }
    let sign = if v.is_sign_negative() { "-" } else { "" };
    let bits = v.abs().to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let (mut lead, exp) = if raw_exp == 0 { (0u64, if frac == 0 { 0 } else { -1022 }) } else { (1u64, raw_exp - 1023) };
    let digits = match precision {
        None => {
            let mut hex = format!("{frac:013x}");
            while hex.ends_with('0') {
                hex.pop();
            }
            hex
        }
        Some(p) if p >= 13 => format!("{frac:013x}{}", "0".repeat(p - 13)),
        Some(p) => {
            let shift = (13 - p) as u32 * 4;
            let rem = frac & ((1u64 << shift) - 1);
            let half = 1u64 << (shift - 1);
            let mut q = frac >> shift;
            // Ties go to the even last kept digit (the leading digit when p == 0).
            let last_odd = if p == 0 { lead & 1 == 1 } else { q & 1 == 1 };
            if rem > half || (rem == half && last_odd) {
                q += 1;
                if p == 0 || q >> (p as u32 * 4) != 0 {
                    lead += 1;
                    q = 0;
                }
            }
            if p == 0 { String::new() } else { format!("{q:0width$x}", width = p) }
        }
    };
    let dot = if digits.is_empty() && !alternate { String::new() } else { format!(".{digits}") };
    let s = format!("{sign}0x{lead}{dot}p{}{}", if exp < 0 { '-' } else { '+' }, exp.abs());
    if upper { s.to_uppercase() } else { s }
}

// ------------------------------------------------------------------ printf

/// C `printf` over SaC values. Returns the bytes, or what is wrong with the call.
pub fn printf(format: &[u8], args: &[Value]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut args = args.iter();
    let mut i = 0;
    let mut next_arg = |what: &str| args.next().ok_or_else(|| format!("`printf` has too few arguments for `{what}`"));
    while i < format.len() {
        let c = format[i];
        if c != b'%' {
            out.push(c);
            i += 1;
            continue;
        }
        let spec_start = i;
        i += 1;
        if format.get(i) == Some(&b'%') {
            out.push(b'%');
            i += 1;
            continue;
        }
        let (mut left, mut plus, mut space, mut alt, mut zero) = (false, false, false, false, false);
        while let Some(&f) = format.get(i) {
            match f {
                b'-' => left = true,
                b'+' => plus = true,
                b' ' => space = true,
                b'#' => alt = true,
                b'0' => zero = true,
                _ => break,
            }
            i += 1;
        }
        let mut width: Option<usize> = None;
        if format.get(i) == Some(&b'*') {
            i += 1;
            let w = next_arg("*")?.as_scalar().and_then(Scalar::as_i64).ok_or("`*` width needs an int")?;
            if w < 0 {
                left = true;
            }
            width = Some(w.unsigned_abs() as usize);
        } else {
            let start = i;
            while format.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i > start {
                width = std::str::from_utf8(&format[start..i]).ok().and_then(|s| s.parse().ok());
            }
        }
        let mut precision: Option<usize> = None;
        if format.get(i) == Some(&b'.') {
            i += 1;
            if format.get(i) == Some(&b'*') {
                i += 1;
                let p = next_arg(".*")?.as_scalar().and_then(Scalar::as_i64).ok_or("`.*` precision needs an int")?;
                precision = (p >= 0).then_some(p as usize);
            } else {
                let start = i;
                while format.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                precision = Some(std::str::from_utf8(&format[start..i]).ok().and_then(|s| s.parse().ok()).unwrap_or(0));
            }
        }
        // `h` and `hh` convert the (promoted) argument to short and char
        // as C does (`%hd` of 70000 is 4464); the others change nothing here.
        let mut halves = 0;
        while let Some(&c) = format.get(i).filter(|c| b"hlLqjzt".contains(c)) {
            halves += usize::from(c == b'h');
            i += 1;
        }
        let narrow_signed = |v: i64| match halves {
            0 => v,
            1 => v as i16 as i64,
            _ => v as i8 as i64,
        };
        let narrow_unsigned = |v: u64| match halves {
            0 => v,
            1 => v as u16 as u64,
            _ => v as u8 as u64,
        };
        let Some(&conv) = format.get(i) else {
            return Err("`printf` format ends inside a conversion".to_string());
        };
        i += 1;
        let spec = String::from_utf8_lossy(&format[spec_start..i]).to_string();
        let arg = next_arg(&spec)?;
        let mut numeric = true;
        let (sign, body): (String, Vec<u8>) = match conv {
            b'd' | b'i' => {
                let s = int_arg(arg, &spec)?;
                let (neg, mag) = match s {
                    Scalar::Int(t, v) if is_u64(t) && halves == 0 => (false, (v as u64).to_string()),
                    other => {
                        let v = narrow_signed(other.as_i64().unwrap_or(0));
                        (v < 0, v.unsigned_abs().to_string())
                    }
                };
                let mag = pad_digits(mag, precision);
                (sign_text(neg, plus, space), mag.into_bytes())
            }
            b'u' | b'o' | b'x' | b'X' => {
                let s = int_arg(arg, &spec)?;
                let bits = narrow_unsigned(unsigned_bits(s));
                let mag = match conv {
                    b'u' => bits.to_string(),
                    b'o' => format!("{}{:o}", if alt && bits != 0 { "0" } else { "" }, bits),
                    b'x' => format!("{}{:x}", if alt && bits != 0 { "0x" } else { "" }, bits),
                    _ => format!("{}{:X}", if alt && bits != 0 { "0X" } else { "" }, bits),
                };
                (String::new(), pad_digits(mag, precision).into_bytes())
            }
            b'c' => {
                numeric = false;
                let s = int_arg(arg, &spec)?;
                let c = match s {
                    Scalar::Char(c) => c,
                    other => other.as_i64().unwrap_or(0) as u8,
                };
                (String::new(), vec![c])
            }
            b's' => {
                numeric = false;
                let Value::Str(s) = arg else {
                    return Err(format!("`printf` conversion `{spec}` needs a string"));
                };
                let n = precision.unwrap_or(s.len()).min(s.len());
                (String::new(), s[..n].to_vec())
            }
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' => {
                let v = real_arg(arg, &spec)?;
                let prec = precision.unwrap_or(6);
                let upper = conv.is_ascii_uppercase();
                let text = match conv {
                    b'f' | b'F' => {
                        let t = format_f(v.abs(), prec);
                        if alt && prec == 0 { t + "." } else { t }
                    }
                    b'e' | b'E' => format_e(v.abs(), prec, upper),
                    b'g' | b'G' => format_g(v.abs(), prec, alt, upper),
                    _ => format_a(v.abs(), precision, alt, upper),
                };
                let text = if conv == b'F' { text.to_uppercase() } else { text };
                if !v.is_finite() {
                    zero = false;
                }
                // A NaN's sign prints as glibc's `printf` does (`-nan`), and as `print`.
                (sign_text(v.is_sign_negative(), plus, space), text.into_bytes())
            }
            other => return Err(format!("`printf` does not know the conversion `%{}`", other as char)),
        };
        let total = sign.len() + body.len();
        let w = width.unwrap_or(0);
        let fill = w.saturating_sub(total);
        if left {
            out.extend_from_slice(sign.as_bytes());
            out.extend_from_slice(&body);
            out.extend(std::iter::repeat_n(b' ', fill));
        } else if zero
            && numeric
            && (precision.is_none() || matches!(conv, b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A'))
        {
            out.extend_from_slice(sign.as_bytes());
            // Zero padding goes after any 0x prefix.
            let (prefix, digits) = if body.starts_with(b"0x") || body.starts_with(b"0X") {
                body.split_at(2)
            } else {
                (&body[..0], &body[..])
            };
            out.extend_from_slice(prefix);
            out.extend(std::iter::repeat_n(b'0', fill));
            out.extend_from_slice(digits);
        } else {
            out.extend(std::iter::repeat_n(b' ', fill));
            out.extend_from_slice(sign.as_bytes());
            out.extend_from_slice(&body);
        }
    }
    Ok(out)
}

fn sign_text(negative: bool, plus: bool, space: bool) -> String {
    if negative {
        "-".into()
    } else if plus {
        "+".into()
    } else if space {
        " ".into()
    } else {
        String::new()
    }
}

fn pad_digits(mag: String, precision: Option<usize>) -> String {
    match precision {
        Some(0) if mag == "0" => String::new(),
        Some(p) if mag.len() < p => format!("{}{mag}", "0".repeat(p - mag.len())),
        _ => mag,
    }
}

fn int_arg(arg: &Value, spec: &str) -> Result<Scalar, String> {
    match arg.as_scalar() {
        Some(s @ (Scalar::Int(..) | Scalar::Bool(_) | Scalar::Char(_))) => Ok(s),
        Some(other) => Err(format!("`printf` conversion `{spec}` needs an integer, got {}", other.base())),
        None => Err(format!("`printf` conversion `{spec}` needs a scalar")),
    }
}

fn real_arg(arg: &Value, spec: &str) -> Result<f64, String> {
    match arg.as_scalar() {
        Some(Scalar::Double(d)) => Ok(d),
        Some(Scalar::Float(f)) => Ok(f as f64),
        Some(other) => Err(format!("`printf` conversion `{spec}` needs a float or double, got {}", other.base())),
        None => Err(format!("`printf` conversion `{spec}` needs a scalar")),
    }
}

/// The bits of an integer as C would pass it to an unsigned conversion.
fn unsigned_bits(s: Scalar) -> u64 {
    match s {
        Scalar::Int(t, v) => match t {
            BaseType::Long | BaseType::LongLong | BaseType::ULong | BaseType::ULongLong => v as u64,
            // Smaller types are promoted to (unsigned) int.
            _ => v as i32 as u32 as u64,
        },
        Scalar::Bool(b) => b as u64,
        Scalar::Char(c) => c as i8 as i32 as u32 as u64,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::value::{Array, Elems};
    use std::sync::Arc;

    fn ints(shape: &[usize]) -> Value {
        let n: usize = shape.iter().product();
        Value::Array(Arc::new(Array {
            shape: shape.to_vec(),
            elems: Elems::Int(BaseType::Int, (0..n as i64).collect()),
        }))
    }

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn print_layouts_match_sac2c() {
        assert_eq!(text(print_array(&ints(&[5]))), "Dimension:  1\nShape    : <  5>\n< 0  1  2  3  4 > \n");
        assert_eq!(
            text(print_array(&ints(&[3, 4]))),
            "Dimension:  2\nShape    : <  3,  4>\n| 0  1  2  3 | \n| 4  5  6  7 | \n| 8  9 10 11 | \n\n"
        );
        assert_eq!(
            text(print_array(&ints(&[2, 2, 3]))),
            "Dimension:  3\nShape    : <  2,  2,  3>\n< 0  1  2 > < 3  4  5 > \n< 6  7  8 > < 9 10 11 > \n\n"
        );
        assert_eq!(
            text(print_array(&ints(&[2, 2, 2, 2]))),
            "Dimension:  4\nShape    : <  2,  2,  2,  2>\n| 0  1 |  | 4  5 |  \n| 2  3 |  | 6  7 |  \n\n| 8  9 |  |12 13 |  \n|10 11 |  |14 15 |  \n\n\n"
        );
        assert_eq!(text(print_array(&ints(&[3, 0]))), "Dimension:  2\nShape    : <  3,  0>\n<>\n");
    }

    #[test]
    fn scalar_print() {
        assert_eq!(text(print_scalar(Scalar::int(42))), "Dimension:  0\nShape    : < >\n 42\n");
        assert_eq!(text(print_scalar(Scalar::Double(3.0))), "Dimension:  0\nShape    : < >\n 3\n");
        assert_eq!(text(print_scalar(Scalar::Bool(true))), "Dimension:  0\nShape    : < >\n true\n");
    }

    #[test]
    fn c_formats() {
        assert_eq!(format_e(1.5, 6, false), "1.500000e+00");
        assert_eq!(format_g(1e20, 6, false, false), "1e+20");
        assert_eq!(format_g(0.0001, 6, false, false), "0.0001");
        assert_eq!(format_g(123456789.0, 6, false, false), "1.23457e+08");
        assert_eq!(format_g(2.46813579, 6, false, false), "2.46814");
        let args =
            [Value::Scalar(Scalar::int(-42)), Value::Scalar(Scalar::Double(2.5)), Value::Str(Arc::from(&b"hi"[..]))];
        assert_eq!(
            text(
                printf(
                    b"%5d|%-6.2f|%s|%%|%05d",
                    &[args[0].clone(), args[1].clone(), args[2].clone(), Value::Scalar(Scalar::int(7))]
                )
                .unwrap()
            ),
            "  -42|2.50  |hi|%|00007"
        );
        assert_eq!(
            text(
                printf(
                    b"%x %#o %+d %e",
                    &[
                        Value::Scalar(Scalar::int(255)),
                        Value::Scalar(Scalar::int(8)),
                        Value::Scalar(Scalar::int(3)),
                        args[1].clone()
                    ]
                )
                .unwrap()
            ),
            "ff 010 +3 2.500000e+00"
        );
        assert!(printf(b"%d", &[]).is_err());
        assert!(printf(b"%d", &[args[1].clone()]).is_err());
        let nans = [Value::Scalar(Scalar::Double(-f64::NAN)), Value::Scalar(Scalar::Double(f64::NAN))];
        assert_eq!(
            text(
                printf(b"%f %g|%+f %e", &[nans[0].clone(), nans[0].clone(), nans[1].clone(), nans[1].clone()]).unwrap()
            ),
            "-nan -nan|+nan nan"
        );
    }

    #[test]
    fn literals_read_back() {
        assert_eq!(value_literal(&ints(&[2, 2])), "[[0, 1], [2, 3]]");
        assert_eq!(value_literal(&Value::Scalar(Scalar::Double(2.0))), "2.0");
        assert_eq!(value_literal(&Value::Scalar(Scalar::Float(1.5))), "1.5f");
        assert_eq!(value_literal(&Value::Scalar(Scalar::Int(BaseType::ULong, -1))), "18446744073709551615ul");
        assert_eq!(value_literal(&ints(&[0])), "[]");
        assert_eq!(value_literal(&ints(&[0, 3])), "genarray([0, 3], 0)");
        assert_eq!(value_literal(&Value::Scalar(Scalar::Char(b'\n'))), "'\\n'");
    }
}
