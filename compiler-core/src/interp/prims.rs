//! Structural primitives: selection, modarray, reshape, concatenation, take/drop,
//! dot selection and the helpers with-loops and array literals need.

use std::sync::Arc;

use super::eval::{describe_value, shape_text};
use super::ops::{OpError, OpResult, too_large};
use super::value::{Array, Elems, Scalar, Value, row_major_offset, shape_size};
use crate::diagnostics as codes;
use crate::sema::hir::{DotKind, Prim};
use crate::syntax::ast::BaseType;

fn err(code: crate::diagnostics::Code, msg: impl Into<String>) -> OpError {
    OpError::new(code, msg)
}

fn int_vector(v: &Value, what: &str) -> OpResult<Vec<i64>> {
    match v {
        Value::Array(a) if a.shape.len() == 1 => match &a.elems {
            Elems::Int(_, x) => Ok(x.clone()),
            _ => Err(err(
                codes::RUNTIME_TYPE_MISMATCH,
                format!("{what} must be an int vector, not {}", describe_value(v)),
            )),
        },
        _ => Err(err(codes::RUNTIME_TYPE_MISMATCH, format!("{what} must be an int vector, not {}", describe_value(v)))),
    }
}

fn int_scalar(v: &Value, what: &str) -> OpResult<i64> {
    match v {
        Value::Scalar(Scalar::Int(_, x)) => Ok(*x),
        _ => Err(err(codes::RUNTIME_TYPE_MISMATCH, format!("{what} must be an int, not {}", describe_value(v)))),
    }
}

/// `n` copies of `proto`'s elements, `total` elements in all.
pub fn repeat(proto: &Value, copies: usize, total: usize) -> OpResult<Elems> {
    match proto {
        Value::Scalar(s) => Elems::filled(*s, total).map_err(too_large),
        Value::Array(a) => {
            let mut out = Elems::with_capacity(a.elems.base(), total).map_err(too_large)?;
            let n = a.elems.len();
            for _ in 0..copies {
                out.extend_range(&a.elems, 0, n);
            }
            Ok(out)
        }
        Value::Str(_) => Err(err(codes::RUNTIME_TYPE_MISMATCH, "strings cannot be array elements")),
    }
}

/// `[a, b, c]`: stacks values of equal shape and type along a new first axis.
pub fn stack(vals: Vec<Value>) -> OpResult<Value> {
    let Some(first) = vals.first() else {
        return Ok(Value::from_parts(vec![0], Elems::Int(BaseType::Int, Vec::new())));
    };
    let Some(base) = first.base() else {
        return Err(err(codes::RUNTIME_TYPE_MISMATCH, "strings cannot be array elements"));
    };
    let cell = first.shape().to_vec();
    let cell_len = first.len();
    let total = cell_len.checked_mul(vals.len()).ok_or_else(|| err(codes::ALLOCATION_TOO_LARGE, "array too large"))?;
    let mut out = Elems::with_capacity(base, total).map_err(too_large)?;
    for (k, v) in vals.iter().enumerate() {
        if v.base() != Some(base) {
            return Err(err(
                codes::RUNTIME_TYPE_MISMATCH,
                format!("array elements differ in type: element 0 is {base}, element {k} is {}", describe_value(v)),
            ));
        }
        if v.shape() != cell.as_slice() {
            return Err(err(
                codes::IRREGULAR_ARRAY,
                format!(
                    "array elements differ in shape: element 0 is {}, element {k} is {}",
                    shape_text(&cell),
                    shape_text(v.shape())
                ),
            ));
        }
        match v {
            Value::Scalar(s) => {
                out.push(*s);
            }
            Value::Array(a) => {
                out.extend_range(&a.elems, 0, a.elems.len());
            }
            Value::Str(_) => {}
        }
    }
    let mut shape = vec![vals.len()];
    shape.extend(cell);
    Ok(Value::from_parts(shape, out))
}

/// Whether `index` is a valid prefix index into an array of shape `shape`.
pub fn check_index(index: &[i64], shape: &[usize]) -> OpResult<usize> {
    if index.len() > shape.len() {
        return Err(err(
            codes::INDEX_OUT_OF_BOUNDS,
            format!(
                "index {} has more components than the array of shape {} has axes",
                fmt_index(index),
                shape_text(shape)
            ),
        ));
    }
    row_major_offset(index, shape).ok_or_else(|| {
        err(
            codes::INDEX_OUT_OF_BOUNDS,
            format!("index {} is out of bounds for shape {}", fmt_index(index), shape_text(shape)),
        )
    })
}

/// An index argument: an int scalar (one component) or an int vector.
pub fn index_value(v: &Value) -> OpResult<Vec<i64>> {
    match v {
        Value::Scalar(Scalar::Int(_, i)) => Ok(vec![*i]),
        other => int_vector(other, "the index"),
    }
}

/// The sub-array of `a` at the prefix index `index`.
pub fn select(index: &[i64], a: &Value) -> OpResult<Value> {
    let shape = a.shape();
    let offset = check_index(index, shape)?;
    let cell_shape = shape[index.len()..].to_vec();
    let cell_len = shape_size(&cell_shape).unwrap_or(0);
    match a {
        Value::Scalar(s) => Ok(Value::Scalar(*s)),
        Value::Array(arr) => {
            if cell_shape.is_empty() {
                return arr
                    .elems
                    .get(offset)
                    .map(Value::Scalar)
                    .ok_or_else(|| err(codes::INTERNAL_ERROR, "selection out of range"));
            }
            if index.is_empty() {
                return Ok(a.clone());
            }
            let mut out = Elems::with_capacity(arr.elems.base(), cell_len).map_err(too_large)?;
            out.extend_range(&arr.elems, offset * cell_len, cell_len);
            Ok(Value::Array(Arc::new(Array { shape: cell_shape, elems: out })))
        }
        Value::Str(_) => Err(err(codes::RUNTIME_TYPE_MISMATCH, "cannot select from a string")),
    }
}

fn fmt_index(index: &[i64]) -> String {
    format!("[{}]", index.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(","))
}

/// A copy of `a` with the sub-array at `index` replaced by `v`.
pub fn modarray(a: &Value, index: &[i64], v: &Value) -> OpResult<Value> {
    let shape = a.shape().to_vec();
    let offset = check_index(index, &shape)?;
    let cell_shape = &shape[index.len()..];
    if v.shape() != cell_shape {
        return Err(err(
            codes::SHAPE_MISMATCH,
            format!(
                "cannot put a value of shape {} where the array has cells of shape {}",
                shape_text(v.shape()),
                shape_text(cell_shape)
            ),
        ));
    }
    if v.base() != a.base() {
        return Err(err(
            codes::RUNTIME_TYPE_MISMATCH,
            format!("cannot put a {} into an array of {}", describe_value(v), describe_value(a)),
        ));
    }
    if shape.is_empty() {
        return Ok(v.clone());
    }
    let cell_len = v.len();
    let Value::Array(arr) = a else { return Ok(v.clone()) };
    let mut elems = arr.elems.clone();
    let ok = match v {
        Value::Scalar(s) => elems.set(offset * cell_len, *s),
        Value::Array(c) => elems.copy_range(offset * cell_len, &c.elems, 0, cell_len),
        Value::Str(_) => false,
    };
    if !ok {
        return Err(err(codes::INTERNAL_ERROR, "modarray write failed"));
    }
    Ok(Value::from_parts(shape, elems))
}

pub fn reshape(shp: &[i64], a: &Value) -> OpResult<Value> {
    if let Some(e) = reshape_error(shp, a.shape()) {
        return Err(e);
    }
    let shape: Vec<usize> = shp.iter().map(|&d| d as usize).collect();
    let elems = a.to_elems().ok_or_else(|| err(codes::RUNTIME_TYPE_MISMATCH, "cannot reshape a string"))?;
    Ok(Value::from_parts(shape, elems))
}

/// Why an array of shape `from` cannot be reshaped to `shp`, if it cannot: a
/// negative extent, more elements than a size holds, or another number of
/// elements. Shared by `reshape`, the IR's `check reshape` and the runtime.
pub fn reshape_error(shp: &[i64], from: &[usize]) -> Option<OpError> {
    if let Some(d) = shp.iter().find(|&&d| d < 0) {
        return Some(err(codes::BAD_RESHAPE, format!("reshape to a negative extent {d}")));
    }
    let shape: Vec<usize> = shp.iter().map(|&d| d as usize).collect();
    let Some(n) = shape_size(&shape) else {
        return Some(err(codes::ALLOCATION_TOO_LARGE, "reshape size overflows"));
    };
    let len = from.iter().product::<usize>();
    (n != len).then(|| {
        err(
            codes::BAD_RESHAPE,
            format!(
                "cannot reshape {len} elements (shape {}) to shape {} ({n} elements)",
                shape_text(from),
                shape_text(&shape)
            ),
        )
    })
}

pub fn structural(prim: &Prim, args: Vec<Value>) -> OpResult<Value> {
    match prim {
        Prim::Dim => Ok(Value::Scalar(Scalar::int(args[0].rank() as i64))),
        Prim::Shape => Ok(Value::int_vector(&args[0].shape().iter().map(|&d| d as i64).collect::<Vec<_>>())),
        Prim::Size => Ok(Value::Scalar(Scalar::int(args[0].len() as i64))),
        Prim::Sel => select(&index_value(&args[0])?, &args[1]),
        Prim::Modarray => modarray(&args[0], &index_value(&args[1])?, &args[2]),
        Prim::Reshape => reshape(&int_vector(&args[0], "the new shape")?, &args[1]),
        Prim::Genarray => {
            let shp = int_vector(&args[0], "the shape")?;
            if let Some(d) = shp.iter().find(|&&d| d < 0) {
                return Err(err(codes::INVALID_ARGUMENT, format!("genarray shape has a negative extent {d}")));
            }
            let mut shape: Vec<usize> = shp.iter().map(|&d| d as usize).collect();
            let copies = shape_size(&shape).ok_or_else(|| err(codes::ALLOCATION_TOO_LARGE, "array size overflows"))?;
            shape.extend_from_slice(args[1].shape());
            let total = copies
                .checked_mul(args[1].len())
                .ok_or_else(|| err(codes::ALLOCATION_TOO_LARGE, "array size overflows"))?;
            Ok(Value::from_parts(shape, repeat(&args[1], copies, total)?))
        }
        Prim::Cat => {
            let (a, b) = (&args[0], &args[1]);
            if a.rank() == 0 || b.rank() == 0 || a.shape()[1..] != b.shape()[1..] || a.base() != b.base() {
                return Err(err(
                    codes::SHAPE_MISMATCH,
                    format!("cannot concatenate {} and {}", describe_value(a), describe_value(b)),
                ));
            }
            let mut shape = a.shape().to_vec();
            shape[0] += b.shape()[0];
            let mut elems = a.to_elems().ok_or_else(|| err(codes::INTERNAL_ERROR, "cat"))?;
            let other = b.to_elems().ok_or_else(|| err(codes::INTERNAL_ERROR, "cat"))?;
            elems.extend_range(&other, 0, other.len());
            Ok(Value::from_parts(shape, elems))
        }
        Prim::Take | Prim::Drop => {
            let n = int_scalar(&args[0], "the count")?;
            let v = &args[1];
            if v.rank() != 1 {
                return Err(err(
                    codes::INVALID_ARGUMENT,
                    format!("take/drop needs a vector, not {}", describe_value(v)),
                ));
            }
            let len = v.shape()[0] as i64;
            if n.abs() > len {
                return Err(err(
                    codes::INVALID_ARGUMENT,
                    format!("cannot take or drop {n} elements of a vector of {len}"),
                ));
            }
            let (from, count) = match (prim, n >= 0) {
                (Prim::Take, true) => (0, n),
                (Prim::Take, false) => (len + n, -n),
                (_, true) => (n, len - n),
                (_, false) => (0, len + n),
            };
            let src = v.to_elems().ok_or_else(|| err(codes::INTERNAL_ERROR, "take"))?;
            let mut out = Elems::with_capacity(src.base(), count as usize).map_err(too_large)?;
            out.extend_range(&src, from as usize, count as usize);
            Ok(Value::from_parts(vec![count as usize], out))
        }
        Prim::Hide(_) => Ok(args.into_iter().nth(1).expect("two arguments")),
        Prim::Vect2Offset => {
            // The linear formula, unchecked: index vector elimination also takes
            // offsets of vectors that are not indices (`iv + c` = `off(iv) + off(c)`).
            let shp = int_vector(&args[0], "the shape")?;
            let iv = int_vector(&args[1], "the index")?;
            if iv.len() != shp.len() {
                return Err(err(codes::INDEX_OUT_OF_BOUNDS, "the index and the shape have different lengths"));
            }
            let mut off: i64 = 0;
            for (i, d) in iv.iter().zip(&shp) {
                off = off.wrapping_mul(*d).wrapping_add(*i);
            }
            Ok(Value::Scalar(Scalar::int(off)))
        }
        Prim::IdxSel => {
            let off = int_scalar(&args[0], "the offset")?;
            let a = &args[1];
            usize::try_from(off).ok().and_then(|o| a.elem(o)).map(Value::Scalar).ok_or_else(|| {
                err(codes::INDEX_OUT_OF_BOUNDS, format!("offset {off} is outside an array of {} elements", a.len()))
            })
        }
        Prim::IdxModarray => {
            let off = int_scalar(&args[1], "the offset")?;
            let a = &args[0];
            let Value::Scalar(v) = &args[2] else {
                return Err(err(codes::SHAPE_MISMATCH, "_idx_modarray_ writes a scalar"));
            };
            let Some(mut elems) = a.to_elems() else {
                return Err(err(codes::RUNTIME_TYPE_MISMATCH, "cannot modify a string"));
            };
            let ok = usize::try_from(off).ok().is_some_and(|o| elems.set(o, *v));
            if !ok {
                return Err(err(
                    codes::INDEX_OUT_OF_BOUNDS,
                    format!("offset {off} is outside an array of {} elements (or the types differ)", a.len()),
                ));
            }
            Ok(Value::from_parts(a.shape().to_vec(), elems))
        }
        Prim::MatMul => {
            let frame = int_vector(&args[2], "the frame")?;
            let upper = int_vector(&args[3], "the fold's bound")?;
            matmul(&args[0], &args[1], &frame, &upper)
        }
        Prim::All => match &args[0] {
            Value::Scalar(Scalar::Bool(b)) => Ok(Value::Scalar(Scalar::Bool(*b))),
            Value::Array(a) => match &a.elems {
                Elems::Bool(v) => Ok(Value::Scalar(Scalar::Bool(v.iter().all(|b| *b)))),
                _ => Err(err(codes::RUNTIME_TYPE_MISMATCH, "_all_V_ needs a bool vector")),
            },
            _ => Err(err(codes::RUNTIME_TYPE_MISMATCH, "_all_V_ needs a bool vector")),
        },
        Prim::DotSelect(kinds) => dot_select(kinds, &args[0], &args[1..]),
        Prim::FrameArrange(kinds) => frame_arrange(kinds, &args[0]),
        Prim::MinVectors | Prim::MaxVectors => {
            let mut acc = int_vector(&args[0], "an inferred bound")?;
            for v in &args[1..] {
                let x = int_vector(v, "an inferred bound")?;
                if x.len() != acc.len() {
                    return Err(err(
                        codes::SHAPE_MISMATCH,
                        "the parts of this tensor comprehension have frames of different rank",
                    ));
                }
                for (a, b) in acc.iter_mut().zip(x) {
                    *a = if *prim == Prim::MinVectors { (*a).min(b) } else { (*a).max(b) };
                }
            }
            Ok(Value::int_vector(&acc))
        }
        other => Err(err(codes::INTERNAL_ERROR, format!("primitive {other:?} evaluated structurally"))),
    }
}

/// Copies `src` into a new array whose axis `k` is `src`'s axis `perm[k]`.
/// `c[i, j] = fold(+, 0.0, a[i, k] * b[k, j])` for `[i, j] < frame`, `k < upper[0]`:
/// each fold from 0.0 in the order of `k`, a multiplication then an addition.
fn matmul(a: &Value, b: &Value, frame: &[i64], upper: &[i64]) -> OpResult<Value> {
    let (Value::Array(x), Value::Array(y)) = (a, b) else {
        return Err(err(codes::RUNTIME_TYPE_MISMATCH, "a matrix product needs two matrices"));
    };
    let (Elems::Double(xs), Elems::Double(ys)) = (&x.elems, &y.elems) else {
        return Err(err(codes::RUNTIME_TYPE_MISMATCH, "a matrix product needs two double matrices"));
    };
    let (&[m, n], &[l]) = (frame, upper) else {
        return Err(err(codes::SHAPE_MISMATCH, "a matrix product needs a frame of two and a bound of one"));
    };
    let (&[ar, ac], &[br, bc]) = (x.shape.as_slice(), y.shape.as_slice()) else {
        return Err(err(codes::SHAPE_MISMATCH, "a matrix product needs two matrices"));
    };
    let dims = |v: i64| usize::try_from(v).unwrap_or(0);
    let (m, n, l) = (dims(m), dims(n), dims(l));
    if (m > 0 && n > 0 && l > 0) && (m > ar || l > ac || l > br || n > bc) {
        return Err(err(
            codes::INDEX_OUT_OF_BOUNDS,
            format!("a {m}x{l} by {l}x{n} product reads outside a [{ar},{ac}] or a [{br},{bc}] matrix"),
        ));
    }
    let size =
        m.checked_mul(n).ok_or_else(|| err(codes::INVALID_ARGUMENT, "a matrix product's result is too large"))?;
    let Elems::Double(mut c) = Elems::with_capacity(BaseType::Double, size).map_err(too_large)? else {
        return Err(err(codes::INTERNAL_ERROR, "a matrix product's buffer"));
    };
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for k in 0..l {
                s += xs[i * ac + k] * ys[k * bc + j];
            }
            c.push(s);
        }
    }
    Ok(Value::from_parts(vec![m, n], Elems::Double(c)))
}

fn permute(src: &Value, perm: &[usize]) -> OpResult<Value> {
    let in_shape = src.shape().to_vec();
    let out_shape: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
    let n = src.len();
    let elems = src.to_elems().ok_or_else(|| err(codes::INTERNAL_ERROR, "permute"))?;
    let mut out = Elems::with_capacity(elems.base(), n).map_err(too_large)?;
    let mut idx = vec![0usize; out_shape.len()];
    let mut in_idx = vec![0i64; in_shape.len()];
    for _ in 0..n {
        for (k, &p) in perm.iter().enumerate() {
            in_idx[p] = idx[k] as i64;
        }
        let off = row_major_offset(&in_idx, &in_shape).ok_or_else(|| err(codes::INTERNAL_ERROR, "permute"))?;
        out.push(elems.get(off).ok_or_else(|| err(codes::INTERNAL_ERROR, "permute"))?);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(Value::from_parts(out_shape, out))
}

/// `a[[., i, ...]]`: fixes the indexed axes, keeps the others in order.
fn dot_select(kinds: &[DotKind], a: &Value, indices: &[Value]) -> OpResult<Value> {
    let rank = a.rank();
    let consumed = kinds.iter().filter(|k| **k != DotKind::Ellipsis).count();
    let has_ellipsis = kinds.contains(&DotKind::Ellipsis);
    if consumed > rank {
        return Err(err(
            codes::INDEX_OUT_OF_BOUNDS,
            format!("selection has {consumed} components but the array has {rank} axes"),
        ));
    }
    // Per axis of `a`: Some(index) or None (free).
    let mut axes: Vec<Option<i64>> = Vec::with_capacity(rank);
    let mut next_index = indices.iter();
    for k in kinds {
        match k {
            DotKind::Index => {
                let v = next_index.next().ok_or_else(|| err(codes::INTERNAL_ERROR, "dot selection"))?;
                axes.push(Some(int_scalar(v, "a selection component")?));
            }
            DotKind::Dot => axes.push(None),
            DotKind::Ellipsis => axes.extend(std::iter::repeat_n(None, rank - consumed)),
        }
    }
    if !has_ellipsis {
        axes.extend(std::iter::repeat_n(None, rank - consumed));
    }
    let shape = a.shape();
    for (d, ax) in axes.iter().enumerate() {
        if let Some(i) = ax
            && (*i < 0 || *i as usize >= shape[d])
        {
            return Err(err(
                codes::INDEX_OUT_OF_BOUNDS,
                format!("index {i} on axis {d} is out of bounds for shape {}", shape_text(shape)),
            ));
        }
    }
    let free: Vec<usize> = (0..rank).filter(|d| axes[*d].is_none()).collect();
    let out_shape: Vec<usize> = free.iter().map(|&d| shape[d]).collect();
    let n = shape_size(&out_shape).unwrap_or(0);
    let base = a.base().ok_or_else(|| err(codes::RUNTIME_TYPE_MISMATCH, "cannot select from a string"))?;
    let mut out = Elems::with_capacity(base, n).map_err(too_large)?;
    let mut idx = vec![0usize; free.len()];
    let mut full: Vec<i64> = axes.iter().map(|a| a.unwrap_or(0)).collect();
    for _ in 0..n {
        for (k, &d) in free.iter().enumerate() {
            full[d] = idx[k] as i64;
        }
        let off = row_major_offset(&full, shape).ok_or_else(|| err(codes::INTERNAL_ERROR, "dot selection"))?;
        out.push(a.elem(off).ok_or_else(|| err(codes::INTERNAL_ERROR, "dot selection"))?);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(Value::from_parts(out_shape, out))
}

/// Moves the cell axes of `tmp` (frame axes first) to where the frame pattern has
/// `.` and `...`.
fn frame_arrange(kinds: &[DotKind], tmp: &Value) -> OpResult<Value> {
    let frame_rank = kinds.iter().filter(|k| **k == DotKind::Index).count();
    let rank = tmp.rank();
    if rank < frame_rank {
        return Err(err(codes::INTERNAL_ERROR, "frame rank exceeds array rank"));
    }
    let cell_rank = rank - frame_rank;
    let dots = kinds.iter().filter(|k| **k == DotKind::Dot).count();
    if dots > cell_rank {
        return Err(err(
            codes::SHAPE_MISMATCH,
            format!("the frame pattern has {dots} `.` but the cells have only {cell_rank} axes"),
        ));
    }
    let mut perm = Vec::with_capacity(rank);
    let (mut next_frame, mut next_cell) = (0usize, frame_rank);
    for k in kinds {
        match k {
            DotKind::Index => {
                perm.push(next_frame);
                next_frame += 1;
            }
            DotKind::Dot => {
                perm.push(next_cell);
                next_cell += 1;
            }
            DotKind::Ellipsis => {
                for _ in 0..(cell_rank - dots) {
                    perm.push(next_cell);
                    next_cell += 1;
                }
            }
        }
    }
    while next_cell < rank {
        perm.push(next_cell);
        next_cell += 1;
    }
    permute(tmp, &perm)
}
