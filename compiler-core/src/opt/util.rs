//! Helpers the passes share: use counts, copying blocks with fresh values,
//! substitution, constants, and what may fail or has effects.

use crate::HashMap;

use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::sema::ty::{Shape, Ty};
use crate::span::Span;
use crate::syntax::ast::BaseType;

/// How often each value is read (operands and yields, nested blocks included).
pub fn use_counts(f: &Function) -> Vec<u32> {
    let mut counts = vec![0u32; f.values.len()];
    fn block(b: &Block, counts: &mut [u32]) {
        for s in &b.stmts {
            s.op.for_each_operand(&mut |v| {
                if let Some(c) = counts.get_mut(v.0 as usize) {
                    *c += 1;
                }
            });
            s.op.walk_blocks(&mut |inner| block(inner, counts));
        }
        for y in &b.yields {
            if let Some(c) = counts.get_mut(y.0 as usize) {
                *c += 1;
            }
        }
    }
    block(&f.body, &mut counts);
    counts
}

/// Replaces operands and yields by `map` (followed transitively), nested blocks
/// included.
pub fn substitute(b: &mut Block, map: &HashMap<ValueId, ValueId>) {
    if map.is_empty() {
        return;
    }
    for s in &mut b.stmts {
        s.op.map_operands(&mut |v| resolve(map, v));
        s.op.walk_blocks_mut(&mut |inner| substitute(inner, map));
    }
    for y in &mut b.yields {
        *y = resolve(map, *y);
    }
}

/// `v` after the substitutions of `map`, followed to their end (a cycle
/// stops after as many hops as `map` has entries).
pub fn resolve(map: &HashMap<ValueId, ValueId>, mut v: ValueId) -> ValueId {
    let mut hops = 0;
    while let Some(n) = map.get(&v) {
        v = *n;
        hops += 1;
        if hops > map.len() {
            break;
        }
    }
    v
}

/// Takes the body out of `f` so that `g` can rewrite it while adding values to `f`.
pub fn with_body<T>(f: &mut Function, g: impl FnOnce(&mut Function, &mut Block) -> T) -> T {
    let mut body = std::mem::take(&mut f.body);
    let r = g(f, &mut body);
    f.body = body;
    r
}

/// Copies blocks into a function with fresh values for everything they define.
#[derive(Debug, Default)]
pub struct Cloner<'a> {
    /// Types of the values being copied; `None`: they are the destination's own.
    pub src: Option<&'a [ValueData]>,
    /// Original value → its replacement (pre-seed with parameters, indices, …).
    pub map: HashMap<ValueId, ValueId>,
}

impl Cloner<'_> {
    fn fresh(&mut self, dst: &mut Function, v: ValueId) -> ValueId {
        let data = match self.src {
            Some(src) => src[v.0 as usize].clone(),
            None => dst.values[v.0 as usize].clone(),
        };
        let n = dst.new_value(data.ty, data.name);
        self.map.insert(v, n);
        n
    }

    fn get(&self, v: ValueId) -> ValueId {
        self.map.get(&v).copied().unwrap_or(v)
    }

    pub fn block(&mut self, dst: &mut Function, b: &Block) -> Block {
        let stmts = b.stmts.iter().map(|s| self.stmt(dst, s)).collect();
        let yields = b.yields.iter().map(|y| self.get(*y)).collect();
        Block { stmts, yields }
    }

    pub fn stmt(&mut self, dst: &mut Function, s: &Stmt) -> Stmt {
        let mut op = s.op.clone();
        op.map_operands(&mut |v| self.get(v));
        match &mut op {
            Op::Loop { params, cond, body, .. } => {
                for p in params.iter_mut() {
                    *p = self.fresh(dst, *p);
                }
                *cond = self.block(dst, cond);
                *body = self.block(dst, body);
            }
            Op::If { then_block, else_block, .. } => {
                *then_block = self.block(dst, then_block);
                *else_block = self.block(dst, else_block);
            }
            Op::With(w) => {
                for p in &mut w.parts {
                    if let Some(i) = &mut p.index {
                        *i = self.fresh(dst, *i);
                    }
                    if let Some(ss) = &mut p.scalars {
                        for x in ss.iter_mut() {
                            *x = self.fresh(dst, *x);
                        }
                    }
                    if let Some(o) = &mut p.offset {
                        *o = self.fresh(dst, *o);
                    }
                    p.body = self.block(dst, &p.body);
                }
            }
            _ => {}
        }
        let defs = s.defs.iter().map(|d| self.fresh(dst, *d)).collect();
        Stmt { defs, op, span: s.span, blame: s.blame }
    }
}

/// `{base}{n}` for the least `n >= 1` that names no function in `taken`
/// (a module's names, as functions are added to it); the name is then taken.
/// Code a pass moves into functions of their own is named so: a later round
/// moving more out of the same function must not reuse a name.
pub fn fresh_function_name(taken: &mut crate::HashSet<String>, base: &str) -> String {
    let mut n = 1;
    while taken.contains(&format!("{base}{n}")) {
        n += 1;
    }
    let name = format!("{base}{n}");
    taken.insert(name.clone());
    name
}

/// The constant each value was defined as (for every `const` in the function).
pub fn constants(f: &Function) -> HashMap<ValueId, Value> {
    let mut out = HashMap::default();
    f.body.walk(&mut |s| {
        if let Op::Const(c) = &s.op {
            out.insert(s.defs[0], c.clone());
        }
    });
    out
}

/// An int vector constant as `i64`s.
pub fn int_vec(v: &Value) -> Option<Vec<i64>> {
    match v {
        Value::Array(a) if a.shape.len() == 1 => v.as_int_vec(),
        _ => None,
    }
}

pub fn int_scalar(v: &Value) -> Option<i64> {
    match v {
        Value::Scalar(Scalar::Int(BaseType::Int, x)) => Some(*x),
        _ => None,
    }
}

pub fn int_ty() -> Ty {
    Ty::new(Elem::Base(BaseType::Int), Shape::scalar())
}

pub fn bool_ty() -> Ty {
    Ty::new(Elem::Base(BaseType::Bool), Shape::scalar())
}

pub fn int_vec_ty(n: Option<usize>) -> Ty {
    Ty::new(
        Elem::Base(BaseType::Int),
        match n {
            Some(n) => Shape::known(&[n]),
            None => Shape::rank(1),
        },
    )
}

/// Appends `v = const c` to `out`.
pub fn emit_const(f: &mut Function, out: &mut Vec<Stmt>, c: Value, span: Span) -> ValueId {
    let v = f.new_value(Ty::of_value(&c), None);
    out.push(Stmt::new(vec![v], Op::Const(c), span));
    v
}

/// Appends `v = prim p(args)` of type `ty` to `out`.
pub fn emit_prim(f: &mut Function, out: &mut Vec<Stmt>, p: Prim, args: Vec<ValueId>, ty: Ty, span: Span) -> ValueId {
    let v = f.new_value(ty, None);
    out.push(Stmt::new(vec![v], Op::prim(p, args), span));
    v
}

/// Appends `c = sel([k], v) unchecked`: component `k` of an int vector `v` that
/// has more than `k` components (a shape or a bound vector of known length).
pub fn emit_component(f: &mut Function, out: &mut Vec<Stmt>, v: ValueId, k: usize, span: Span) -> ValueId {
    let kc = emit_const(f, out, Value::int_vector(&[k as i64]), span);
    let c = f.new_value(int_ty(), None);
    out.push(Stmt::new(
        vec![c],
        Op::Prim { prim: Prim::Sel, args: vec![kc, v], checked: false, in_place: false },
        span,
    ));
    c
}

/// Whether a primitive can fail at run time (beyond what checks before it catch).
pub fn prim_may_fail(p: &Prim) -> bool {
    use crate::interp::ops::BinOp;
    match p {
        Prim::Bin(BinOp::Div | BinOp::Mod | BinOp::AplMod) => true,
        Prim::Bin(_) | Prim::Un(_) | Prim::Conv(_) | Prim::Math(_) => false,
        Prim::Dim | Prim::Shape | Prim::Size | Prim::Hide(_) => false,
        Prim::Vect2Offset => false,
        // Made only of a with-loop whose selections were proved in bounds.
        Prim::MatMul => false,
        _ => true,
    }
}

/// Whether a statement may raise a run-time error or has an effect (nested
/// blocks included). Such statements are not moved across each other, and not
/// moved to where they could run more often.
pub fn may_fail(op: &Op) -> bool {
    match op {
        Op::Const(_) | Op::Array(_) | Op::Narrow(_) => false,
        Op::Prim { prim, .. } => prim_may_fail(prim) || prim.has_effect(),
        Op::Call { .. } | Op::Check(_) | Op::Fail { .. } | Op::Pattern { .. } | Op::Loop { .. } => true,
        Op::If { then_block, else_block, .. } => block_may_fail(then_block) || block_may_fail(else_block),
        Op::With(_) => true,
    }
}

pub fn block_may_fail(b: &Block) -> bool {
    b.stmts.iter().any(|s| may_fail(&s.op))
}

/// Per function: whether calling it may have an effect (printing), directly or
/// through the functions it calls.
pub fn effectful_functions(m: &Module) -> Vec<bool> {
    let n = m.functions.len();
    let mut effect = vec![false; n];
    let mut calls: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, f) in m.functions.iter().enumerate() {
        f.body.walk(&mut |s| match &s.op {
            Op::Prim { prim, .. } if prim.has_effect() => effect[i] = true,
            Op::Call { func, .. } => calls[i].push(func.0 as usize),
            Op::With(w) => {
                for op in &w.ops {
                    if let WithOp::Fold { fun, .. } | WithOp::Scan { fun, .. } = op {
                        calls[i].extend(fun.callee().map(|g| g.0 as usize));
                    }
                }
            }
            _ => {}
        });
    }
    loop {
        let mut changed = false;
        for i in 0..n {
            if !effect[i] && calls[i].iter().any(|c| effect.get(*c).copied().unwrap_or(true)) {
                effect[i] = true;
                changed = true;
            }
        }
        if !changed {
            return effect;
        }
    }
}

/// The functions each function calls (calls, fold and scan functions), deduplicated.
pub fn callees(f: &Function) -> Vec<FuncId> {
    let mut out = Vec::new();
    f.body.walk(&mut |s| match &s.op {
        Op::Call { func, .. } if !out.contains(func) => out.push(*func),
        Op::With(w) => {
            for op in &w.ops {
                if let WithOp::Fold { fun, .. } | WithOp::Scan { fun, .. } = op
                    && let Some(g) = fun.callee().filter(|g| !out.contains(g))
                {
                    out.push(g);
                }
            }
        }
        _ => {}
    });
    out
}

/// Which functions can reach themselves through calls.
pub fn recursive_functions(m: &Module) -> Vec<bool> {
    let n = m.functions.len();
    let edges: Vec<Vec<FuncId>> = m.functions.iter().map(callees).collect();
    (0..n)
        .map(|start| {
            let mut seen = vec![false; n];
            let mut stack: Vec<usize> = edges[start].iter().map(|f| f.0 as usize).collect();
            while let Some(x) = stack.pop() {
                if x == start {
                    return true;
                }
                if x < n && !seen[x] {
                    seen[x] = true;
                    stack.extend(edges[x].iter().map(|f| f.0 as usize));
                }
            }
            false
        })
        .collect()
}

/// Every function index, callees before their callers (a depth-first
/// post-order of the call graph; members of a cycle in some order).
pub fn callees_first(m: &Module) -> Vec<usize> {
    let n = m.functions.len();
    let edges: Vec<Vec<usize>> =
        m.functions.iter().map(|f| callees(f).into_iter().map(|g| g.0 as usize).filter(|&g| g < n).collect()).collect();
    let mut state = vec![0u8; n]; // 0: unseen, 1: on the path, 2: done
    let mut order = Vec::with_capacity(n);
    for root in 0..n {
        if state[root] != 0 {
            continue;
        }
        // (function, next edge to follow)
        let mut stack = vec![(root, 0usize)];
        state[root] = 1;
        while let Some((f, k)) = stack.last_mut() {
            let f = *f;
            if let Some(&g) = edges[f].get(*k) {
                *k += 1;
                if state[g] == 0 {
                    state[g] = 1;
                    stack.push((g, 0));
                }
            } else {
                state[f] = 2;
                order.push(f);
                stack.pop();
            }
        }
    }
    order
}

/// Number of statements, nested ones included.
pub fn size(b: &Block) -> usize {
    let mut n = 0;
    b.walk(&mut |_| n += 1);
    n
}

/// A value's static extents, if its shape is known exactly.
pub fn extents(f: &Function, v: ValueId) -> Option<Vec<usize>> {
    f.ty(v).shape.extents()
}

/// Whether two blocks compute the same (equal up to a renaming of the values
/// they define; `map` pairs values of `a` with values of `b`, pre-seeded with
/// bound values, and is extended).
pub fn alpha_eq_block(f: &Function, a: &Block, b: &Block, map: &mut HashMap<ValueId, ValueId>) -> bool {
    if a.stmts.len() != b.stmts.len() || a.yields.len() != b.yields.len() {
        return false;
    }
    for (x, y) in a.stmts.iter().zip(&b.stmts) {
        if !alpha_eq_stmt(f, x, y, map) {
            return false;
        }
    }
    a.yields.iter().zip(&b.yields).all(|(x, y)| map.get(x).copied().unwrap_or(*x) == *y)
}

fn alpha_eq_stmt(f: &Function, x: &Stmt, y: &Stmt, map: &mut HashMap<ValueId, ValueId>) -> bool {
    if x.defs.len() != y.defs.len() || x.blame != y.blame {
        return false;
    }
    let (ox, oy) = (x.op.operands(), y.op.operands());
    if ox.len() != oy.len() || ox.iter().zip(&oy).any(|(p, q)| map.get(p).copied().unwrap_or(*p) != *q) {
        return false;
    }
    let same_kind = match (&x.op, &y.op) {
        (Op::Const(a), Op::Const(b)) => {
            crate::ir::print::const_text(a) == crate::ir::print::const_text(b) && f.ty(x.defs[0]) == f.ty(y.defs[0])
        }
        (Op::Prim { prim: p, checked: c, in_place: i, .. }, Op::Prim { prim: q, checked: d, in_place: j, .. }) => {
            p == q && c == d && i == j
        }
        (Op::Call { func: a, .. }, Op::Call { func: b, .. }) => a == b,
        (Op::Array(_), Op::Array(_)) => true,
        (Op::Narrow(_), Op::Narrow(_)) => f.ty(x.defs[0]) == f.ty(y.defs[0]),
        (Op::Check(a), Op::Check(b)) => {
            a.code == b.code
                && a.message == b.message
                && std::mem::discriminant(&a.check) == std::mem::discriminant(&b.check)
        }
        (Op::Fail { code: a, message: m, .. }, Op::Fail { code: b, message: n, .. }) => a == b && m == n,
        (Op::If { then_block: t1, else_block: e1, .. }, Op::If { then_block: t2, else_block: e2, .. }) => {
            for (d1, d2) in x.defs.iter().zip(&y.defs) {
                map.insert(*d1, *d2);
            }
            return alpha_eq_block(f, t1, t2, map) && alpha_eq_block(f, e1, e2, map);
        }
        _ => false,
    };
    if !same_kind {
        return false;
    }
    for (d1, d2) in x.defs.iter().zip(&y.defs) {
        if f.ty(*d1).elem != f.ty(*d2).elem {
            return false;
        }
        map.insert(*d1, *d2);
    }
    true
}

/// The values a statement reads from outside itself: its operands and what its
/// nested blocks read that they do not define.
pub fn free_uses(s: &Stmt) -> crate::HashSet<ValueId> {
    let mut used = crate::HashSet::default();
    let mut defined = crate::HashSet::default();
    fn go(op: &Op, used: &mut crate::HashSet<ValueId>, defined: &mut crate::HashSet<ValueId>) {
        op.for_each_operand(&mut |v| {
            used.insert(v);
        });
        defined.extend(op.bound_values());
        op.walk_blocks(&mut |b| {
            for s in &b.stmts {
                defined.extend(s.defs.iter().copied());
                go(&s.op, used, defined);
            }
            used.extend(b.yields.iter().copied());
        });
    }
    go(&s.op, &mut used, &mut defined);
    used.retain(|v| !defined.contains(v));
    used
}

/// Whether statement `s` reads any of `values` from outside itself (LICM asks
/// this of every statement of every loop body: see [`for_each_free_use`]).
pub fn reads_any(s: &Stmt, values: &crate::HashSet<ValueId>) -> bool {
    let mut any = false;
    for_each_free_use(s, &mut |v| any |= values.contains(&v));
    any
}

/// Calls `f` on each value [`free_uses`] gives, without building that set for
/// a statement without nested blocks (its operands, in order, a value read
/// twice given twice).
pub fn for_each_free_use(s: &Stmt, f: &mut dyn FnMut(ValueId)) {
    match &s.op {
        Op::If { .. } | Op::Loop { .. } | Op::With(_) => free_uses(s).into_iter().for_each(f),
        op => op.for_each_operand(f),
    }
}

/// Every value a block defines, nested blocks and bound values included.
pub fn defined_in(b: &Block) -> crate::HashSet<ValueId> {
    let mut out = crate::HashSet::default();
    b.walk(&mut |s| {
        out.extend(s.defs.iter().copied());
        out.extend(s.op.bound_values());
    });
    out
}

/// Whether the boxes `lower <= iv < upper` together cover `0 <= iv < frame`:
/// every cell of the grid their bounds cut the frame into lies in some box.
/// Gives up (false) on grids of more than 4096 cells. Code generation skips
/// filling a `genarray` result with its default when its parts tile the frame
/// (statically, or at run time in `wl_fill_uncovered`).
pub fn boxes_cover(boxes: &[(Vec<i64>, Vec<i64>)], frame: &[i64]) -> bool {
    let n = frame.len();
    if boxes.iter().any(|(l, u)| l.len() != n || u.len() != n) || frame.iter().any(|&e| e < 0) {
        return false;
    }
    let mut cuts: Vec<Vec<i64>> = Vec::with_capacity(n);
    for (d, &extent) in frame.iter().enumerate() {
        let mut c: Vec<i64> = vec![0, extent];
        for (l, u) in boxes {
            c.push(l[d].clamp(0, extent));
            c.push(u[d].clamp(0, extent));
        }
        c.sort_unstable();
        c.dedup();
        cuts.push(c);
    }
    let cells: usize = cuts.iter().map(|c| c.len() - 1).product();
    if cells > 4096 {
        return false;
    }
    let mut at = vec![0usize; n];
    for _ in 0..cells {
        // The grid cell's first index; empty cells (zero extent) need nothing.
        let corner: Vec<i64> = (0..n).map(|d| cuts[d][at[d]]).collect();
        let empty = (0..n).any(|d| cuts[d][at[d]] == cuts[d][at[d] + 1]);
        if !empty && !boxes.iter().any(|(l, u)| (0..n).all(|d| l[d] <= corner[d] && corner[d] < u[d])) {
            return false;
        }
        for d in (0..n).rev() {
            at[d] += 1;
            if at[d] + 1 < cuts[d].len() {
                break;
            }
            at[d] = 0;
        }
    }
    true
}

/// Every statement nested in `b` by the values it defines (with the index of
/// each among its definitions).
pub fn block_defs(b: &Block) -> HashMap<ValueId, (&Stmt, usize)> {
    fn collect<'a>(b: &'a Block, defs: &mut HashMap<ValueId, (&'a Stmt, usize)>) {
        for t in &b.stmts {
            for (k, d) in t.defs.iter().enumerate() {
                defs.insert(*d, (t, k));
            }
            t.op.walk_blocks(&mut |inner| collect(inner, defs));
        }
    }
    let mut defs = HashMap::default();
    collect(b, &mut defs);
    defs
}

/// Whether a loop keeps the shape of its carried array `p`: `y`, what the
/// body yields for it, is `p` or made from it by operations that keep shapes
/// (`defs`: the body's statements, [`block_defs`]); `init_shape` is the
/// shape vector of `p`'s initial value, if one holds it.
pub fn shaped_like(
    f: &Function,
    defs: &HashMap<ValueId, (&Stmt, usize)>,
    y: ValueId,
    p: ValueId,
    init_shape: Option<ValueId>,
) -> bool {
    shaped_like_at(f, defs, y, p, init_shape, 0)
}

/// Whether `y` (defined in a loop body, `defs`) has the shape of `p`: it is
/// `p`, or made from it by operations that keep shapes (see
/// `simplify`'s loop shapes and [`shape_values`]).
fn shaped_like_at(
    f: &Function,
    defs: &HashMap<ValueId, (&Stmt, usize)>,
    y: ValueId,
    p: ValueId,
    init_shape: Option<ValueId>,
    depth: u32,
) -> bool {
    if y == p {
        return true;
    }
    if depth > 16 {
        return false;
    }
    let Some(&(t, k)) = defs.get(&y) else { return false };
    let like = |v: ValueId| shaped_like_at(f, defs, v, p, init_shape, depth + 1);
    match &t.op {
        Op::With(w) => match &w.ops[k] {
            WithOp::Modarray { array } => like(*array),
            // `{ [i, j] -> … }` over `shape(q)` (or the initial value's shape
            // vector): scalar cells over q's whole shape.
            WithOp::Genarray { shape, default } => {
                let scalar_cells = !w.parts.is_empty()
                    && w.parts.iter().all(|part| f.ty(w.element_yield(part, k)).shape.is_scalar())
                    && default.is_none_or(|d| f.ty(d).shape.is_scalar());
                let of_shape = |v: ValueId| match defs.get(&v).map(|(t, _)| &t.op) {
                    Some(Op::Prim { prim: Prim::Shape, args, .. }) => Some(args[0]),
                    _ => None,
                };
                scalar_cells && (Some(*shape) == init_shape || of_shape(*shape).is_some_and(like))
            }
            _ => false,
        },
        Op::Prim { prim, args, .. } => match prim {
            Prim::Modarray | Prim::IdxModarray | Prim::Un(_) | Prim::Conv(_) => like(args[0]),
            Prim::Math(_) if args.len() == 1 => like(args[0]),
            Prim::Bin(_) | Prim::Math(_) if args.len() == 2 => {
                let (a, b) = (args[0], args[1]);
                match (f.ty(a).shape.is_scalar(), f.ty(b).shape.is_scalar()) {
                    (true, true) => false,
                    (true, false) => like(b),
                    (false, true) => like(a),
                    // Two arrays have equal shapes (or the operation failed);
                    // one of unknown rank may be a scalar at run time.
                    (false, false) => {
                        (f.ty(a).shape.min_rank() >= 1 && like(a)) || (f.ty(b).shape.min_rank() >= 1 && like(b))
                    }
                }
            }
            _ => false,
        },
        Op::If { then_block, else_block, .. } => like(then_block.yields[k]) && like(else_block.yields[k]),
        _ => false,
    }
}

/// Whether `y` (defined in a loop body, `defs`) is a `genarray` of scalar
/// cells whose shape vector `reader` reads as `extents`: the shape of a
/// `cat` of an array's border rows and interior, `[1 + (m - 2) + 1, n]`, is
/// `[m, n]` (what [`shaped_like`], which looks at values, does not see).
/// Returns that shape vector.
pub fn genarray_of_extents(
    f: &Function,
    reader: &super::index::Reader,
    defs: &HashMap<ValueId, (&Stmt, usize)>,
    y: ValueId,
    extents: &[super::index::Affine],
) -> Option<ValueId> {
    let &(t, k) = defs.get(&y)?;
    let Op::With(w) = &t.op else { return None };
    let WithOp::Genarray { shape, default } = &w.ops[k] else { return None };
    let scalar_cells = !w.parts.is_empty()
        && w.parts.iter().all(|part| f.ty(w.element_yield(part, k)).shape.is_scalar())
        && default.is_none_or(|d| f.ty(d).shape.is_scalar());
    (scalar_cells && reader.vector(*shape).is_some_and(|v| v == extents)).then_some(*shape)
}

/// For arrays whose shape is held in a value: that value. `shape(a)` (the
/// first one met), `reshape(s, x)` (shape `s`), genarray with-loops of
/// scalar cells (their frame shape), and arrays a loop carries without
/// changing their shape ([`shaped_like`]: their initial value's).
pub fn shape_values(f: &Function) -> HashMap<ValueId, ValueId> {
    let mut out = HashMap::default();
    f.body.walk(&mut |s| match &s.op {
        // Only loops carrying an array of known shape: indexing the body costs.
        Op::Loop { init, params, body, .. } if init.iter().any(|x| out.contains_key(x)) => {
            let defs = block_defs(body);
            for (k, (&p, x)) in params.iter().zip(init).enumerate() {
                let Some(&sv) = out.get(x) else { continue };
                if body.yields.get(k).is_some_and(|&y| shaped_like(f, &defs, y, p, Some(sv))) {
                    out.entry(p).or_insert(sv);
                    if let Some(&d) = s.defs.get(k) {
                        out.entry(d).or_insert(sv);
                    }
                }
            }
        }
        Op::Prim { prim: Prim::Shape, args, .. } => {
            out.entry(args[0]).or_insert(s.defs[0]);
        }
        Op::Prim { prim: Prim::Reshape, args, .. } => {
            out.entry(s.defs[0]).or_insert(args[0]);
        }
        Op::With(w) => {
            for (k, op) in w.ops.iter().enumerate() {
                if let WithOp::Genarray { shape, .. } = op {
                    let scalar_cells = w.parts.iter().all(|p| f.ty(w.element_yield(p, k)).shape.is_scalar());
                    if scalar_cells {
                        out.entry(s.defs[k]).or_insert(*shape);
                    }
                }
            }
        }
        _ => {}
    });
    out
}

/// Whether two int vectors are the same shape value: one value, or `shape(x)`
/// of one array `x` twice.
pub fn same_shape_value(defs: &dyn super::index::Defs, a: ValueId, b: ValueId) -> bool {
    use super::index::Def;
    a == b
        || matches!((defs.def(a), defs.def(b)),
            (Some(Def::Prim(Prim::Shape, x)), Some(Def::Prim(Prim::Shape, y))) if x[0] == y[0])
}

/// Whether a with-loop part's index ranges over all of `[0, upper)` (step and
/// width aside): its lower bound is zeros, a constant or `0 * upper` (what the
/// front end makes of a rank-generic `.` lower bound).
pub fn zero_lower(defs: &dyn super::index::Defs, part: &Part) -> bool {
    use super::index::Def;
    let zero_scalar = |v: &ValueId| matches!(defs.def(*v), Some(Def::Const(c)) if int_scalar(&c) == Some(0));
    match defs.def(part.lower) {
        Some(Def::Const(c)) => int_vec(&c).is_some_and(|v| v.iter().all(|&x| x == 0)),
        Some(Def::Prim(Prim::Bin(crate::interp::ops::BinOp::Mul), args)) if args.len() == 2 => {
            (zero_scalar(&args[0]) && args[1] == part.upper) || (zero_scalar(&args[1]) && args[0] == part.upper)
        }
        _ => false,
    }
}

/// How many indices a part's bounds span (steps ignored: an upper bound), when
/// both bounds are constants.
pub fn static_iterations(defs: &dyn super::index::Defs, part: &Part) -> Option<i64> {
    use super::index::Def;
    let vector = |v: ValueId| match defs.def(v) {
        Some(Def::Const(c)) => int_vec(&c),
        _ => None,
    };
    let (lo, hi) = (vector(part.lower)?, vector(part.upper)?);
    Some(lo.iter().zip(&hi).map(|(l, h)| (h - l).max(0)).fold(1i64, |n, e| n.saturating_mul(e)))
}

/// An estimate of the work one index of a part does, in units of a simple
/// element (1): nested loops and with-loops count their iterations (a static
/// count where the bounds are constants, else [`UNKNOWN_TRIPS`]) times their
/// bodies' work, a call its callee's work (`calls`, from [`function_work`];
/// an empty slice counts calls as nothing), a conditional its costlier
/// branch. What decides whether a part is worth splitting over threads: a
/// part of few indices that each run a loop (an interchanged fold's rows) or
/// call a costly function (a determinant's minors) is as much work as a
/// large flat one. Capped at [`WORK_CAP`].
pub fn part_work(defs: &dyn super::index::Defs, part: &Part, calls: &[i64]) -> i64 {
    block_work(defs, &part.body, 0, true, calls)
}

/// [`part_work`] counting only nested loops and calls (with-loops nested in a
/// part are usually small and fixed: a determinant's minors), for the
/// compile-time decision whether a part gets a parallel variant at all.
pub fn part_loop_work(defs: &dyn super::index::Defs, part: &Part, calls: &[i64]) -> i64 {
    block_work(defs, &part.body, 0, false, calls)
}

/// Iterations assumed for a loop or with-loop whose count is not a constant.
pub const UNKNOWN_TRIPS: i64 = 256;

/// The most work [`part_work`] and [`function_work`] estimate: also what a
/// recursive function costs (its depth is not known).
pub const WORK_CAP: i64 = 1 << 20;

/// Per function: an estimate of the work one call does, in [`part_work`]'s
/// units (its body's work, calls included); [`WORK_CAP`] for a function that
/// can reach itself.
pub fn function_work(m: &Module) -> Vec<i64> {
    let recursive = recursive_functions(m);
    let mut work = vec![WORK_CAP; m.functions.len()];
    // Callees first: a caller's estimate reads its callees' (a member of a
    // cycle is recursive and keeps the cap).
    for i in callees_first(m) {
        if !recursive[i] {
            let f = &m.functions[i];
            work[i] = block_work(&super::index::defs(f), &f.body, 0, true, &work);
        }
    }
    work
}

fn block_work(defs: &dyn super::index::Defs, b: &Block, depth: usize, withs: bool, calls: &[i64]) -> i64 {
    let mut work: i64 = 1;
    for s in &b.stmts {
        let inner = match &s.op {
            Op::Loop { body, .. } if depth < 4 => {
                UNKNOWN_TRIPS.saturating_mul(block_work(defs, body, depth + 1, withs, calls))
            }
            Op::With(w) if depth < 4 && withs => w
                .parts
                .iter()
                .map(|p| {
                    static_iterations(defs, p).unwrap_or(UNKNOWN_TRIPS).saturating_mul(block_work(
                        defs,
                        &p.body,
                        depth + 1,
                        withs,
                        calls,
                    ))
                })
                .fold(0i64, i64::saturating_add),
            Op::Loop { .. } => WORK_CAP,
            Op::With(_) if withs => WORK_CAP,
            Op::Call { func, .. } => calls.get(func.0 as usize).copied().unwrap_or(0),
            Op::If { then_block, else_block, .. } if depth < 4 => block_work(defs, then_block, depth + 1, withs, calls)
                .max(block_work(defs, else_block, depth + 1, withs, calls)),
            _ => 0,
        };
        work = work.saturating_add(inner).min(WORK_CAP);
    }
    work
}

/// Whether a with-loop part can run as one flat loop over the row-major
/// offsets `0 .. prod(upper)` of its frame: it binds neither its index vector
/// nor index scalars (only, if anything, its offset), it is dense, ranges over
/// all of `[0, upper)`, and every result is a genarray over `upper` or a fold.
/// Rank-generic code after index vector elimination (`bneg` on `bool[*]`) runs
/// like code of rank 1 this way, instead of stepping an odometer per element;
/// code of static rank 2 or more, instead of a loop nest whose inner loop
/// restarts every row (the back end's `runs_flat`).
pub fn flat_part(defs: &dyn super::index::Defs, w: &With, part: &Part) -> bool {
    part.index.is_none()
        && part.scalars.is_none()
        && part.step.is_none()
        && part.width.is_none()
        && zero_lower(defs, part)
        && w.ops.iter().all(|op| match op {
            WithOp::Genarray { shape, .. } => same_shape_value(defs, part.upper, *shape),
            WithOp::Fold { .. } => true,
            _ => false,
        })
}

#[cfg(test)]
mod boxes_tests {
    use super::boxes_cover;

    #[test]
    fn border_strips_and_interior_cover_the_frame() {
        let strips = vec![
            (vec![0, 0], vec![1, 6]),
            (vec![1, 0], vec![4, 1]),
            (vec![1, 1], vec![4, 5]),
            (vec![1, 5], vec![4, 6]),
            (vec![4, 0], vec![5, 6]),
        ];
        assert!(boxes_cover(&strips, &[5, 6]));
        // Without the right-hand strip, column 5 of rows 1..4 is left.
        assert!(!boxes_cover(&strips[..3].iter().chain(&strips[4..]).cloned().collect::<Vec<_>>(), &[5, 6]));
        assert!(boxes_cover(&[], &[0, 3]));
        assert!(!boxes_cover(&[], &[2, 3]));
    }
}
