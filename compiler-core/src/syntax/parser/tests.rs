//! Parser unit tests; whole programs are tested through the data-file harness.

use super::*;
use crate::diagnostics::Diagnostics;
use crate::span::{FileKind, SourceMap};
use crate::syntax::cpp::{NoIncludes, PpOptions, preprocess};

fn parse(src: &str) -> (SourceModule, Vec<String>) {
    let mut sources = SourceMap::new();
    let file = sources.add("t.sac", src, FileKind::User);
    let mut d = Diagnostics::new();
    let tokens = preprocess(&mut sources, file, &NoIncludes, &PpOptions::default(), &mut d);
    let m = parse_module(&tokens, &mut d);
    (m, d.iter().map(|d| format!("{} {}", d.code.id, d.message)).collect())
}

fn ok(src: &str) -> SourceModule {
    let (m, errs) = parse(src);
    assert!(errs.is_empty(), "unexpected errors: {errs:?}");
    m
}

fn body(m: &SourceModule, idx: usize) -> &[Stmt] {
    match &m.items[idx] {
        Item::Function(f) => &f.body.stmts,
        other => panic!("not a function: {other:?}"),
    }
}

#[test]
fn functions_with_several_results_and_operator_names() {
    let m = ok(
        "int, double f(int[.,.] a, int[*] b) { return (1, 2.0); }\ninline int + (int a, int b) { return _add_SxS_(a, b); }",
    );
    let Item::Function(f) = &m.items[0] else { panic!() };
    assert_eq!(f.results.len(), 2);
    assert_eq!(f.params[0].ty.shape, ShapeSpec::Dims(vec![DimPattern::Dot, DimPattern::Dot]));
    assert_eq!(f.params[1].ty.shape, ShapeSpec::Any);
    let Item::Function(g) = &m.items[1] else { panic!() };
    assert!(g.is_operator);
    assert_eq!(g.name, "+");
}

#[test]
fn type_patterns() {
    let m =
        ok("int[m,q,q] foo(int[m,n,3] a, int[d>0:shp] b, int[+,n:shp2,n] c, int[vlen:_,d:s] e) | m > n { return a; }");
    let Item::Function(f) = &m.items[0] else { panic!() };
    assert_eq!(f.conditions.len(), 1);
    assert!(
        matches!(&f.params[1].ty.shape, ShapeSpec::Dims(d) if matches!(&d[0], DimPattern::Vector { count: DimCount::AtLeast(_, 1), .. }))
    );
    assert!(
        matches!(&f.params[3].ty.shape, ShapeSpec::Dims(d) if matches!(&d[0], DimPattern::Vector { count: DimCount::Var(_), name: None }))
    );
}

#[test]
fn statements_desugar_targets() {
    let m = ok(
        "int main() { a = 1; a, b = f(); a[1] = 2; a[i,j] += 3; x++; ++x; a[0]--; for (i = 0; i < 10; i++) { x += i; } do { x--; } while (x > 0); if (x) y = 1; else y = 2; return (x); }",
    );
    let kinds: Vec<&str> = body(&m, 0)
        .iter()
        .map(|s| match &s.kind {
            StmtKind::Assign { targets, .. } if targets.len() == 2 => "multi",
            StmtKind::Assign { .. } => "assign",
            StmtKind::IndexAssign { op: None, .. } => "index",
            StmtKind::IndexAssign { op: Some(_), .. } => "index-op",
            StmtKind::Step { .. } => "step",
            StmtKind::IndexStep { .. } => "index-step",
            StmtKind::For { .. } => "for",
            StmtKind::DoWhile { .. } => "do",
            StmtKind::If { .. } => "if",
            StmtKind::Return { .. } => "return",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["assign", "multi", "index", "index-op", "step", "step", "index-step", "for", "do", "if", "return"]
    );
}

#[test]
fn precedence_follows_sac2c() {
    let m = ok("int main() { return a + b * c ++ d << e == f && g || h ? i : j; }");
    let StmtKind::Return { values } = &body(&m, 0)[0].kind else { panic!() };
    let ExprKind::Cond { cond, .. } = &values[0].kind else { panic!("{:?}", values[0]) };
    assert!(matches!(cond.kind, ExprKind::Or(..)));
}

#[test]
fn with_loops_in_all_syntaxes() {
    let src = "int main() {
        a = with { ([0] <= iv < [10]) : iv[0]; ([10] <= iv <= [19] step [2] width [1]) { x = 1; } : x; } : genarray([20], 0);
        b = with { (. <= [i,j] <= .) : i + j; } : modarray(a);
        c, d = with { ([0] <= iv < [5]) : (1, 2); } : (genarray([5]), fold(+, 0));
        e = with (0 <= iv < 5) { v = iv; } genarray([5], v);
        f = with (. <= iv <= .) modarray(a, iv, a[iv] + 1);
        g = with ([0,0] <= iv <= [3,0]) { y = 1; } fold(+, 0, y);
        h = with ([i] < ds) { r = a[i]; return(r); } genarray(ds, 0);
        k = with ([1] <= iv < [4]) : 2 genarray([5], 0);
        l = with { (iv=[i] < [3]) : i; } : foldfix(+, 0, 100);
        return 0; }";
    let m = ok(src);
    let stmts = body(&m, 0);
    let with_of = |k: usize| match &stmts[k].kind {
        StmtKind::Assign { value: Expr { kind: ExprKind::With(w), .. }, .. } => w.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(with_of(0).parts.len(), 2);
    assert_eq!(with_of(2).ops.len(), 2);
    let e = with_of(3);
    assert!(matches!(&e.ops[0], WithOp::Genarray { default: None, .. }));
    assert_eq!(e.syntax, WithSyntax::Classic);
    assert!(matches!(&with_of(6).ops[0], WithOp::Genarray { default: Some(_), .. }));
    assert!(matches!(&with_of(7).ops[0], WithOp::Genarray { default: Some(_), .. }));
    let l = with_of(8);
    assert!(l.parts[0].generator.lower.is_none());
    assert!(l.parts[0].generator.index.vector.is_some() && l.parts[0].generator.index.scalars.is_some());
}

#[test]
fn tensor_comprehensions_and_dot_selections() {
    let m = ok(
        "int main() { a = { [i,j] -> m[[j,i]] }; b = { iv -> x | [0] <= iv < [3] step [2]; iv -> y }; c = m[[.,1]]; d = m[[1,...,1]]; e = m[.,2]; return 0; }",
    );
    let stmts = body(&m, 0);
    assert!(matches!(&stmts[0].kind, StmtKind::Assign { value: Expr { kind: ExprKind::Tensor(_), .. }, .. }));
    assert!(matches!(&stmts[2].kind, StmtKind::Assign { value: Expr { kind: ExprKind::DotSelect { .. }, .. }, .. }));
    assert!(matches!(&stmts[3].kind, StmtKind::Assign { value: Expr { kind: ExprKind::DotSelect { .. }, .. }, .. }));
    assert!(matches!(&stmts[4].kind, StmtKind::Assign { value: Expr { kind: ExprKind::DotSelect { .. }, .. }, .. }));
}

#[test]
fn casts_and_typedefs() {
    let m = ok(
        "typedef double[3] vec3; int main() { x = (int)2.5; y = (vec3)[1.0,2.0,3.0]; z = (a)+1; vec3 v; return 0; }",
    );
    let stmts = body(&m, 1);
    assert!(matches!(&stmts[0].kind, StmtKind::Assign { value: Expr { kind: ExprKind::Cast { .. }, .. }, .. }));
    assert!(matches!(&stmts[2].kind, StmtKind::Assign { value: Expr { kind: ExprKind::Binary { .. }, .. }, .. }));
    assert!(matches!(&stmts[3].kind, StmtKind::Decl { .. }));
}

#[test]
fn several_errors_are_reported_and_parsing_continues() {
    let (m, errs) = parse("int main() { a = ; b = 1 +; return 0; }\nint f( { }\nint g() { return 1; }");
    assert!(errs.len() >= 3, "{errs:?}");
    assert!(m.items.iter().any(|i| matches!(i, Item::Function(f) if f.name == "g")));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let src = format!("int main() {{ return {}1{}; }}", "(".repeat(5000), ")".repeat(5000));
    let (_, errs) = parse(&src);
    assert!(errs.iter().any(|e| e.starts_with("E0107")), "{errs:?}");
}

/// How deep an expression tree is (walked iteratively, whatever its depth).
fn tree_depth(e: &Expr) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(e, 1)];
    while let Some((e, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        match &e.kind {
            ExprKind::Binary { lhs, rhs, .. } => stack.extend([(&**lhs, depth + 1), (&**rhs, depth + 1)]),
            ExprKind::Select { array, index } => {
                stack.push((&**array, depth + 1));
                stack.extend(index.iter().map(|i| (i, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

fn returned(m: &SourceModule) -> &Expr {
    match &body(m, 0).last().expect("a return").kind {
        StmtKind::Return { values } => &values[0],
        other => panic!("not a return: {other:?}"),
    }
}

#[test]
fn operator_chains_count_towards_the_expression_depth() {
    // 1000 operators: deeper than parentheses may nest, within MAX_EXPR_DEPTH.
    let (m, errs) = parse(&format!("int main() {{ return 1{}; }}", " - 1".repeat(1000)));
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(tree_depth(returned(&m)), 1001);
    // 5000: one error, and the rest of the chain read without further ones.
    let (_, errs) =
        parse(&format!("int f(int x) {{ return x; }} int main() {{ return 1{} + f(2); }}", " - 1".repeat(5000)));
    assert_eq!(errs, ["E0107 expression more than 1024 levels deep"]);
    // Selections chain as operators do.
    let (_, errs) = parse(&format!("int main() {{ a = [1]; return a{}; }}", "[0]".repeat(3000)));
    assert_eq!(errs, ["E0107 expression more than 1024 levels deep"]);
    // Nesting and chains add up: 200 parentheses around a chain of 900.
    let chain = format!("{}1{}{}", "(".repeat(200), " * 1".repeat(900), ")".repeat(200));
    let (_, errs) = parse(&format!("int main() {{ return {chain}; }}"));
    assert_eq!(errs, ["E0107 expression more than 1024 levels deep"]);
}

#[test]
fn too_deep_nesting_is_one_error() {
    // Each `else if` nests a statement in the one before.
    let arms: String = (1..3000).map(|i| format!(" else if (x == {i}) {{ y = {i}; }}")).collect();
    let (m, errs) = parse(&format!(
        "int main() {{ x = 7; y = 0; if (x == 0) {{ y = 0; }}{arms} return y; }} int g() {{ return 1; }}"
    ));
    assert_eq!(errs, ["E0107 nested more than 256 levels deep"]);
    assert!(m.items.iter().any(|i| matches!(i, Item::Function(f) if f.name == "g")));
    let (_, errs) = parse(&format!("int main() {{ return {}1{} + 2; }}", "(".repeat(5000), ")".repeat(5000)));
    assert_eq!(errs, ["E0107 nested more than 256 levels deep"]);
}

#[test]
fn casts_nest_as_prefix_operators_do() {
    let (_, errs) = parse(&format!("int main() {{ return {}1; }}", "(int)".repeat(5000)));
    assert!(errs.iter().any(|e| e.starts_with("E0107 nested more than 256")), "{errs:?}");
}

#[test]
fn literals_with_suffixes() {
    assert_eq!(parse_int_literal("10ul"), Some((10, LiteralType::Base(BaseType::ULong))));
    assert_eq!(parse_int_literal("1d"), Some((1, LiteralType::Real(BaseType::Double))));
    assert_eq!(parse_int_literal("0x1F"), Some((31, LiteralType::Base(BaseType::Int))));
    assert_eq!(parse_real_literal("1.5f"), Some((1.5, BaseType::Float)));
    assert_eq!(parse_real_literal("0x1p-3"), Some((0.125, BaseType::Double)));
    assert_eq!(parse_int_literal("12q"), None);
}
