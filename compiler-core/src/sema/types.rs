//! Resolving written types: typedef expansion and function signatures.

use crate::HashMap;

use super::hir::{Elem, Function, LocalId, LocalInfo, Param, Type};
use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::syntax::ast::{self, DimCount, DimPattern, Name, ShapeSpec, TypeExpr, TypeName};

/// Typedef names in scope, with where they were defined.
pub type TypeEnv = HashMap<Name, (Type, crate::span::Span)>;

/// Expands typedefs. `void` is reported (it is only valid as a result type).
pub fn resolve_type(ty: &TypeExpr, env: &TypeEnv, diags: &mut Diagnostics) -> Option<Type> {
    match &ty.name {
        TypeName::Base(b) => Some(Type { elem: Elem::Base(*b), shape: ty.shape.clone() }),
        TypeName::String => Some(Type { elem: Elem::String, shape: ty.shape.clone() }),
        TypeName::Void => {
            diags.push(Diagnostic::error(codes::EXPECTED_TYPE, "`void` is not a value type").at(ty.span, ""));
            None
        }
        TypeName::Named(n) => match env.get(n) {
            Some((inner, _)) => Some(Type { elem: inner.elem, shape: combine_shapes(&ty.shape, &inner.shape) }),
            None => {
                let mut d = Diagnostic::error(codes::UNKNOWN_TYPE, format!("unknown type `{n}`")).at(ty.span, "");
                if let Some(best) =
                    super::closest(n, env.keys().map(|k| k.as_str()).chain(ast::BaseType::ALL.iter().map(|b| b.name())))
                {
                    d = d.with_hint(format!("did you mean `{best}`?"));
                }
                diags.push(d);
                None
            }
        },
    }
}

/// `T[outer]` where `T` is `E[inner]` means `E[outer ++ inner]`.
fn combine_shapes(outer: &ShapeSpec, inner: &ShapeSpec) -> ShapeSpec {
    fn dims(s: &ShapeSpec) -> Vec<DimPattern> {
        match s {
            ShapeSpec::Scalar => Vec::new(),
            ShapeSpec::Any => vec![DimPattern::Star],
            ShapeSpec::NonScalar => vec![DimPattern::Plus],
            ShapeSpec::Dims(d) => d.clone(),
        }
    }
    let mut all = dims(outer);
    all.extend(dims(inner));
    normalise_shape(all)
}

pub fn normalise_shape(dims: Vec<DimPattern>) -> ShapeSpec {
    match dims.as_slice() {
        [] => ShapeSpec::Scalar,
        [DimPattern::Star] => ShapeSpec::Any,
        [DimPattern::Plus] => ShapeSpec::NonScalar,
        _ => ShapeSpec::Dims(dims),
    }
}

/// Names a shape pattern binds (extent variables, count variables, vector names).
pub fn pattern_names(shape: &ShapeSpec) -> Vec<Name> {
    let mut names = Vec::new();
    if let ShapeSpec::Dims(dims) = shape {
        for d in dims {
            match d {
                DimPattern::Var(n) => names.push(n.clone()),
                DimPattern::Vector { count, name } => {
                    match count {
                        DimCount::Var(v) | DimCount::AtLeast(v, _) => names.push(v.clone()),
                        _ => {}
                    }
                    if let Some(n) = name {
                        names.push(n.clone());
                    }
                }
                _ => {}
            }
        }
    }
    names
}

/// A function's signature, with parameters and pattern variables allocated as its
/// first locals; the body is resolved later.
pub fn function_stub(def: &ast::FunDef, module: Option<Name>, env: &TypeEnv, diags: &mut Diagnostics) -> Function {
    let mut locals = Vec::new();
    let mut params = Vec::new();
    for (k, p) in def.params.iter().enumerate() {
        if def.params[..k].iter().any(|q| q.name == p.name) {
            diags.push(
                Diagnostic::error(codes::DUPLICATE_PARAMETER, format!("parameter `{}` appears twice", p.name))
                    .at(p.name_span, "")
                    .with_label(
                        def.params.iter().find(|q| q.name == p.name).map_or(p.span, |q| q.name_span),
                        "first use",
                    ),
            );
        }
        if p.by_ref {
            diags.push(
                Diagnostic::error(codes::UNSUPPORTED, "reference parameters (`&`) are not supported")
                    .at(p.span, "")
                    .with_note("they exist for SaC's object system, which withloop does not implement"),
            );
        }
        let ty = resolve_type(&p.ty, env, diags)
            .unwrap_or(Type { elem: Elem::Base(ast::BaseType::Int), shape: ShapeSpec::Any });
        let local = LocalId(locals.len() as u32);
        locals.push(LocalInfo { name: p.name.clone(), span: p.name_span, declared: None });
        params.push(Param { name: p.name.clone(), local, ty, span: p.span });
    }
    let mut pattern_locals: Vec<(Name, LocalId)> = Vec::new();
    for p in &params {
        for n in pattern_names(&p.ty.shape) {
            if params.iter().any(|q| q.name == n) {
                diags.push(
                    Diagnostic::error(
                        codes::BAD_TYPE_PATTERN,
                        format!("`{n}` names both a parameter and a pattern variable"),
                    )
                    .at(p.span, ""),
                );
                continue;
            }
            if !pattern_locals.iter().any(|(m, _)| *m == n) {
                let local = LocalId(locals.len() as u32);
                locals.push(LocalInfo { name: n.clone(), span: p.span, declared: None });
                pattern_locals.push((n, local));
            }
        }
    }
    let mut results = Vec::new();
    for r in &def.results {
        // An unknown type is reported; a placeholder keeps the result count right.
        let t =
            resolve_type(r, env, diags).unwrap_or(Type { elem: Elem::Base(ast::BaseType::Int), shape: ShapeSpec::Any });
        results.push(t);
    }
    Function {
        name: def.name.clone(),
        module,
        span: def.span,
        name_span: def.name_span,
        inline: def.inline,
        param_used: vec![true; params.len()],
        params,
        results,
        pattern_locals,
        conditions: Vec::new(),
        body: Vec::new(),
        locals,
        resolved: false,
        pure: true,
        intrinsic: None,
    }
}
