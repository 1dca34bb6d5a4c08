//! Choosing an instance at run time and checking type patterns.
//!
//! Dispatch uses each parameter's *shape class* (scalar, fixed rank with some known
//! extents, or at least `n` dimensions): an instance applies when every argument's
//! base type is the parameter's and its shape is in the class, and the most specific
//! applicable instance wins (seed 003 §4.1). Pattern variables (`int[n,n]`) and
//! conditions are then checked on the chosen instance, as sac2c's run-time checks do.

use std::collections::HashMap;

use super::value::{Elems, Value};
use crate::sema::hir::{Elem, Type};
use crate::syntax::ast::{BaseType, DimCount, DimPattern, Name, ShapeSpec};

/// The dispatch-relevant part of a shape specification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapeClass {
    /// Fixed rank; `Some(k)` where the extent is known (an empty vector is a scalar).
    Fixed(Vec<Option<usize>>),
    /// At least this many dimensions (`[*]` is 0, `[+]` is 1).
    AtLeast(usize),
}

impl ShapeClass {
    pub fn of(spec: &ShapeSpec) -> ShapeClass {
        match spec {
            ShapeSpec::Scalar => ShapeClass::Fixed(Vec::new()),
            ShapeSpec::Any => ShapeClass::AtLeast(0),
            ShapeSpec::NonScalar => ShapeClass::AtLeast(1),
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
                if variable { ShapeClass::AtLeast(min) } else { ShapeClass::Fixed(fixed) }
            }
        }
    }

    pub fn contains(&self, shape: &[usize]) -> bool {
        match self {
            ShapeClass::AtLeast(m) => shape.len() >= *m,
            ShapeClass::Fixed(dims) => {
                dims.len() == shape.len() && dims.iter().zip(shape).all(|(d, s)| d.is_none_or(|d| d == *s))
            }
        }
    }

    /// Whether every shape in `self` is in `other`.
    pub fn subset_of(&self, other: &ShapeClass) -> bool {
        match (self, other) {
            (ShapeClass::AtLeast(a), ShapeClass::AtLeast(b)) => a >= b,
            (ShapeClass::Fixed(a), ShapeClass::AtLeast(b)) => a.len() >= *b,
            (ShapeClass::AtLeast(_), ShapeClass::Fixed(_)) => false,
            (ShapeClass::Fixed(a), ShapeClass::Fixed(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| y.is_none() || x == y)
            }
        }
    }

    /// Whether the class is exactly described by its shape spec (no pattern variables
    /// or conditions left to check after dispatch).
    pub fn spec_is_plain(spec: &ShapeSpec) -> bool {
        match spec {
            ShapeSpec::Dims(dims) => dims.iter().all(|d| matches!(d, DimPattern::Known(_) | DimPattern::Dot)),
            _ => true,
        }
    }
}

/// Whether a value can be passed as a parameter of type `ty`.
pub fn matches(ty: &Type, class: &ShapeClass, v: &Value) -> bool {
    let elem_ok = match (ty.elem, v) {
        (Elem::String, Value::Str(_)) => true,
        (Elem::Base(b), _) => v.base() == Some(b),
        _ => false,
    };
    elem_ok && class.contains(v.shape())
}

/// Values bound by type patterns.
#[derive(Clone, Debug, PartialEq)]
pub enum Binding {
    Int(i64),
    Vector(Vec<i64>),
}

impl Binding {
    pub fn to_value(&self) -> Value {
        match self {
            Binding::Int(v) => Value::Scalar(super::value::Scalar::int(*v)),
            Binding::Vector(v) => Value::from_parts(vec![v.len()], Elems::Int(BaseType::Int, v.clone())),
        }
    }
}

pub type Bindings = HashMap<Name, Binding>;

/// Matches `shape` against a pattern, extending `env`; on failure `env` is unchanged.
pub fn match_pattern(spec: &ShapeSpec, shape: &[usize], env: &mut Bindings) -> bool {
    match spec {
        ShapeSpec::Scalar => shape.is_empty(),
        ShapeSpec::Any => true,
        ShapeSpec::NonScalar => !shape.is_empty(),
        ShapeSpec::Dims(dims) => {
            let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            let saved = env.clone();
            if match_dims(dims, &shape, env) {
                true
            } else {
                *env = saved;
                false
            }
        }
    }
}

fn bind_int(env: &mut Bindings, name: &Name, v: i64) -> Option<bool> {
    match env.get(name) {
        Some(Binding::Int(x)) => Some(*x == v),
        Some(Binding::Vector(_)) => Some(false),
        None => {
            env.insert(name.clone(), Binding::Int(v));
            None
        }
    }
}

fn match_dims(dims: &[DimPattern], shape: &[i64], env: &mut Bindings) -> bool {
    let Some((first, rest)) = dims.split_first() else {
        return shape.is_empty();
    };
    match first {
        DimPattern::Known(k) => shape.first() == Some(k) && match_dims(rest, &shape[1..], env),
        DimPattern::Dot => !shape.is_empty() && match_dims(rest, &shape[1..], env),
        DimPattern::Var(n) => {
            let Some(&extent) = shape.first() else { return false };
            match bind_int(env, n, extent) {
                Some(ok) => ok && match_dims(rest, &shape[1..], env),
                None => {
                    if match_dims(rest, &shape[1..], env) {
                        true
                    } else {
                        env.remove(n);
                        false
                    }
                }
            }
        }
        DimPattern::Plus | DimPattern::Star => {
            let min = if matches!(first, DimPattern::Plus) { 1 } else { 0 };
            (min..=shape.len()).any(|len| {
                let saved = env.clone();
                if match_dims(rest, &shape[len..], env) {
                    true
                } else {
                    *env = saved;
                    false
                }
            })
        }
        DimPattern::Vector { count, name } => {
            let lengths: Vec<usize> = match count {
                DimCount::Known(k) => vec![*k as usize],
                DimCount::Var(v) | DimCount::AtLeast(v, _) => match env.get(v) {
                    Some(Binding::Int(k)) if *k >= 0 => vec![*k as usize],
                    Some(_) => return false,
                    None => {
                        let min = if let DimCount::AtLeast(_, m) = count { *m as usize } else { 0 };
                        (min..=shape.len()).collect()
                    }
                },
                DimCount::Anonymous => (0..=shape.len()).collect(),
            };
            for len in lengths {
                if len > shape.len() {
                    continue;
                }
                let saved = env.clone();
                let mut ok = true;
                if let DimCount::Var(v) | DimCount::AtLeast(v, _) = count {
                    if let Some(false) = bind_int(env, v, len as i64) {
                        ok = false;
                    }
                }
                if ok {
                    if let Some(n) = name {
                        let part = shape[..len].to_vec();
                        match env.get(n) {
                            Some(Binding::Vector(v)) => ok = *v == part,
                            Some(Binding::Int(_)) => ok = false,
                            None => {
                                env.insert(n.clone(), Binding::Vector(part));
                            }
                        }
                    }
                }
                if ok && match_dims(rest, &shape[len..], env) {
                    return true;
                }
                *env = saved;
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::ast::DimCount;

    fn n(s: &str) -> Name {
        Name::new(s)
    }

    #[test]
    fn classes_order_like_the_type_hierarchy() {
        let aks = ShapeClass::of(&ShapeSpec::Dims(vec![DimPattern::Known(2), DimPattern::Known(2)]));
        let akd = ShapeClass::of(&ShapeSpec::Dims(vec![DimPattern::Dot, DimPattern::Dot]));
        let plus = ShapeClass::of(&ShapeSpec::NonScalar);
        let star = ShapeClass::of(&ShapeSpec::Any);
        let scalar = ShapeClass::of(&ShapeSpec::Scalar);
        assert!(aks.subset_of(&akd) && akd.subset_of(&plus) && plus.subset_of(&star));
        assert!(scalar.subset_of(&star) && !scalar.subset_of(&plus));
        assert!(!akd.subset_of(&aks));
    }

    #[test]
    fn patterns_bind_and_check() {
        let spec = ShapeSpec::Dims(vec![DimPattern::Var(n("n")), DimPattern::Var(n("n"))]);
        let mut env = Bindings::new();
        assert!(match_pattern(&spec, &[3, 3], &mut env));
        assert_eq!(env.get("n"), Some(&Binding::Int(3)));
        let mut env = Bindings::new();
        assert!(!match_pattern(&spec, &[3, 4], &mut env));
        assert!(env.is_empty());
        // [+, n:shp, n]: the last extent says how many dimensions shp has.
        let spec = ShapeSpec::Dims(vec![
            DimPattern::Plus,
            DimPattern::Vector { count: DimCount::Var(n("n")), name: Some(n("shp")) },
            DimPattern::Var(n("n")),
        ]);
        let mut env = Bindings::new();
        assert!(match_pattern(&spec, &[7, 5, 6, 2], &mut env));
        assert_eq!(env.get("shp"), Some(&Binding::Vector(vec![5, 6])));
        let spec =
            ShapeSpec::Dims(vec![DimPattern::Vector { count: DimCount::AtLeast(n("d"), 1), name: Some(n("s")) }]);
        assert!(!match_pattern(&spec, &[], &mut Bindings::new()));
    }
}
