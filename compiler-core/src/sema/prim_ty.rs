//! Result types of primitives: the shape rules shared by type inference and the
//! IR (which recomputes types after inlining and folding).
//!
//! [`prim_type`] returns `Ok(None)` when nothing is known, `Err` when the
//! application can never succeed (which inference reports at compile time).

use super::hir::{DotKind, Elem, Hidden, MathFn, Prim};
use super::ty::{Shape, Ty};
use crate::diagnostics::{self as codes, Code};
use crate::interp::value::Value;
use crate::syntax::ast::BaseType;

/// An application that can never succeed.
#[derive(Clone, Debug, PartialEq)]
pub struct PrimError {
    pub code: Code,
    pub message: String,
}

fn int_vector(len: Option<usize>) -> Ty {
    Ty::new(Elem::Base(BaseType::Int), len.map_or(Shape::rank(1), |n| Shape::known(&[n])))
}

fn int_scalar() -> Ty {
    Ty::new(Elem::Base(BaseType::Int), Shape::scalar())
}

/// The length of a vector type, if known.
pub fn vector_len(t: &Ty) -> Option<usize> {
    match &t.shape {
        Shape::Fixed(d) if d.len() == 1 => d[0],
        _ => None,
    }
}

fn shape_of_value(v: Option<&Value>, len: Option<usize>) -> Shape {
    match v.and_then(|v| v.as_int_vec().filter(|_| v.rank() == 1)) {
        Some(e) if e.iter().all(|&d| d >= 0) => Shape::known(&e.iter().map(|&d| d as usize).collect::<Vec<_>>()),
        _ => match len {
            Some(n) => Shape::rank(n),
            None => Shape::AtLeast(0),
        },
    }
}

/// The shape of an element-wise operation with scalar extension.
pub fn elementwise_shape(x: &Shape, y: &Shape, op: &str) -> Result<Shape, PrimError> {
    if x.is_scalar() {
        return Ok(y.clone());
    }
    if y.is_scalar() {
        return Ok(x.clone());
    }
    if x.non_scalar() && y.non_scalar() {
        return x.meet(y).ok_or_else(|| PrimError {
            code: codes::STATIC_SHAPE_ERROR,
            message: format!("`{op}` on arrays of shapes {x} and {y}"),
        });
    }
    Ok(if x.non_scalar() {
        x.clone()
    } else if y.non_scalar() {
        y.clone()
    } else {
        x.join(y)
    })
}

/// The type of `prim(args)`; `values` holds the arguments' values where known.
pub fn prim_type(prim: &Prim, args: &[Option<&Ty>], values: &[Option<&Value>]) -> Result<Option<Ty>, PrimError> {
    let a = |k: usize| args.get(k).copied().flatten();
    let val = |k: usize| values.get(k).copied().flatten();
    let type_err = |message: String| Err(PrimError { code: codes::TYPE_MISMATCH, message });
    Ok(Some(match prim {
        Prim::Bin(op) => {
            let (Some(x), Some(y)) = (a(0), a(1)) else { return Ok(None) };
            if x.elem != y.elem {
                return type_err(format!("`{}` on {x} and {y}", op.symbol()));
            }
            let elem = match x.elem {
                Elem::Base(b) if op.accepts(b) => Elem::Base(op.result_base(b)),
                Elem::Base(b) => return type_err(format!("`{}` is not defined on {b}", op.symbol())),
                Elem::String => return Ok(None),
            };
            Ty::new(elem, elementwise_shape(&x.shape, &y.shape, op.elementwise_symbol())?)
        }
        Prim::Un(op) => {
            let Some(x) = a(0) else { return Ok(None) };
            if let Elem::Base(b) = x.elem
                && !op.accepts(b)
            {
                return type_err(format!("`{}` is not defined on {b}", op.symbol()));
            }
            x.clone()
        }
        Prim::Conv(to) => Ty::new(Elem::Base(*to), a(0).map_or(Shape::AtLeast(0), |x| x.shape.clone())),
        Prim::Math(f) => {
            let Some(x) = a(0) else { return Ok(None) };
            let mut shape = x.shape.clone();
            if let Some(y) = a(1) {
                if y.elem != x.elem {
                    return type_err(format!("`{f:?}` on {x} and {y}"));
                }
                shape = elementwise_shape(&x.shape, &y.shape, "math")?;
            }
            let elem = match f {
                MathFn::IsNan | MathFn::IsInf => Elem::Base(BaseType::Bool),
                _ => x.elem,
            };
            Ty::new(elem, shape)
        }
        Prim::Dim | Prim::Size | Prim::Vect2Offset => int_scalar(),
        Prim::Shape => int_vector(a(0).and_then(|x| x.shape.rank_if_known())),
        Prim::Sel | Prim::IdxSel if matches!(prim, Prim::IdxSel) => {
            let Some(x) = a(1) else { return Ok(None) };
            Ty::new(x.elem, Shape::scalar())
        }
        Prim::Sel | Prim::IdxSel => {
            let (Some(iv), Some(arr)) = (a(0), a(1)) else { return Ok(None) };
            let k = if iv.shape.is_scalar() { Some(1) } else { vector_len(iv) };
            match (k, arr.shape.rank_if_known()) {
                (Some(k), Some(r)) if k > r => {
                    return Err(PrimError {
                        code: codes::STATIC_SHAPE_ERROR,
                        message: format!("an index of length {k} selects from an array of rank {r} ({arr})"),
                    });
                }
                (Some(k), _) => Ty::new(arr.elem, arr.shape.drop_axes(k)),
                (None, _) => Ty::new(arr.elem, Shape::AtLeast(0)),
            }
        }
        Prim::Modarray | Prim::IdxModarray => match a(0) {
            Some(x) => x.clone(),
            None => return Ok(None),
        },
        Prim::Reshape => {
            let (Some(shp), Some(x)) = (a(0), a(1)) else { return Ok(None) };
            let shape = shape_of_value(val(0), vector_len(shp));
            if let (Some(to), Some(from)) = (shape.extents(), x.shape.extents())
                && to.iter().product::<usize>() != from.iter().product::<usize>()
            {
                return Err(PrimError {
                    code: codes::STATIC_SHAPE_ERROR,
                    message: format!(
                        "cannot reshape {} elements (shape {}) to shape {}",
                        from.iter().product::<usize>(),
                        x.shape,
                        shape
                    ),
                });
            }
            Ty::new(x.elem, shape)
        }
        Prim::Genarray => {
            let (Some(shp), Some(v)) = (a(0), a(1)) else { return Ok(None) };
            Ty::new(v.elem, shape_of_value(val(0), vector_len(shp)).concat(&v.shape))
        }
        Prim::MatMul => {
            let Some(shp) = a(2) else { return Ok(None) };
            Ty::new(Elem::Base(BaseType::Double), shape_of_value(val(2), vector_len(shp)))
        }
        Prim::Cat => {
            let (Some(x), Some(y)) = (a(0), a(1)) else { return Ok(None) };
            let shape = match (&x.shape, &y.shape) {
                (Shape::Fixed(p), Shape::Fixed(q)) if p.len() == q.len() && !p.is_empty() => {
                    let first = match (p[0], q[0]) {
                        (Some(m), Some(n)) => Some(m + n),
                        _ => None,
                    };
                    match Shape::Fixed(p[1..].to_vec()).meet(&Shape::Fixed(q[1..].to_vec())) {
                        Some(Shape::Fixed(r)) => Shape::Fixed(std::iter::once(first).chain(r).collect()),
                        _ => {
                            return Err(PrimError {
                                code: codes::STATIC_SHAPE_ERROR,
                                message: format!("cannot concatenate {x} and {y}"),
                            });
                        }
                    }
                }
                _ => Shape::AtLeast(1),
            };
            Ty::new(x.elem, shape)
        }
        Prim::Take | Prim::Drop => {
            // `take(n, v)` has |n| elements, `drop(n, v)` len(v) - |n|.
            let count = val(0).and_then(|v| v.as_scalar()).and_then(|c| c.as_i64()).map(i64::unsigned_abs);
            let len = a(1).and_then(vector_len);
            let out = match (prim, count, len) {
                (_, Some(n), Some(l)) if n as usize > l => None,
                (Prim::Take, Some(n), _) => Some(n as usize),
                (_, Some(n), Some(l)) => Some(l - n as usize),
                _ => None,
            };
            Ty::new(
                a(1).map_or(Elem::Base(BaseType::Int), |x| x.elem),
                out.map_or(Shape::rank(1), |n| Shape::known(&[n])),
            )
        }
        Prim::Hide(kind) => {
            let Some(x) = a(1) else { return Ok(None) };
            let shape = match kind {
                Hidden::Value => x.shape.clone(),
                Hidden::Shape => x.shape.rank_if_known().map_or(x.shape.clone(), Shape::rank),
                Hidden::Dim => Shape::AtLeast(0),
            };
            Ty::new(x.elem, shape)
        }
        Prim::DotSelect(kinds) => {
            let Some(x) = a(0) else { return Ok(None) };
            let fixed = kinds.iter().filter(|k| **k == DotKind::Index).count();
            let shape = match x.shape.rank_if_known() {
                Some(r) if r >= fixed => Shape::rank(r - fixed),
                _ => Shape::AtLeast(0),
            };
            Ty::new(x.elem, shape)
        }
        Prim::FrameArrange(_) => {
            let Some(x) = a(0) else { return Ok(None) };
            Ty::new(x.elem, x.shape.rank_if_known().map_or(Shape::AtLeast(0), Shape::rank))
        }
        Prim::MinVectors | Prim::MaxVectors => int_vector(a(0).and_then(vector_len)),
        Prim::All => Ty::new(Elem::Base(BaseType::Bool), Shape::scalar()),
        Prim::PrintScalar | Prim::PrintArray | Prim::Show | Prim::Puts | Prim::Printf => int_scalar(),
        Prim::Error => return Ok(None),
    }))
}
