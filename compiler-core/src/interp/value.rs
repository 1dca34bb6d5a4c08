//! Run-time values of the reference interpreter.
//!
//! A value is a scalar, an array (rank ≥ 1, shared by reference count, copied on
//! write), or a string (only for `printf` formats and the like). Rank-0 arrays never
//! exist: they are always [`Value::Scalar`], which keeps scalar code allocation-free.
//!
//! Integers of every width are kept as `i64` holding the *normalised* value of their
//! type (sign- or zero-extended from the type's width; `ulong`/`ulonglong` as the bit
//! pattern), so arithmetic can work in `i64` and wrap back with [`wrap_int`].

use std::sync::Arc;

use crate::syntax::ast::BaseType;

/// One element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Char(u8),
    Int(BaseType, i64),
    Float(f32),
    Double(f64),
}

impl Scalar {
    pub fn base(self) -> BaseType {
        match self {
            Scalar::Bool(_) => BaseType::Bool,
            Scalar::Char(_) => BaseType::Char,
            Scalar::Int(t, _) => t,
            Scalar::Float(_) => BaseType::Float,
            Scalar::Double(_) => BaseType::Double,
        }
    }

    pub fn int(v: i64) -> Scalar {
        Scalar::Int(BaseType::Int, wrap_int(BaseType::Int, v))
    }

    /// The value as a (wide) signed integer, for indices and shapes.
    pub fn as_i64(self) -> Option<i64> {
        match self {
            Scalar::Int(_, v) => Some(v),
            Scalar::Bool(b) => Some(b as i64),
            Scalar::Char(c) => Some(c as i64),
            _ => None,
        }
    }

    /// Zero (or `false`, or `' '` for char, as SaC's `zero`) of a base type.
    pub fn zero(base: BaseType) -> Scalar {
        match base {
            BaseType::Bool => Scalar::Bool(false),
            BaseType::Char => Scalar::Char(0),
            BaseType::Float => Scalar::Float(0.0),
            BaseType::Double => Scalar::Double(0.0),
            t => Scalar::Int(t, 0),
        }
    }

    /// Bit-for-bit equality (so `NaN == NaN` and `0.0 != -0.0`), used by tests and
    /// the `foldfix` fix-point check.
    pub fn identical(self, other: Scalar) -> bool {
        match (self, other) {
            (Scalar::Float(a), Scalar::Float(b)) => a.to_bits() == b.to_bits(),
            (Scalar::Double(a), Scalar::Double(b)) => a.to_bits() == b.to_bits(),
            (a, b) => a == b,
        }
    }
}

/// Normalises `v` to the range of integer type `ty` (wrapping, as C does in practice).
pub fn wrap_int(ty: BaseType, v: i64) -> i64 {
    match ty {
        BaseType::Byte => v as i8 as i64,
        BaseType::Short => v as i16 as i64,
        BaseType::Int => v as i32 as i64,
        BaseType::UByte => v as u8 as i64,
        BaseType::UShort => v as u16 as i64,
        BaseType::UInt => v as u32 as i64,
        _ => v,
    }
}

/// Whether the integer type is unsigned and 64 bits wide (its `i64` is a bit pattern).
pub fn is_u64(ty: BaseType) -> bool {
    matches!(ty, BaseType::ULong | BaseType::ULongLong)
}

/// Elements of an array, stored by base type.
#[derive(Clone, Debug, PartialEq)]
pub enum Elems {
    Bool(Vec<bool>),
    Char(Vec<u8>),
    Int(BaseType, Vec<i64>),
    Float(Vec<f32>),
    Double(Vec<f64>),
}

/// Why an allocation was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooLarge {
    pub elements: Option<usize>,
}

/// The most elements one array may have by default (2 GiB of `f64`); beyond this
/// the interpreter reports an error instead of asking the allocator.
pub const MAX_ELEMENTS: usize = 1 << 28;

thread_local! {
    /// The limit in force on this thread (set per run from `RunOptions`).
    static ELEMENT_LIMIT: std::cell::Cell<usize> = const { std::cell::Cell::new(MAX_ELEMENTS) };
}

/// Runs `f` with at most `limit` elements per array on this thread.
pub fn with_element_limit<T>(limit: usize, f: impl FnOnce() -> T) -> T {
    let previous = ELEMENT_LIMIT.with(|l| l.replace(limit));
    let result = f();
    ELEMENT_LIMIT.with(|l| l.set(previous));
    result
}

pub fn element_limit() -> usize {
    ELEMENT_LIMIT.with(|l| l.get())
}

fn reserve<T>(n: usize) -> Result<Vec<T>, TooLarge> {
    if n > element_limit() {
        return Err(TooLarge { elements: Some(n) });
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| TooLarge { elements: Some(n) })?;
    Ok(v)
}

impl Elems {
    /// `n` copies of `fill`.
    pub fn filled(fill: Scalar, n: usize) -> Result<Elems, TooLarge> {
        Ok(match fill {
            Scalar::Bool(b) => {
                let mut v = reserve(n)?;
                v.resize(n, b);
                Elems::Bool(v)
            }
            Scalar::Char(c) => {
                let mut v = reserve(n)?;
                v.resize(n, c);
                Elems::Char(v)
            }
            Scalar::Int(t, x) => {
                let mut v = reserve(n)?;
                v.resize(n, x);
                Elems::Int(t, v)
            }
            Scalar::Float(x) => {
                let mut v = reserve(n)?;
                v.resize(n, x);
                Elems::Float(v)
            }
            Scalar::Double(x) => {
                let mut v = reserve(n)?;
                v.resize(n, x);
                Elems::Double(v)
            }
        })
    }

    /// An empty buffer of the given base type with room for `n` elements.
    pub fn with_capacity(base: BaseType, n: usize) -> Result<Elems, TooLarge> {
        Ok(match base {
            BaseType::Bool => Elems::Bool(reserve(n)?),
            BaseType::Char => Elems::Char(reserve(n)?),
            BaseType::Float => Elems::Float(reserve(n)?),
            BaseType::Double => Elems::Double(reserve(n)?),
            t => Elems::Int(t, reserve(n)?),
        })
    }

    pub fn len(&self) -> usize {
        match self {
            Elems::Bool(v) => v.len(),
            Elems::Char(v) => v.len(),
            Elems::Int(_, v) => v.len(),
            Elems::Float(v) => v.len(),
            Elems::Double(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn base(&self) -> BaseType {
        match self {
            Elems::Bool(_) => BaseType::Bool,
            Elems::Char(_) => BaseType::Char,
            Elems::Int(t, _) => *t,
            Elems::Float(_) => BaseType::Float,
            Elems::Double(_) => BaseType::Double,
        }
    }

    /// Element `i`; `None` when out of range.
    pub fn get(&self, i: usize) -> Option<Scalar> {
        Some(match self {
            Elems::Bool(v) => Scalar::Bool(*v.get(i)?),
            Elems::Char(v) => Scalar::Char(*v.get(i)?),
            Elems::Int(t, v) => Scalar::Int(*t, *v.get(i)?),
            Elems::Float(v) => Scalar::Float(*v.get(i)?),
            Elems::Double(v) => Scalar::Double(*v.get(i)?),
        })
    }

    /// Appends `s`; false if its base type differs.
    pub fn push(&mut self, s: Scalar) -> bool {
        match (self, s) {
            (Elems::Bool(v), Scalar::Bool(x)) => v.push(x),
            (Elems::Char(v), Scalar::Char(x)) => v.push(x),
            (Elems::Int(t, v), Scalar::Int(u, x)) if *t == u => v.push(x),
            (Elems::Float(v), Scalar::Float(x)) => v.push(x),
            (Elems::Double(v), Scalar::Double(x)) => v.push(x),
            _ => return false,
        }
        true
    }

    /// Overwrites element `i` with `s`; false if the base type differs or `i` is out of range.
    pub fn set(&mut self, i: usize, s: Scalar) -> bool {
        match (self, s) {
            (Elems::Bool(v), Scalar::Bool(x)) if i < v.len() => v[i] = x,
            (Elems::Char(v), Scalar::Char(x)) if i < v.len() => v[i] = x,
            (Elems::Int(t, v), Scalar::Int(u, x)) if *t == u && i < v.len() => v[i] = x,
            (Elems::Float(v), Scalar::Float(x)) if i < v.len() => v[i] = x,
            (Elems::Double(v), Scalar::Double(x)) if i < v.len() => v[i] = x,
            _ => return false,
        }
        true
    }

    /// Copies `src[from..from+n]` into `self[to..to+n]`; false on type mismatch.
    pub fn copy_range(&mut self, to: usize, src: &Elems, from: usize, n: usize) -> bool {
        match (self, src) {
            (Elems::Bool(d), Elems::Bool(s)) => d[to..to + n].copy_from_slice(&s[from..from + n]),
            (Elems::Char(d), Elems::Char(s)) => d[to..to + n].copy_from_slice(&s[from..from + n]),
            (Elems::Int(a, d), Elems::Int(b, s)) if a == b => d[to..to + n].copy_from_slice(&s[from..from + n]),
            (Elems::Float(d), Elems::Float(s)) => d[to..to + n].copy_from_slice(&s[from..from + n]),
            (Elems::Double(d), Elems::Double(s)) => d[to..to + n].copy_from_slice(&s[from..from + n]),
            _ => return false,
        }
        true
    }

    /// Appends `src[from..from+n]`; false on type mismatch.
    pub fn extend_range(&mut self, src: &Elems, from: usize, n: usize) -> bool {
        match (self, src) {
            (Elems::Bool(d), Elems::Bool(s)) => d.extend_from_slice(&s[from..from + n]),
            (Elems::Char(d), Elems::Char(s)) => d.extend_from_slice(&s[from..from + n]),
            (Elems::Int(a, d), Elems::Int(b, s)) if a == b => d.extend_from_slice(&s[from..from + n]),
            (Elems::Float(d), Elems::Float(s)) => d.extend_from_slice(&s[from..from + n]),
            (Elems::Double(d), Elems::Double(s)) => d.extend_from_slice(&s[from..from + n]),
            _ => return false,
        }
        true
    }
}

/// An array of rank ≥ 1.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub elems: Elems,
}

/// A value. Arrays and strings are shared, atomically counted: IR constants
/// are values, and code generation reads one IR module from several threads.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Scalar(Scalar),
    Array(Arc<Array>),
    Str(Arc<[u8]>),
}

impl From<Scalar> for Value {
    fn from(s: Scalar) -> Value {
        Value::Scalar(s)
    }
}

/// Product of extents, or `None` on overflow.
pub fn shape_size(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Value {
    /// Builds a value from a shape and elements; rank 0 becomes a scalar.
    /// The caller guarantees `elems.len() == prod(shape)`.
    pub fn from_parts(shape: Vec<usize>, elems: Elems) -> Value {
        if shape.is_empty()
            && let Some(s) = elems.get(0)
        {
            return Value::Scalar(s);
        }
        Value::Array(Arc::new(Array { shape, elems }))
    }

    pub fn int_vector(v: &[i64]) -> Value {
        Value::from_parts(
            vec![v.len()],
            Elems::Int(BaseType::Int, v.iter().map(|&x| wrap_int(BaseType::Int, x)).collect()),
        )
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            Value::Array(a) => &a.shape,
            _ => &[],
        }
    }

    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    pub fn len(&self) -> usize {
        match self {
            Value::Array(a) => a.elems.len(),
            _ => 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Base type; `None` for strings.
    pub fn base(&self) -> Option<BaseType> {
        match self {
            Value::Scalar(s) => Some(s.base()),
            Value::Array(a) => Some(a.elems.base()),
            Value::Str(_) => None,
        }
    }

    /// Element at row-major offset `i`.
    pub fn elem(&self, i: usize) -> Option<Scalar> {
        match self {
            Value::Scalar(s) if i == 0 => Some(*s),
            Value::Array(a) => a.elems.get(i),
            _ => None,
        }
    }

    pub fn as_scalar(&self) -> Option<Scalar> {
        match self {
            Value::Scalar(s) => Some(*s),
            _ => None,
        }
    }

    /// The elements as integers, if the value is an integer scalar or vector.
    pub fn as_int_vec(&self) -> Option<Vec<i64>> {
        match self {
            Value::Scalar(Scalar::Int(_, v)) => Some(vec![*v]),
            Value::Array(a) if a.shape.len() == 1 => match &a.elems {
                Elems::Int(_, v) => Some(v.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The elements as a flat buffer (a scalar gives one element).
    pub fn to_elems(&self) -> Option<Elems> {
        match self {
            Value::Scalar(s) => Elems::filled(*s, 1).ok(),
            Value::Array(a) => Some(a.elems.clone()),
            Value::Str(_) => None,
        }
    }

    /// Structural equality that compares floats bit for bit.
    pub fn identical(&self, other: &Value) -> bool {
        if self.shape() != other.shape() || self.base() != other.base() {
            return match (self, other) {
                (Value::Str(a), Value::Str(b)) => a == b,
                _ => false,
            };
        }
        (0..self.len()).all(|i| match (self.elem(i), other.elem(i)) {
            (Some(a), Some(b)) => a.identical(b),
            _ => false,
        })
    }
}

/// Row-major offset of `index` (a prefix of `shape`'s rank) in units of the cell
/// size; `None` if any component is out of bounds.
pub fn row_major_offset(index: &[i64], shape: &[usize]) -> Option<usize> {
    let mut offset = 0usize;
    for (k, &i) in index.iter().enumerate() {
        let extent = *shape.get(k)?;
        if i < 0 || i as usize >= extent {
            return None;
        }
        offset = offset * extent + i as usize;
    }
    Some(offset)
}
