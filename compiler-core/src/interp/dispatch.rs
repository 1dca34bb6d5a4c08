//! Choosing an instance at run time and checking type patterns.
//!
//! Dispatch uses each parameter's *shape class* ([`Shape`]: scalar, fixed rank with
//! some known extents, or at least `n` dimensions): an instance applies when every argument's
//! base type is the parameter's and its shape is in the class, and the most specific
//! applicable instance wins (seed 003 §4.1). Pattern variables (`int[n,n]`) and
//! conditions are then checked on the chosen instance, as sac2c's run-time checks do.

use crate::HashMap;

use super::value::{Elems, Value};
use crate::sema::hir::{Elem, Type};
use crate::sema::ty::Shape;
use crate::syntax::ast::{BaseType, DimCount, DimPattern, Name, ShapeSpec};

/// Whether the shape specification needs checks beyond its shape class (pattern
/// variables that must agree, or conditions).
pub fn spec_is_plain(spec: &ShapeSpec) -> bool {
    match spec {
        ShapeSpec::Dims(dims) => dims.iter().all(|d| matches!(d, DimPattern::Known(_) | DimPattern::Dot)),
        _ => true,
    }
}

/// Whether a value can be passed as a parameter of type `ty`.
pub fn matches(ty: &Type, class: &Shape, v: &Value) -> bool {
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
    /// The binding a variable's value stands for: an int, or a vector of ints.
    pub fn of_value(v: &Value) -> Option<Binding> {
        let ints = v.as_int_vec()?;
        Some(if v.rank() == 0 { Binding::Int(ints[0]) } else { Binding::Vector(ints) })
    }

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
                if let DimCount::Var(v) | DimCount::AtLeast(v, _) = count
                    && let Some(false) = bind_int(env, v, len as i64)
                {
                    ok = false;
                }
                if ok && let Some(n) = name {
                    let part = shape[..len].to_vec();
                    match env.get(n) {
                        Some(Binding::Vector(v)) => ok = *v == part,
                        Some(Binding::Int(_)) => ok = false,
                        None => {
                            env.insert(n.clone(), Binding::Vector(part));
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
    fn patterns_bind_and_check() {
        let spec = ShapeSpec::Dims(vec![DimPattern::Var(n("n")), DimPattern::Var(n("n"))]);
        let mut env = Bindings::default();
        assert!(match_pattern(&spec, &[3, 3], &mut env));
        assert_eq!(env.get("n"), Some(&Binding::Int(3)));
        let mut env = Bindings::default();
        assert!(!match_pattern(&spec, &[3, 4], &mut env));
        assert!(env.is_empty());
        // [+, n:shp, n]: the last extent says how many dimensions shp has.
        let spec = ShapeSpec::Dims(vec![
            DimPattern::Plus,
            DimPattern::Vector { count: DimCount::Var(n("n")), name: Some(n("shp")) },
            DimPattern::Var(n("n")),
        ]);
        let mut env = Bindings::default();
        assert!(match_pattern(&spec, &[7, 5, 6, 2], &mut env));
        assert_eq!(env.get("shp"), Some(&Binding::Vector(vec![5, 6])));
        let spec =
            ShapeSpec::Dims(vec![DimPattern::Vector { count: DimCount::AtLeast(n("d"), 1), name: Some(n("s")) }]);
        assert!(!match_pattern(&spec, &[], &mut Bindings::default()));
    }
}
