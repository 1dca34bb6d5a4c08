//! Static types: an element type and a shape class, optionally a known value.
//!
//! The shape lattice refines SaC's hierarchy (seed 003 §2.2.4, seed 000):
//!
//! ```text
//!            AtLeast(0)  = [*]   (AUD)
//!                |
//!            AtLeast(1)  = [+]   (AUD)
//!           /         \
//!   Fixed([?,?]) ...  AtLeast(2)        Fixed: known rank (AKD), some extents known
//!        |
//!   Fixed([3,?])                         (a partial shape, from type patterns
//!        |                                and symbolic attributes)
//!   Fixed([3,4])  = [3,4] (AKS)          Fixed([]) is a scalar
//! ```
//!
//! `join` is the most specific common supertype (Kreye's *mscs*), `meet` the
//! intersection (what two shapes that must be equal can be), `subset_of` the
//! subtype order ⪯. Dispatch uses the same classes, so the compile-time and the
//! run-time view of overloading agree.

use crate::interp::value::Value;
use crate::sema::hir::Elem;
use crate::syntax::ast::{DimCount, DimPattern, ShapeSpec};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// Known rank; `Some(k)` where the extent is known.
    Fixed(Vec<Option<usize>>),
    /// At least this many dimensions (`[*]` is 0, `[+]` is 1).
    AtLeast(usize),
}

/// The four categories of seed 003.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    Scalar,
    Aks,
    Akd,
    Aud,
}

impl Shape {
    pub fn scalar() -> Shape {
        Shape::Fixed(Vec::new())
    }

    pub fn known(extents: &[usize]) -> Shape {
        Shape::Fixed(extents.iter().map(|&e| Some(e)).collect())
    }

    pub fn rank(n: usize) -> Shape {
        Shape::Fixed(vec![None; n])
    }

    /// The class a shape specification (type pattern) admits.
    pub fn of_spec(spec: &ShapeSpec) -> Shape {
        match spec {
            ShapeSpec::Scalar => Shape::scalar(),
            ShapeSpec::Any => Shape::AtLeast(0),
            ShapeSpec::NonScalar => Shape::AtLeast(1),
            ShapeSpec::Dims(dims) => {
                let mut fixed = Vec::new();
                let mut variable = false;
                let mut min = 0usize;
                for d in dims {
                    match d {
                        DimPattern::Known(k) => {
                            fixed.push(Some(*k as usize));
                            min += 1;
                        }
                        DimPattern::Dot | DimPattern::Var(_) => {
                            fixed.push(None);
                            min += 1;
                        }
                        DimPattern::Plus => {
                            variable = true;
                            min += 1;
                        }
                        DimPattern::Star => variable = true,
                        DimPattern::Vector { count, .. } => match count {
                            DimCount::Known(k) => {
                                fixed.extend(std::iter::repeat_n(None, *k as usize));
                                min += *k as usize;
                            }
                            DimCount::AtLeast(_, k) => {
                                variable = true;
                                min += *k as usize;
                            }
                            _ => variable = true,
                        },
                    }
                }
                if variable { Shape::AtLeast(min) } else { Shape::Fixed(fixed) }
            }
        }
    }

    pub fn rank_if_known(&self) -> Option<usize> {
        match self {
            Shape::Fixed(d) => Some(d.len()),
            Shape::AtLeast(_) => None,
        }
    }

    /// The extents, if all are known.
    pub fn extents(&self) -> Option<Vec<usize>> {
        match self {
            Shape::Fixed(d) => d.iter().copied().collect(),
            Shape::AtLeast(_) => None,
        }
    }

    pub fn min_rank(&self) -> usize {
        match self {
            Shape::Fixed(d) => d.len(),
            Shape::AtLeast(n) => *n,
        }
    }

    pub fn is_scalar(&self) -> bool {
        matches!(self, Shape::Fixed(d) if d.is_empty())
    }

    /// Certainly not a scalar.
    pub fn non_scalar(&self) -> bool {
        self.min_rank() > 0
    }

    pub fn category(&self) -> Category {
        match self {
            Shape::Fixed(d) if d.is_empty() => Category::Scalar,
            Shape::Fixed(d) if d.iter().all(|e| e.is_some()) => Category::Aks,
            Shape::Fixed(_) => Category::Akd,
            Shape::AtLeast(_) => Category::Aud,
        }
    }

    pub fn contains(&self, shape: &[usize]) -> bool {
        match self {
            Shape::AtLeast(m) => shape.len() >= *m,
            Shape::Fixed(dims) => {
                dims.len() == shape.len() && dims.iter().zip(shape).all(|(d, s)| d.is_none_or(|d| d == *s))
            }
        }
    }

    /// Whether every shape in `self` is in `other` (the subtype order).
    pub fn subset_of(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::AtLeast(a), Shape::AtLeast(b)) => a >= b,
            (Shape::Fixed(a), Shape::AtLeast(b)) => a.len() >= *b,
            (Shape::AtLeast(_), Shape::Fixed(_)) => false,
            (Shape::Fixed(a), Shape::Fixed(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| y.is_none() || x == y)
            }
        }
    }

    /// The shapes both admit, if any.
    pub fn meet(&self, other: &Shape) -> Option<Shape> {
        match (self, other) {
            (Shape::AtLeast(a), Shape::AtLeast(b)) => Some(Shape::AtLeast(*a.max(b))),
            (Shape::Fixed(a), Shape::AtLeast(b)) | (Shape::AtLeast(b), Shape::Fixed(a)) => {
                (a.len() >= *b).then(|| Shape::Fixed(a.clone()))
            }
            (Shape::Fixed(a), Shape::Fixed(b)) => {
                if a.len() != b.len() {
                    return None;
                }
                let mut out = Vec::with_capacity(a.len());
                for (x, y) in a.iter().zip(b) {
                    match (x, y) {
                        (Some(x), Some(y)) if x != y => return None,
                        (Some(x), _) | (_, Some(x)) => out.push(Some(*x)),
                        _ => out.push(None),
                    }
                }
                Some(Shape::Fixed(out))
            }
        }
    }

    pub fn overlaps(&self, other: &Shape) -> bool {
        self.meet(other).is_some()
    }

    /// The most specific shape class containing both (Kreye's mscs, refined).
    pub fn join(&self, other: &Shape) -> Shape {
        match (self, other) {
            (Shape::Fixed(a), Shape::Fixed(b)) if a.len() == b.len() => {
                Shape::Fixed(a.iter().zip(b).map(|(x, y)| if x == y { *x } else { None }).collect())
            }
            _ => Shape::AtLeast(self.min_rank().min(other.min_rank())),
        }
    }

    /// `shape` with `cell` appended (a frame of cells).
    pub fn concat(&self, cell: &Shape) -> Shape {
        match (self, cell) {
            (Shape::Fixed(a), Shape::Fixed(b)) => Shape::Fixed(a.iter().chain(b).copied().collect()),
            _ => Shape::AtLeast(self.min_rank() + cell.min_rank()),
        }
    }

    /// The shape after dropping the first `k` axes.
    pub fn drop_axes(&self, k: usize) -> Shape {
        match self {
            Shape::Fixed(d) => Shape::Fixed(d.get(k..).map(|s| s.to_vec()).unwrap_or_default()),
            Shape::AtLeast(n) => Shape::AtLeast(n.saturating_sub(k)),
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::Fixed(d) if d.is_empty() => Ok(()),
            Shape::Fixed(d) => {
                let parts: Vec<String> = d.iter().map(|e| e.map_or(".".to_string(), |e| e.to_string())).collect();
                write!(f, "[{}]", parts.join(","))
            }
            Shape::AtLeast(0) => f.write_str("[*]"),
            Shape::AtLeast(_) => f.write_str("[+]"),
        }
    }
}

/// A static type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ty {
    pub elem: Elem,
    pub shape: Shape,
}

impl Ty {
    pub fn new(elem: Elem, shape: Shape) -> Ty {
        Ty { elem, shape }
    }

    pub fn of_value(v: &Value) -> Ty {
        let elem = match v.base() {
            Some(b) => Elem::Base(b),
            None => Elem::String,
        };
        Ty { elem, shape: Shape::known(v.shape()) }
    }

    pub fn subset_of(&self, other: &Ty) -> bool {
        self.elem == other.elem && self.shape.subset_of(&other.shape)
    }

    pub fn admits(&self, v: &Value) -> bool {
        let elem_ok = match (self.elem, v) {
            (Elem::String, Value::Str(_)) => true,
            (Elem::Base(b), _) => v.base() == Some(b),
            _ => false,
        };
        elem_ok && self.shape.contains(v.shape())
    }
}

impl std::fmt::Display for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.elem, self.shape)
    }
}

/// What is known about a value at compile time: its type, and perhaps the value
/// itself (Kreye's proposed fifth category, AKV).
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    pub ty: Ty,
    pub value: Option<Value>,
}

/// Values with at most this many elements are tracked at compile time.
pub const MAX_KNOWN_ELEMENTS: usize = 256;

impl Info {
    pub fn of_type(ty: Ty) -> Info {
        Info { ty, value: None }
    }

    pub fn of_value(v: Value) -> Info {
        let ty = Ty::of_value(&v);
        let keep = v.len() <= MAX_KNOWN_ELEMENTS;
        Info { ty, value: keep.then_some(v) }
    }

    pub fn join(&self, other: &Info) -> Info {
        let value = match (&self.value, &other.value) {
            (Some(a), Some(b)) if a.identical(b) => Some(a.clone()),
            _ => None,
        };
        let shape = self.ty.shape.join(&other.ty.shape);
        Info { ty: Ty { elem: self.ty.elem, shape }, value }
    }

    pub fn without_value(&self) -> Info {
        Info { ty: self.ty.clone(), value: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mscs_follows_kreye() {
        // mscs({float[2,3], float[2]}) = float[+]
        assert_eq!(Shape::known(&[2, 3]).join(&Shape::known(&[2])), Shape::AtLeast(1));
        // scalar with an array: [*]
        assert_eq!(Shape::scalar().join(&Shape::known(&[3])), Shape::AtLeast(0));
        // same rank: AKD
        assert_eq!(Shape::known(&[2, 2]).join(&Shape::known(&[3, 3])), Shape::rank(2));
        assert_eq!(Shape::known(&[2, 3]).join(&Shape::known(&[2, 4])), Shape::Fixed(vec![Some(2), None]));
    }

    #[test]
    fn subtyping_and_meet() {
        assert!(Shape::known(&[3, 3]).subset_of(&Shape::rank(2)));
        assert!(Shape::rank(2).subset_of(&Shape::AtLeast(1)));
        assert!(!Shape::scalar().subset_of(&Shape::AtLeast(1)));
        assert_eq!(Shape::rank(2).meet(&Shape::known(&[3, 4])), Some(Shape::known(&[3, 4])));
        assert_eq!(Shape::known(&[3]).meet(&Shape::known(&[4])), None);
        assert_eq!(
            Shape::Fixed(vec![Some(3), None]).meet(&Shape::Fixed(vec![None, Some(4)])),
            Some(Shape::known(&[3, 4]))
        );
    }
}
