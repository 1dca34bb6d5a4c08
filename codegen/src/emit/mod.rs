//! IR to LLVM IR.
//!
//! Every IR function becomes an LLVM function `void f(ctx, out₀…, args…)`:
//! results go to out-pointers, run-time errors are recorded in the context and
//! the function returns at once (callers test `ctx->error` after each call).
//! Values with a statically scalar type are LLVM scalars; everything else is a
//! pointer to a runtime array (`WlArray`), reference counted:
//!
//! * a definition owns one reference; operands only borrow;
//! * a block's values die after their last use (a `wl_dec` there), unless the
//!   block yields them (ownership moves to the statement that runs the block);
//! * a yield of a value the block does not own takes a new reference;
//! * function parameters are borrowed from the caller;
//! * in-place updates and with-loop buffer reuse consume their array: moved when
//!   it dies there, else a new reference is taken first (so the runtime copies).
//!
//! With-loops become loop nests (`withloop.rs`); scalar arithmetic follows the
//! reference interpreter's semantics exactly (`scalar.rs`); structural primitives
//! and printing call the runtime's generic path.

mod ops;
mod parallel;
mod scalar;
mod scan;
mod tile;
mod withloop;

use compiler_core::{HashMap, HashSet};

use compiler_core::interp::value::{Scalar, Value};
use compiler_core::ir::{self, Blame, Block, Function, Op, Stmt, ValueId, WithOp};
use compiler_core::sema::hir::Elem;
use compiler_core::sema::ty::{Shape, Ty};
use compiler_core::span::{SourceMap, Span};
use compiler_core::syntax::ast::BaseType;
use inkwell::AddressSpace;
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValue, BasicValueEnum, FunctionValue, InstructionValue, IntValue, PointerValue,
};

use crate::rt::{self, Rt};
use crate::{CodegenError, Options, TargetSpec};

pub(crate) type R<T> = Result<T, CodegenError>;

impl From<inkwell::builder::BuilderError> for CodegenError {
    fn from(e: inkwell::builder::BuilderError) -> Self {
        CodegenError::Bug(format!("LLVM builder: {e}"))
    }
}

/// Whether values of this type are LLVM scalars (else array pointers).
pub(crate) fn scalar_repr(ty: &Ty) -> bool {
    ty.elem != Elem::String && matches!(&ty.shape, Shape::Fixed(d) if d.is_empty())
}

pub(crate) fn base(ty: &Ty) -> BaseType {
    match ty.elem {
        Elem::Base(b) => b,
        Elem::String => BaseType::Char,
    }
}

pub(crate) fn signed(b: BaseType) -> bool {
    matches!(b, BaseType::Byte | BaseType::Short | BaseType::Int | BaseType::Long | BaseType::LongLong)
}

/// The element type code the runtime uses.
pub(crate) fn elem_code(b: BaseType) -> u64 {
    BaseType::ALL.iter().position(|x| *x == b).unwrap_or(4) as u64
}

/// The functions one part of a module compiled in parts defines (`own`), and
/// those called across parts (`shared`), per IR function.
#[derive(Clone, Debug)]
pub(crate) struct Partition {
    pub own: Vec<bool>,
    pub shared: Vec<bool>,
    /// Distinguishes this compilation's shared functions from another's.
    pub suffix: String,
}

/// The module-wide state.
pub(crate) struct Emitter<'ctx, 'a> {
    pub ctx: &'ctx Context,
    pub module: Module<'ctx>,
    pub b: Builder<'ctx>,
    pub ir: &'a ir::Module,
    pub sources: &'a SourceMap,
    pub rt: Rt<'ctx>,
    pub funcs: Vec<FunctionValue<'ctx>>,
    strings: HashMap<Vec<u8>, PointerValue<'ctx>>,
    /// Constant arrays (static, never counted or freed): header -> elements.
    const_arrays: HashMap<PointerValue<'ctx>, PointerValue<'ctx>>,
    locs: HashMap<Span, PointerValue<'ctx>>,
    counter: usize,
    pub parallel: bool,
    /// Folds of floats combine strictly in order ([`crate::Options::exact_folds`]).
    pub exact_folds: bool,
    /// When the module is compiled in parts (one LLVM module per thread),
    /// which functions this emitter defines.
    pub partition: Option<Partition>,
    /// Parts whose iteration count is known here and below this run
    /// sequentially: no chunk function is emitted for them (a copy of the
    /// part's code that the run-time threshold would never pick).
    pub static_parallel_min: i64,
    /// Large results may be stored non-temporally (x86-64 with optimisation,
    /// see [`parallel::mark_streaming_stores`]): a flat loop of run-time
    /// length then gets a streaming copy of its chunk function as well.
    pub streams: bool,
    /// The back edges of the loops emitted as running a few iterations
    /// ([`Trips::Few`]): what [`Emitter::finish`] does not count as a loop
    /// when it looks for the functions that only drive others.
    few_latches: std::cell::RefCell<Vec<InstructionValue<'ctx>>>,
    /// Every chunk function emitted ([`parallel`]): what a function that
    /// only drives hands its work to ([`Emitter::finish`]).
    pub(crate) chunk_funcs: Vec<inkwell::values::FunctionValue<'ctx>>,
    /// Type-based alias tags (LLVM `!tbaa`): array headers (rank, size, data
    /// pointer, extents) and elements never overlap, so a store to an
    /// element cannot change a header. Without this LLVM reloads an array's
    /// data pointer after every element store and no loop vectorises.
    tbaa: Tbaa<'ctx>,
    /// Per IR function: whether calling it may print (directly or through
    /// its callees). A with-loop part that calls such a function runs on
    /// one thread; one that calls only pure functions may be split.
    pub effectful: Vec<bool>,
    /// Per IR function: what one call costs ([`compiler_core::opt::util::function_work`]),
    /// so that a part of few indices that call a costly function is split.
    pub call_work: Vec<i64>,
    /// Per IR function: whether another IR function calls it (otherwise only
    /// its C function does).
    pub called: Vec<bool>,
    /// Per IR function: whether only C code calls it, itself or through an
    /// entry's dispatch wrapper that only its C function calls: it runs once
    /// per call of the entry ([`Emitter::finish`]).
    pub called_from_c: Vec<bool>,
}

/// What the emitter knows of the whole module, computed once per compile
/// (a module compiled in parts has one emitter per part).
#[derive(Clone, Debug)]
pub(crate) struct Facts {
    pub effectful: Vec<bool>,
    pub call_work: Vec<i64>,
    pub called: Vec<bool>,
    pub called_from_c: Vec<bool>,
}

impl Facts {
    /// The analyses of `ir`.
    pub fn of(ir: &ir::Module) -> Facts {
        let mut called = vec![false; ir.functions.len()];
        for f in &ir.functions {
            for g in compiler_core::opt::util::callees(f) {
                if let Some(c) = called.get_mut(g.0 as usize) {
                    *c = true;
                }
            }
        }
        // Called from SaC code: by anything but an entry's wrapper that only
        // C code calls.
        let mut from_code = vec![false; ir.functions.len()];
        for (k, f) in ir.functions.iter().enumerate() {
            if f.kind == ir::FunctionKind::Wrapper && !called[k] {
                continue;
            }
            for g in compiler_core::opt::util::callees(f) {
                if let Some(c) = from_code.get_mut(g.0 as usize) {
                    *c = true;
                }
            }
        }
        Facts {
            effectful: compiler_core::opt::util::effectful_functions(ir),
            call_work: compiler_core::opt::util::function_work(ir),
            called,
            called_from_c: from_code.into_iter().map(|c| !c).collect(),
        }
    }
}

/// The access tags of [`Emitter::tbaa`]: array headers, and array elements by
/// their memory type. Elements of different memory types never overlap (an
/// array's data is only ever accessed as its element type; buffers are reused
/// only for results of the same element type), so an `int` shape vector read
/// in a loop that stores `double`s is loaded once, not per iteration.
struct Tbaa<'ctx> {
    kind: u32,
    header: inkwell::values::MetadataValue<'ctx>,
    /// The type node all element types descend from.
    elem_ty: inkwell::values::MetadataValue<'ctx>,
    /// Per element type: the access tag (named after its memory type, so
    /// types stored alike, such as `bool` and `byte`, share one).
    elems: std::cell::RefCell<HashMap<BaseType, inkwell::values::MetadataValue<'ctx>>>,
}

impl<'ctx> Tbaa<'ctx> {
    fn new(ctx: &'ctx Context) -> Self {
        let root = ctx.metadata_node(&[ctx.metadata_string("withloop arrays").into()]);
        let zero = ctx.i64_type().const_zero();
        let header_ty = ctx.metadata_node(&[ctx.metadata_string("array header").into(), root.into(), zero.into()]);
        let elem_ty = ctx.metadata_node(&[ctx.metadata_string("array element").into(), root.into(), zero.into()]);
        Tbaa {
            kind: ctx.get_kind_id("tbaa"),
            header: ctx.metadata_node(&[header_ty.into(), header_ty.into(), zero.into()]),
            elem_ty,
            elems: std::cell::RefCell::new(HashMap::default()),
        }
    }

    /// The access tag of elements of type `b`, stored as `mem`.
    fn elem(&self, ctx: &'ctx Context, b: BaseType, mem: BasicTypeEnum<'ctx>) -> inkwell::values::MetadataValue<'ctx> {
        *self.elems.borrow_mut().entry(b).or_insert_with(|| {
            let zero = ctx.i64_type().const_zero();
            let name = format!("{} element", mem.print_to_string().to_string().trim_matches('"'));
            let ty = ctx.metadata_node(&[ctx.metadata_string(&name).into(), self.elem_ty.into(), zero.into()]);
            ctx.metadata_node(&[ty.into(), ty.into(), zero.into()])
        })
    }
}

/// Per-function state.
pub(crate) struct Fx<'ctx, 'a> {
    pub func: FunctionValue<'ctx>,
    pub irf: &'a Function,
    pub vals: HashMap<ValueId, BasicValueEnum<'ctx>>,
    pub ctxp: PointerValue<'ctx>,
    /// Where errors jump: the function returns.
    pub fail_bb: BasicBlock<'ctx>,
    pub entry_bb: BasicBlock<'ctx>,
    /// The current statement's error location (null: the caller's).
    pub loc: PointerValue<'ctx>,
    /// The constants the function defines.
    pub consts: HashMap<ValueId, &'a Value>,
    /// Index vectors that are never built: `[i, j]` literals of scalars whose
    /// only uses are offset computations and bounds checks in the same block
    /// (see [`virtual_index_vectors`]); their elements, by value.
    pub virt: std::rc::Rc<HashSet<ValueId>>,
    pub comps: HashMap<ValueId, Vec<ValueId>>,
    /// `int` values that are array offsets or index components, also as
    /// exact `i64`s: a with-loop's offset and index scalars, and sums and
    /// differences of them (`nsw`). Selections address memory with these, so
    /// LLVM sees `a[o - 2000]`, `a[o + 1]` as affine in the loop counter and
    /// vectorises; the `i32` value (wrapping, as the interpreter) serves
    /// every other use.
    pub wide: HashMap<ValueId, IntValue<'ctx>>,
    /// Shape vectors that are never built: `shape(a)` values whose only uses
    /// are selections of one extent at a constant index in the
    /// defining block (see [`shape_views`]); by value, the array `a`.
    pub shape_views: std::rc::Rc<HashMap<ValueId, ValueId>>,
    /// The function's constant, primitive and array definitions (the
    /// optimiser's view, for analyses such as [`compiler_core::opt::util::flat_part`]).
    pub defs: std::rc::Rc<HashMap<ValueId, compiler_core::opt::index::Def>>,
    /// Element pointers of arrays a with-loop updates in place, while its body
    /// runs: its reads of the array use the pointer it writes through, so LLVM
    /// sees one buffer read and written at one index.
    pub data: HashMap<ValueId, PointerValue<'ctx>>,
    /// Narrowed parameters (see [`parameter_aliases`]) and stack vectors:
    /// never counted (not owned, so never released).
    pub borrowed: std::rc::Rc<HashSet<ValueId>>,
    /// Small `int` vectors built in the frame instead of the heap (see
    /// [`stack_vectors`]).
    pub stack: std::rc::Rc<HashSet<ValueId>>,
    /// Statements of the part body being emitted that already ran at an outer
    /// loop level (a part's row reads, `withloop.rs`), by their first value:
    /// [`Emitter::block`] skips them.
    pub hoisted: HashSet<ValueId>,
    /// Offsets of constant indices, `_vect2offset_(shp, c)`, with `shp` and
    /// its extents (1..) read where the offset was computed (values, so still
    /// good where `shp` itself has been released): a chunk function
    /// recomputes such an offset from them (`parallel::RematOffset`).
    pub offset_extents: HashMap<ValueId, (ValueId, Vec<IntValue<'ctx>>, Vec<i64>)>,
    /// This is a chunk function (a parallel part's or a flat loop's). A chunk
    /// runs on a context of one thread, and when its part runs whole on the
    /// calling thread, the part's work, nested with-loops' included, was below
    /// the run-time threshold: a with-loop of static size in here gets no
    /// parallel variant of its own (`Emitter::nested_in_chunk`).
    pub in_chunk: bool,
    /// The step of a loop the back end may run in time tiles, while the
    /// loop's body is emitted (see [`TimeTile`]).
    pub time_tile: Option<TimeTile<'ctx>>,
}

/// A loop marked `tiled` (`compiler_core::opt::timetile`) whose body is
/// being emitted: its with-loop (`with`) runs as many of the `remaining`
/// steps as the runtime decides (`wl_time_tiled`, when it is emitted as a
/// parallel part) and stores that count in `steps` (else it stays 1), by
/// which the loop's counter goes up.
#[derive(Clone, Copy)]
pub(crate) struct TimeTile<'ctx> {
    pub with: ValueId,
    pub array: ValueId,
    pub remaining: IntValue<'ctx>,
    pub steps: PointerValue<'ctx>,
    pub reach: usize,
}

/// The longest vector [`stack_vectors`] builds in the frame.
const STACK_VECTOR_MAX: usize = 8;

/// The `int` vectors of static length (at most [`STACK_VECTOR_MAX`]) that
/// `f` builds from scalars (`[i, n]`), as a shape (`shape(a)`) or element-wise
/// from `int`s (`shape(a) - 1`), and only reads: as a selection's array or index with a scalar result, an offset's
/// shape or index, an operand of an element-wise primitive (whose result is
/// new), a with-loop's bounds or frame shape, a check. Never yielded,
/// returned, passed to a call, narrowed or consumed, such a vector cannot
/// outlive the frame, so code generation builds it there (an immortal
/// `WlArray` with the count of a constant) instead of allocating it: generic
/// code builds such vectors on every call (Kreye's determinant: the shape of
/// its argument and the fold's bound `[n]`, per minor). `skip`: values that
/// are never built at all.
pub(crate) fn stack_vectors(f: &Function, skip: &dyn Fn(ValueId) -> bool) -> HashSet<ValueId> {
    use compiler_core::sema::hir::Prim;
    let int_scalar = |v: ValueId| {
        let t = f.ty(v);
        scalar_repr(t) && t.elem == Elem::Base(BaseType::Int)
    };
    let mut candidates: HashSet<ValueId> = HashSet::default();
    f.body.walk(&mut |s| {
        let [d] = s.defs.as_slice() else { return };
        let t = f.ty(*d);
        let short = matches!(&t.shape, Shape::Fixed(e) if e.len() == 1 && e[0].is_some_and(|n| (1..=STACK_VECTOR_MAX).contains(&n)));
        if skip(*d) || t.elem != Elem::Base(BaseType::Int) || !short {
            return;
        }
        let built = match &s.op {
            Op::Array(elems) => elems.iter().all(|e| int_scalar(*e)),
            Op::Prim { prim: Prim::Shape, args, .. } => {
                args.len() == 1 && !scalar_repr(f.ty(args[0])) && f.ty(args[0]).elem != Elem::String
            }
            // `shape(a) - 1`: a new array of the operands' elements.
            Op::Prim { prim: Prim::Bin(_) | Prim::Un(_), args, .. } => {
                args.iter().all(|a| f.ty(*a).elem == Elem::Base(BaseType::Int))
            }
            _ => false,
        };
        if built {
            candidates.insert(*d);
        }
    });
    fn visit(f: &Function, b: &Block, candidates: &mut HashSet<ValueId>) {
        for y in &b.yields {
            candidates.remove(y);
        }
        for s in &b.stmts {
            let reads: Vec<ValueId> = match &s.op {
                Op::Prim { prim: Prim::Sel | Prim::IdxSel, args, .. }
                    if s.defs.iter().all(|d| scalar_repr(f.ty(*d))) =>
                {
                    args.clone()
                }
                Op::Prim {
                    prim:
                        Prim::Vect2Offset
                        | Prim::Shape
                        | Prim::Dim
                        | Prim::Size
                        | Prim::Bin(_)
                        | Prim::Un(_)
                        | Prim::Conv(_),
                    args,
                    ..
                } => args.clone(),
                Op::Check(_) => s.op.operands(),
                Op::With(w) => {
                    let mut r: Vec<ValueId> = Vec::new();
                    for p in &w.parts {
                        r.extend([p.lower, p.upper]);
                        r.extend(p.step);
                        r.extend(p.width);
                    }
                    for op in &w.ops {
                        match op {
                            WithOp::Genarray { shape, .. } | WithOp::Scan { shape, .. } | WithOp::Filter { shape } => {
                                r.push(*shape)
                            }
                            WithOp::Modarray { .. } | WithOp::Fold { .. } => {}
                        }
                    }
                    r
                }
                _ => Vec::new(),
            };
            for o in s.op.operands() {
                if !reads.contains(&o) {
                    candidates.remove(&o);
                }
            }
            for o in consumed(s) {
                candidates.remove(&o);
            }
            s.op.walk_blocks(&mut |inner| visit(f, inner, candidates));
        }
    }
    visit(f, &f.body, &mut candidates);
    candidates
}

/// The values of `f` that are its parameters under a narrower type (`narrow`
/// of a parameter, or of such a value): the same array the caller lent, for
/// the whole call. They borrow it as the parameter does, so no reference is
/// taken and dropped around them (a dispatch wrapper narrows its argument to
/// the instance it picks: Kreye's determinant did an atomic increment and
/// decrement per 2x2 minor).
pub(crate) fn parameter_aliases(f: &Function) -> HashSet<ValueId> {
    let mut aliases: HashSet<ValueId> = f.params.iter().copied().collect();
    f.body.walk(&mut |s| {
        if let Op::Narrow(src) = &s.op
            && aliases.contains(src)
        {
            aliases.extend(s.defs.iter().copied());
        }
    });
    for p in &f.params {
        aliases.remove(p);
    }
    aliases
}

/// The `[i, j]` literals of integer scalars in `f` whose every use is as the
/// index of `_vect2offset_` or of a bounds check in the defining block: code
/// generation reads their elements directly instead of allocating an array
/// per iteration (what IVE leaves in generic code, e.g. `a[[i, k]]` with `a`
/// of type `double[.,.]`).
pub(crate) fn virtual_index_vectors(f: &Function) -> HashSet<ValueId> {
    use compiler_core::ir::Check;
    use compiler_core::sema::hir::Prim;
    let counts = compiler_core::opt::util::use_counts(f);
    let mut out = HashSet::default();
    fn block(f: &Function, b: &Block, counts: &[u32], out: &mut HashSet<ValueId>) {
        let mut local: HashMap<ValueId, u32> = HashMap::default();
        for s in &b.stmts {
            match &s.op {
                Op::Prim { prim: Prim::Vect2Offset, args, .. } if args.len() == 2 => {
                    *local.entry(args[1]).or_default() += 1;
                }
                Op::Check(c) => {
                    if let Check::InBounds { index, .. } = &c.check {
                        *local.entry(*index).or_default() += 1;
                    }
                }
                _ => {}
            }
            s.op.walk_blocks(&mut |inner| block(f, inner, counts, out));
        }
        for s in &b.stmts {
            if let (Op::Array(elems), [d]) = (&s.op, s.defs.as_slice()) {
                let ints = !elems.is_empty()
                    && elems.iter().all(|e| {
                        let t = f.ty(*e);
                        scalar_repr(t) && t.elem == Elem::Base(BaseType::Int)
                    });
                let uses = counts.get(d.0 as usize).copied().unwrap_or(0);
                if ints && uses > 0 && local.get(d).copied() == Some(uses) {
                    out.insert(*d);
                }
            }
        }
    }
    block(f, &f.body, &counts, &mut out);
    out
}

/// The `shape(a)` values of `f`, `a` a parameter, whose every use is a
/// `sel([k], shape)` at a constant `k` in the defining block: code generation reads
/// the extent from `a`'s descriptor instead of allocating the vector (what a
/// dispatch wrapper does on every call of generic code to test the argument's
/// extents, and generic code to read one extent). By value, the array.
pub(crate) fn shape_views(f: &Function, consts: &HashMap<ValueId, &Value>) -> HashMap<ValueId, ValueId> {
    use compiler_core::sema::hir::Prim;
    let counts = compiler_core::opt::util::use_counts(f);
    let mut out = HashMap::default();
    fn block(
        f: &Function,
        b: &Block,
        counts: &[u32],
        consts: &HashMap<ValueId, &Value>,
        out: &mut HashMap<ValueId, ValueId>,
    ) {
        let mut extent_reads: HashMap<ValueId, u32> = HashMap::default();
        for s in &b.stmts {
            if let Op::Prim { prim: Prim::Sel, args, .. } = &s.op
                && args.len() == 2
                && scalar_repr(f.ty(s.defs[0]))
                && consts.get(&args[0]).and_then(|c| c.as_int_vec()).is_some_and(|k| k.len() == 1)
            {
                *extent_reads.entry(args[1]).or_default() += 1;
            }
            s.op.walk_blocks(&mut |inner| block(f, inner, counts, consts, out));
        }
        for s in &b.stmts {
            if let (Op::Prim { prim: Prim::Shape, args, .. }, [d]) = (&s.op, s.defs.as_slice()) {
                let a = f.ty(args[0]);
                let uses = counts.get(d.0 as usize).copied().unwrap_or(0);
                // Parameters only: they live through the whole function, where
                // a local array may be released after its last use, the shape.
                let param = f.params.contains(&args[0]);
                if param && !scalar_repr(a) && a.elem != Elem::String && uses > 0 && extent_reads.get(d) == Some(&uses)
                {
                    out.insert(*d, args[0]);
                }
            }
        }
    }
    block(f, &f.body, &counts, consts, &mut out);
    out
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    pub fn new(ctx: &'ctx Context, ir: &'a ir::Module, sources: &'a SourceMap, parallel: bool, facts: Facts) -> Self {
        let module = ctx.create_module("withloop");
        module.set_source_file_name("withloop");
        let rt = Rt::declare(ctx, &module);
        Emitter {
            ctx,
            module,
            b: ctx.create_builder(),
            ir,
            sources,
            rt,
            funcs: Vec::new(),
            strings: HashMap::default(),
            const_arrays: HashMap::default(),
            locs: HashMap::default(),
            counter: 0,
            parallel,
            exact_folds: false,
            partition: None,
            static_parallel_min: crate::STATIC_PARALLEL_MIN,
            streams: false,
            few_latches: Default::default(),
            chunk_funcs: Vec::new(),
            tbaa: Tbaa::new(ctx),
            effectful: facts.effectful,
            call_work: facts.call_work,
            called: facts.called,
            called_from_c: facts.called_from_c,
        }
    }

    pub fn ptr(&self) -> inkwell::types::PointerType<'ctx> {
        self.ctx.ptr_type(AddressSpace::default())
    }

    pub fn i64(&self) -> inkwell::types::IntType<'ctx> {
        self.ctx.i64_type()
    }

    pub fn i32(&self) -> inkwell::types::IntType<'ctx> {
        self.ctx.i32_type()
    }

    pub fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}.{}", self.counter)
    }

    /// The LLVM type of a scalar of a base type (in registers).
    pub fn scalar_ty(&self, b: BaseType) -> BasicTypeEnum<'ctx> {
        match b {
            BaseType::Bool => self.ctx.bool_type().into(),
            BaseType::Char | BaseType::Byte | BaseType::UByte => self.ctx.i8_type().into(),
            BaseType::Short | BaseType::UShort => self.ctx.i16_type().into(),
            BaseType::Int | BaseType::UInt => self.ctx.i32_type().into(),
            BaseType::Long | BaseType::LongLong | BaseType::ULong | BaseType::ULongLong => self.ctx.i64_type().into(),
            BaseType::Float => self.ctx.f32_type().into(),
            BaseType::Double => self.ctx.f64_type().into(),
        }
    }

    /// The LLVM type of an element in memory (`bool` takes a byte).
    pub fn mem_ty(&self, b: BaseType) -> BasicTypeEnum<'ctx> {
        match b {
            BaseType::Bool => self.ctx.i8_type().into(),
            other => self.scalar_ty(other),
        }
    }

    pub fn value_ty(&self, ty: &Ty) -> BasicTypeEnum<'ctx> {
        if scalar_repr(ty) { self.scalar_ty(base(ty)) } else { self.ptr().into() }
    }

    /// Declares every function of the module. In a partition, a function
    /// another part calls is a hidden global whose name carries the
    /// compilation's suffix (parts are merged into one object, where the
    /// suffix keeps two programs' functions apart); functions other parts
    /// define are declarations.
    pub fn declare_functions(&mut self) {
        for (k, f) in self.ir.functions.iter().enumerate() {
            let mut params: Vec<BasicMetadataTypeEnum<'ctx>> = vec![self.ptr().into()];
            params.extend(f.results.iter().map(|_| BasicMetadataTypeEnum::from(self.ptr())));
            params.extend(f.params.iter().map(|p| BasicMetadataTypeEnum::from(self.value_ty(f.ty(*p)))));
            let ty = self.ctx.void_type().fn_type(&params, false);
            let func = match &self.partition {
                Some(part) if part.shared[k] || !part.own[k] => {
                    let func = self.module.add_function(
                        &format!("wl.{}.{}", f.name, part.suffix),
                        ty,
                        Some(Linkage::External),
                    );
                    func.as_global_value().set_visibility(inkwell::GlobalVisibility::Hidden);
                    func
                }
                _ => self.module.add_function(&format!("wl.{}", f.name), ty, Some(Linkage::Internal)),
            };
            if f.cold {
                // Rarely run code: LLVM leaves it unoptimised (a fraction of the
                // compile time of optimising it).
                self.unoptimised(func, true);
            } else if f.kind == ir::FunctionKind::Wrapper && !self.called[k] {
                // An entry's dispatch wrapper that only its C function calls:
                // a few shape compares once per call from C, glue as the C
                // function is (`abi`). One called from SaC code (a recursive
                // function's, a library function's) stays optimised.
                self.unoptimised(func, false);
            }
            self.funcs.push(func);
        }
    }

    /// Marks `func` for LLVM to leave unoptimised (`optnone`, which needs
    /// `noinline`; code generation then takes the fast instruction selector),
    /// and `cold` where it rarely runs.
    pub fn unoptimised(&self, func: inkwell::values::FunctionValue<'ctx>, cold: bool) {
        let attrs: &[&str] = if cold { &["cold", "noinline", "optnone"] } else { &["noinline", "optnone"] };
        for attr in attrs {
            let kind = inkwell::attributes::Attribute::get_named_enum_kind_id(attr);
            func.add_attribute(inkwell::attributes::AttributeLoc::Function, self.ctx.create_enum_attribute(kind, 0));
        }
    }

    /// Whether this emitter defines IR function `k` (all of them, unless partitioned).
    pub fn owns(&self, k: usize) -> bool {
        self.partition.as_ref().is_none_or(|p| p.own[k])
    }

    // ------------------------------------------------------------ constants

    /// A constant NUL-terminated string; returns a pointer to its bytes.
    pub fn cstring(&mut self, s: &str) -> PointerValue<'ctx> {
        let mut bytes = s.as_bytes().to_vec();
        bytes.push(0);
        self.bytes_global(bytes)
    }

    fn bytes_global(&mut self, bytes: Vec<u8>) -> PointerValue<'ctx> {
        if let Some(p) = self.strings.get(&bytes) {
            return *p;
        }
        let value = self.ctx.const_string(&bytes, false);
        let name = self.fresh("str");
        let g = self.module.add_global(value.get_type(), None, &name);
        g.set_initializer(&value);
        g.set_constant(true);
        g.set_linkage(Linkage::Private);
        let p = g.as_pointer_value();
        self.strings.insert(bytes, p);
        p
    }

    /// A private constant array of `i64`s; returns a pointer to the first.
    pub fn i64_global(&mut self, values: &[i64]) -> PointerValue<'ctx> {
        let i64t = self.i64();
        let value = i64t.const_array(&values.iter().map(|v| i64t.const_int(*v as u64, true)).collect::<Vec<_>>());
        let name = self.fresh("i64s");
        let g = self.module.add_global(value.get_type(), None, &name);
        g.set_initializer(&value);
        g.set_constant(true);
        g.set_linkage(Linkage::Private);
        g.as_pointer_value()
    }

    /// The location constant of a span (null for none).
    pub fn loc(&mut self, span: Option<Span>) -> PointerValue<'ctx> {
        let Some(span) = span else { return self.ptr().const_null() };
        if let Some(p) = self.locs.get(&span) {
            return *p;
        }
        let file = self.sources.get(span.file);
        let (line, col) = file.line_col(span.start);
        let name = file.name.to_string();
        let fname = self.cstring(&name);
        let i32t = self.i32();
        let value = self.rt.loc.const_named_struct(&[
            fname.into(),
            i32t.const_int(line as u64, false).into(),
            i32t.const_int(col as u64, false).into(),
            i32t.const_int(span.file.0 as u64, false).into(),
            i32t.const_int(span.start as u64, false).into(),
            i32t.const_int(span.end as u64, false).into(),
        ]);
        let gname = self.fresh("loc");
        let g = self.module.add_global(self.rt.loc, None, &gname);
        g.set_initializer(&value);
        g.set_constant(true);
        g.set_linkage(Linkage::Private);
        let p = g.as_pointer_value();
        self.locs.insert(span, p);
        p
    }

    /// A scalar constant.
    pub fn scalar_const(&self, s: Scalar) -> BasicValueEnum<'ctx> {
        match s {
            Scalar::Bool(b) => self.ctx.bool_type().const_int(b as u64, false).into(),
            Scalar::Char(c) => self.ctx.i8_type().const_int(c as u64, false).into(),
            Scalar::Int(t, v) => self.scalar_ty(t).into_int_type().const_int(v as u64, signed(t)).into(),
            Scalar::Float(f) => self.ctx.f32_type().const_float(f as f64).into(),
            Scalar::Double(d) => self.ctx.f64_type().const_float(d).into(),
        }
    }

    /// A constant array (or a scalar as a rank-0 array): an immortal `WlArray`
    /// in static data.
    pub fn array_const(&mut self, v: &Value) -> R<PointerValue<'ctx>> {
        let b = v.base().ok_or_else(|| CodegenError::Bug("array constant of strings".into()))?;
        let n = v.len();
        let shape_usize = v.shape().to_vec();
        let mem = self.mem_ty(b);
        let mut elems: Vec<BasicValueEnum<'ctx>> = Vec::with_capacity(n);
        for i in 0..n {
            let s = v.elem(i).ok_or_else(|| CodegenError::Bug("constant element".into()))?;
            let c = self.scalar_const(s);
            elems.push(match (b, c) {
                (BaseType::Bool, BasicValueEnum::IntValue(x)) => {
                    self.ctx.i8_type().const_int(x.get_zero_extended_constant().unwrap_or(0), false).into()
                }
                (_, c) => c,
            });
        }
        let data = match mem {
            BasicTypeEnum::IntType(t) => t.const_array(&elems.iter().map(|e| e.into_int_value()).collect::<Vec<_>>()),
            BasicTypeEnum::FloatType(t) => {
                t.const_array(&elems.iter().map(|e| e.into_float_value()).collect::<Vec<_>>())
            }
            _ => return Err(CodegenError::Bug("constant element type".into())),
        };
        let dname = self.fresh("data");
        let dg = self.module.add_global(data.get_type(), None, &dname);
        dg.set_initializer(&data);
        dg.set_constant(true);
        dg.set_linkage(Linkage::Private);
        dg.set_alignment(64);
        let (header_ty, fields) = self.immortal_header(b, &shape_usize, n, dg.as_pointer_value());
        let value = header_ty.const_named_struct(&fields);
        let hname = self.fresh("array");
        let hg = self.module.add_global(header_ty, None, &hname);
        hg.set_initializer(&value);
        hg.set_constant(false);
        hg.set_linkage(Linkage::Private);
        hg.set_alignment(8);
        self.const_arrays.insert(hg.as_pointer_value(), dg.as_pointer_value());
        Ok(hg.as_pointer_value())
    }

    /// A string constant: a pointer to `{ i64 len, [n x i8] bytes }`.
    pub fn string_const(&mut self, s: &[u8]) -> PointerValue<'ctx> {
        let i64t = self.i64();
        let bytes = self.ctx.const_string(s, false);
        let ty = self.ctx.struct_type(&[i64t.into(), bytes.get_type().into()], false);
        let value = ty.const_named_struct(&[i64t.const_int(s.len() as u64, false).into(), bytes.into()]);
        let name = self.fresh("string");
        let g = self.module.add_global(ty, None, &name);
        g.set_initializer(&value);
        g.set_constant(true);
        g.set_linkage(Linkage::Private);
        g.as_pointer_value()
    }

    // ------------------------------------------------------------ functions

    /// Emits the body of IR function `k`.
    pub fn function(&mut self, k: usize) -> R<()> {
        let irf: &'a Function = &self.ir.functions[k];
        let func = self.funcs[k];
        let entry_bb = self.ctx.append_basic_block(func, "entry");
        let body_bb = self.ctx.append_basic_block(func, "body");
        let fail_bb = self.ctx.append_basic_block(func, "fail");
        self.b.position_at_end(fail_bb);
        self.b.build_return(None)?;
        let ctxp = func.get_nth_param(0).ok_or_else(|| CodegenError::Bug("ctx parameter".into()))?.into_pointer_value();
        let mut consts = HashMap::default();
        collect_consts(&irf.body, &mut consts);
        let shape_views = shape_views(irf, &consts);
        let virt = virtual_index_vectors(irf);
        let stack = stack_vectors(irf, &|v| virt.contains(&v) || shape_views.contains_key(&v));
        let mut borrowed = parameter_aliases(irf);
        borrowed.extend(stack.iter().copied());
        let mut fx = Fx {
            func,
            irf,
            vals: HashMap::default(),
            ctxp,
            fail_bb,
            entry_bb,
            loc: self.ptr().const_null(),
            consts,
            virt: std::rc::Rc::new(virt),
            shape_views: std::rc::Rc::new(shape_views),
            comps: HashMap::default(),
            wide: HashMap::default(),
            defs: std::rc::Rc::new(compiler_core::opt::index::defs(irf)),
            data: HashMap::default(),
            borrowed: std::rc::Rc::new(borrowed),
            stack: std::rc::Rc::new(stack),
            hoisted: HashSet::default(),
            offset_extents: HashMap::default(),
            in_chunk: false,
            time_tile: None,
        };
        let n_out = irf.results.len();
        for (i, p) in irf.params.iter().enumerate() {
            let v = func.get_nth_param((1 + n_out + i) as u32).ok_or_else(|| CodegenError::Bug("parameter".into()))?;
            fx.vals.insert(*p, v);
        }
        self.b.position_at_end(body_bb);
        // Parameters are borrowed: the body owns none of them.
        let yields = self.block(&mut fx, &irf.body, &[])?;
        for (i, (y, ty)) in yields.iter().zip(&irf.results).enumerate() {
            let v = self.owned_to(&fx, *y, irf.ty(irf.body.yields[i]), ty)?;
            let out = func.get_nth_param((1 + i) as u32).ok_or_else(|| CodegenError::Bug("out parameter".into()))?;
            self.b.build_store(out.into_pointer_value(), v)?;
        }
        self.b.build_return(None)?;
        // The entry block only holds allocas; it falls through to the body.
        self.b.position_at_end(entry_bb);
        self.b.build_unconditional_branch(body_bb)?;
        Ok(())
    }

    /// An `alloca` in the function's entry block.
    pub fn alloca(&self, fx: &Fx<'ctx, 'a>, ty: BasicTypeEnum<'ctx>, name: &str) -> R<PointerValue<'ctx>> {
        let here = self.b.get_insert_block();
        let tb = self.ctx.create_builder();
        match fx.entry_bb.get_first_instruction() {
            Some(i) => tb.position_before(&i),
            None => tb.position_at_end(fx.entry_bb),
        }
        let p = tb.build_alloca(ty, name)?;
        if let Some(h) = here {
            self.b.position_at_end(h);
        }
        Ok(p)
    }

    /// Branches to the function's exit when the context holds an error.
    pub fn check_error(&mut self, fx: &Fx<'ctx, 'a>) -> R<()> {
        let e = self.b.build_load(self.i32(), fx.ctxp, "err")?.into_int_value();
        let failed = self.b.build_int_compare(inkwell::IntPredicate::NE, e, self.i32().const_zero(), "failed")?;
        let cont = self.ctx.append_basic_block(fx.func, "ok");
        self.b.build_conditional_branch(failed, fx.fail_bb, cont)?;
        self.b.position_at_end(cont);
        Ok(())
    }

    /// Jumps to `fail` (after the caller recorded the error).
    pub fn goto_fail(&mut self, fx: &Fx<'ctx, 'a>) -> R<()> {
        self.b.build_unconditional_branch(fx.fail_bb)?;
        let dead = self.ctx.append_basic_block(fx.func, "dead");
        self.b.position_at_end(dead);
        Ok(())
    }

    pub fn call(
        &mut self,
        f: FunctionValue<'ctx>,
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> R<Option<BasicValueEnum<'ctx>>> {
        Ok(self.b.build_call(f, args, "")?.try_as_basic_value().basic())
    }

    pub fn inc(&mut self, v: BasicValueEnum<'ctx>) -> R<()> {
        if self.uncounted(v) {
            return Ok(());
        }
        self.call(self.rt.inc, &[v.into()])?;
        Ok(())
    }

    pub fn dec(&mut self, v: BasicValueEnum<'ctx>) -> R<()> {
        if self.uncounted(v) {
            return Ok(());
        }
        self.call(self.rt.dec, &[v.into()])?;
        Ok(())
    }

    /// Values whose count needs no call: a virtual index vector or shape
    /// (a constant null; an opaque call per element would also keep LLVM from
    /// vectorising) and constant arrays (static: the runtime ignores their
    /// count, but the call was made all the same, several per call of a
    /// dispatch wrapper).
    fn uncounted(&self, v: BasicValueEnum<'ctx>) -> bool {
        v.is_pointer_value() && {
            let p = v.into_pointer_value();
            p.is_null() || self.const_arrays.contains_key(&p)
        }
    }

    /// Whether a value of this type is a reference-counted array.
    pub fn counted(&self, ty: &Ty) -> bool {
        !scalar_repr(ty) && ty.elem != Elem::String
    }

    // ------------------------------------------------------------ blocks

    /// Emits a block; returns its yields, each one reference the caller owns.
    /// `owned`: values the block owns besides its own definitions (loop
    /// parameters, a part's index vector).
    pub fn block(&mut self, fx: &mut Fx<'ctx, 'a>, b: &'a Block, owned: &[ValueId]) -> R<Vec<BasicValueEnum<'ctx>>> {
        let plan = plan_block(fx.irf, b, owned, &fx.borrowed);
        // Owned values never used die at once.
        for v in &plan.dead_on_arrival {
            if let Some(x) = fx.vals.get(v).copied()
                && self.counted(fx.irf.ty(*v))
            {
                self.dec(x)?;
            }
        }
        // A failure in a statement releases what the block owns there (then
        // what the blocks around it own): a host that calls a failing
        // function again and again loses no memory. `live`: the owned values
        // defined so far and not yet released.
        let release = release_points(b, &plan);
        let mut live: std::collections::BTreeSet<ValueId> =
            owned.iter().copied().filter(|v| release.contains_key(v)).collect();
        let outer_fail = fx.fail_bb;
        let mut last_cleanup: Option<(Vec<BasicValueEnum<'ctx>>, BasicBlock<'ctx>)> = None;
        // A target no statement branched to yet, for the next one.
        let mut spare: Option<BasicBlock<'ctx>> = None;
        for (i, s) in b.stmts.iter().enumerate() {
            let moved = &plan.moved[i];
            let hoisted = s.defs.first().is_some_and(|d| fx.hoisted.contains(d));
            if !hoisted {
                // What statement `i` fails with: all of `live` but what moves into it.
                let held: Vec<BasicValueEnum<'ctx>> = live
                    .iter()
                    .filter(|v| !moved.contains(v))
                    .filter_map(|v| fx.vals.get(v).copied())
                    .filter(|x| !self.uncounted(*x))
                    .collect();
                let pending = match &last_cleanup {
                    _ if held.is_empty() => None,
                    Some((set, bb)) if *set == held => {
                        fx.fail_bb = *bb;
                        None
                    }
                    _ => {
                        let bb = spare.take().unwrap_or_else(|| self.ctx.append_basic_block(fx.func, "fail.release"));
                        fx.fail_bb = bb;
                        Some(bb)
                    }
                };
                let emitted = self.stmt(fx, s, moved);
                fx.fail_bb = outer_fail;
                emitted?;
                // Filled only where the statement can fail.
                if let Some(bb) = pending {
                    if bb.get_first_use().is_some() {
                        self.fill_cleanup(bb, &held, outer_fail)?;
                        last_cleanup = Some((held, bb));
                    } else {
                        spare = Some(bb);
                    }
                }
            }
            for v in &plan.dies_after[i] {
                live.remove(v);
            }
            for d in &s.defs {
                if release.get(d).is_some_and(|at| at.is_none_or(|j| j > i)) {
                    live.insert(*d);
                }
            }
            if hoisted {
                continue;
            }
            if matches!(s.op, Op::Fail { .. }) {
                // The rest of the block never runs (its values may not even be
                // well-typed: inference gives dead code no types).
                self.close_spare(spare, outer_fail)?;
                return Ok(b.yields.iter().map(|y| undef(self.value_ty(fx.irf.ty(*y)))).collect());
            }
            for v in &plan.dies_after[i] {
                if moved.contains(v) {
                    continue;
                }
                if let Some(x) = fx.vals.get(v).copied()
                    && self.counted(fx.irf.ty(*v))
                {
                    self.dec(x)?;
                }
            }
        }
        self.close_spare(spare, outer_fail)?;
        let mut out = Vec::with_capacity(b.yields.len());
        let mut yielded: HashSet<ValueId> = HashSet::default();
        for y in &b.yields {
            let v = *fx.vals.get(y).ok_or_else(|| CodegenError::Bug(format!("%{} yielded before definition", y.0)))?;
            if self.counted(fx.irf.ty(*y)) {
                // A value the block owns moves out once; anything else gets a reference.
                let own = plan.owned.contains(y) && yielded.insert(*y);
                if !own {
                    self.inc(v)?;
                }
            }
            out.push(v);
        }
        Ok(out)
    }

    /// A failure target nothing branched to: a well-formed block (LLVM drops it).
    fn close_spare(&mut self, spare: Option<BasicBlock<'ctx>>, outer: BasicBlock<'ctx>) -> R<()> {
        match spare {
            Some(bb) => self.fill_cleanup(bb, &[], outer),
            None => Ok(()),
        }
    }

    /// Fills failure target `bb`: releases `values`, then goes on to `outer`.
    fn fill_cleanup(
        &mut self,
        bb: BasicBlock<'ctx>,
        values: &[BasicValueEnum<'ctx>],
        outer: BasicBlock<'ctx>,
    ) -> R<()> {
        let here = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
        self.b.position_at_end(bb);
        for x in values {
            self.dec(*x)?;
        }
        self.b.build_unconditional_branch(outer)?;
        self.b.position_at_end(here);
        Ok(())
    }

    /// A failure target that releases `values` (arrays) and goes on to
    /// `outer`; `outer` itself when there is nothing to release.
    pub(crate) fn release_then(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        values: &[BasicValueEnum<'ctx>],
        outer: BasicBlock<'ctx>,
    ) -> R<BasicBlock<'ctx>> {
        if values.iter().all(|x| self.uncounted(*x)) {
            return Ok(outer);
        }
        let cleanup = self.ctx.append_basic_block(fx.func, "fail.release");
        self.fill_cleanup(cleanup, values, outer)?;
        Ok(cleanup)
    }

    /// A rank-0 array holding a scalar.
    pub fn box_scalar(&mut self, fx: &Fx<'ctx, 'a>, v: BasicValueEnum<'ctx>, b: BaseType) -> R<BasicValueEnum<'ctx>> {
        let bits = self.bits_of(v, b)?;
        let code = self.i32().const_int(elem_code(b), false);
        let r = self
            .call(self.rt.boxed, &[fx.ctxp.into(), code.into(), bits.into()])?
            .ok_or_else(|| CodegenError::Bug("box".into()))?;
        self.check_error(fx)?;
        Ok(r)
    }

    /// The scalar in a rank-0 array (element 0).
    pub fn unbox(&mut self, _fx: &Fx<'ctx, 'a>, v: BasicValueEnum<'ctx>, b: BaseType) -> R<BasicValueEnum<'ctx>> {
        let data = self.data_ptr(v.into_pointer_value())?;
        self.load_elem(data, self.i64().const_zero(), b)
    }

    /// A scalar as the runtime's 64-bit pattern.
    pub fn bits_of(&mut self, v: BasicValueEnum<'ctx>, b: BaseType) -> R<IntValue<'ctx>> {
        let i64t = self.i64();
        Ok(match b {
            BaseType::Float => {
                let i = self.b.build_bit_cast(v, self.i32(), "bits")?.into_int_value();
                self.b.build_int_z_extend(i, i64t, "bits")?
            }
            BaseType::Double => self.b.build_bit_cast(v, i64t, "bits")?.into_int_value(),
            t if signed(t) => self.b.build_int_s_extend_or_bit_cast(v.into_int_value(), i64t, "bits")?,
            _ => self.b.build_int_z_extend_or_bit_cast(v.into_int_value(), i64t, "bits")?,
        })
    }

    /// A scalar from the runtime's 64-bit pattern.
    pub fn scalar_from_bits(&mut self, bits: IntValue<'ctx>, b: BaseType) -> R<BasicValueEnum<'ctx>> {
        Ok(match b {
            BaseType::Float => {
                let i = self.b.build_int_truncate(bits, self.i32(), "f")?;
                self.b.build_bit_cast(i, self.ctx.f32_type(), "f")?
            }
            BaseType::Double => self.b.build_bit_cast(bits, self.ctx.f64_type(), "d")?,
            t => {
                let ty = self.scalar_ty(t).into_int_type();
                self.b.build_int_truncate_or_bit_cast(bits, ty, "i")?.into()
            }
        })
    }

    // ------------------------------------------------------------ array access

    /// An in-bounds `getelementptr`. Building it is safe; the code it is part
    /// of keeps its indices in bounds (checked or proven).
    #[allow(unsafe_code)]
    pub fn gep(
        &self,
        ty: impl BasicType<'ctx>,
        p: PointerValue<'ctx>,
        idx: &[IntValue<'ctx>],
        name: &str,
    ) -> R<PointerValue<'ctx>> {
        // SAFETY: inkwell marks GEP unsafe because the address it computes may be
        // out of bounds at run time; creating the instruction itself is sound.
        Ok(unsafe { self.b.build_in_bounds_gep(ty, p, idx, name)? })
    }

    /// Marks the loop whose back edge is `latch_branch` as not to be unrolled
    /// with a run-time trip count (`llvm.loop.unroll.runtime.disable`).
    ///
    /// Why: LLVM's O3 unrolls every small loop whose trip count is unknown by
    /// 8 with a remainder loop, and so also the scalar remainder of each loop
    /// it vectorises; our with-loops are vectorised or run a few iterations per
    /// row, so that code is rarely run, but it doubles the module and loop
    /// strength reduction on it took 40% of machine-code time (bench kernels:
    /// LLVM optimisation + machine code 3.8 s → 2.3 s without it). Full
    /// unrolling of constant trip counts and vectorisation (with its
    /// interleaving) are unaffected.
    pub fn loop_hints(&self, latch_branch: InstructionValue<'ctx>) {
        self.loop_metadata(latch_branch, &[("llvm.loop.unroll.runtime.disable", None)]);
    }

    /// Marks the loop whose back edge is `latch_branch` as one that runs a
    /// few iterations (over an index vector's components, a shape, a
    /// parallel job's chunks): neither vectorised nor interleaved nor
    /// unrolled (`llvm.loop.vectorize.width` 1, `llvm.loop.interleave.count`
    /// 1, `llvm.loop.unroll.disable`). LLVM vectorised such loops with
    /// run-time checks, a four-way interleaved body and a scalar epilogue:
    /// code for iterations that never come, to optimise and compile in every
    /// generic instance (combining a parallel fold's partial results took 17
    /// vector instructions per instance of `dot`).
    pub fn small_loop_hints(&self, latch_branch: InstructionValue<'ctx>) {
        self.few_latches.borrow_mut().push(latch_branch);
        self.loop_metadata(
            latch_branch,
            &[
                ("llvm.loop.vectorize.width", Some(1)),
                ("llvm.loop.interleave.count", Some(1)),
                ("llvm.loop.unroll.disable", None),
            ],
        );
    }

    /// Attaches a loop ID with `options` (each a name and perhaps an `i32`
    /// operand) to the loop whose back edge is `latch_branch`.
    #[allow(unsafe_code)]
    fn loop_metadata(&self, latch_branch: InstructionValue<'ctx>, options: &[(&str, Option<u32>)]) {
        use inkwell::values::AsValueRef;
        use llvm_sys::core::{
            LLVMGetMDKindIDInContext, LLVMMDNodeInContext2, LLVMMDStringInContext2, LLVMMetadataAsValue,
            LLVMSetMetadata, LLVMValueAsMetadata,
        };
        use llvm_sys::debuginfo::{LLVMMetadataReplaceAllUsesWith, LLVMTemporaryMDNode};
        const KIND: &str = "llvm.loop";
        let ctx = self.ctx.raw();
        // SAFETY: every pointer passed is a live node or value of this
        // context, with the lengths of the slices and strings given. A loop
        // ID must refer to itself (operand 0); inkwell builds no cycles, so the
        // node is made with a temporary first operand that is then replaced
        // by the node itself (which also frees the temporary).
        unsafe {
            let temporary = LLVMTemporaryMDNode(ctx, std::ptr::null_mut(), 0);
            let mut operands = vec![temporary];
            for (name, value) in options {
                let mut option = vec![LLVMMDStringInContext2(ctx, name.as_ptr().cast(), name.len())];
                if let Some(v) = value {
                    let v = self.i32().const_int(u64::from(*v), false);
                    option.push(LLVMValueAsMetadata(v.as_value_ref()));
                }
                operands.push(LLVMMDNodeInContext2(ctx, option.as_mut_ptr(), option.len()));
            }
            let id = LLVMMDNodeInContext2(ctx, operands.as_mut_ptr(), operands.len());
            LLVMMetadataReplaceAllUsesWith(temporary, id);
            let kind = LLVMGetMDKindIDInContext(ctx, KIND.as_ptr().cast(), KIND.len() as u32);
            LLVMSetMetadata(latch_branch.as_value_ref(), kind, LLVMMetadataAsValue(ctx, id));
        }
    }

    fn header_field(
        &mut self,
        a: PointerValue<'ctx>,
        offset: u64,
        ty: BasicTypeEnum<'ctx>,
        name: &str,
    ) -> R<BasicValueEnum<'ctx>> {
        let i8t = self.ctx.i8_type();
        let p = self.gep(i8t, a, &[self.i64().const_int(offset, false)], "field")?;
        let v = self.b.build_load(ty, p, name)?;
        self.tag(v.as_instruction_value())?;
        Ok(v)
    }

    /// Marks a load or store as a header access.
    fn tag(&self, inst: Option<InstructionValue<'ctx>>) -> R<()> {
        let inst = inst.ok_or_else(|| CodegenError::Bug("tbaa on a non-instruction".into()))?;
        inst.set_metadata(self.tbaa.header, self.tbaa.kind).map_err(|e| CodegenError::Bug(format!("tbaa: {e}")))
    }

    /// Marks a load or store as an access to an element of type `b`.
    fn tag_elem(&self, inst: Option<InstructionValue<'ctx>>, b: BaseType) -> R<()> {
        let inst = inst.ok_or_else(|| CodegenError::Bug("tbaa on a non-instruction".into()))?;
        let node = self.tbaa.elem(self.ctx, b, self.mem_ty(b));
        inst.set_metadata(node, self.tbaa.kind).map_err(|e| CodegenError::Bug(format!("tbaa: {e}")))
    }

    pub fn rank(&mut self, a: PointerValue<'ctx>) -> R<IntValue<'ctx>> {
        Ok(self.header_field(a, rt::ARR_RANK, self.i64().into(), "rank")?.into_int_value())
    }

    pub fn size(&mut self, a: PointerValue<'ctx>) -> R<IntValue<'ctx>> {
        Ok(self.header_field(a, rt::ARR_SIZE, self.i64().into(), "size")?.into_int_value())
    }

    pub fn data_ptr(&mut self, a: PointerValue<'ctx>) -> R<PointerValue<'ctx>> {
        if let Some(data) = self.const_arrays.get(&a) {
            // A constant array: its elements' global, so LLVM sees the values.
            return Ok(*data);
        }
        Ok(self.header_field(a, rt::ARR_DATA, self.ptr().into(), "data")?.into_pointer_value())
    }

    /// A pointer to the shape extents.
    pub fn shape_ptr(&mut self, a: PointerValue<'ctx>) -> R<PointerValue<'ctx>> {
        let i8t = self.ctx.i8_type();
        self.gep(i8t, a, &[self.i64().const_int(rt::ARR_SHAPE, false)], "shape")
    }

    pub fn extent(&mut self, a: PointerValue<'ctx>, k: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        let sp = self.shape_ptr(a)?;
        let p = self.gep(self.i64(), sp, &[k], "ext")?;
        let v = self.b.build_load(self.i64(), p, "ext")?;
        self.tag(v.as_instruction_value())?;
        Ok(v.into_int_value())
    }

    pub fn load_elem(&mut self, data: PointerValue<'ctx>, i: IntValue<'ctx>, b: BaseType) -> R<BasicValueEnum<'ctx>> {
        let mem = self.mem_ty(b);
        let p = self.gep(mem, data, &[i], "elem")?;
        let v = self.b.build_load(mem, p, "x")?;
        self.tag_elem(v.as_instruction_value(), b)?;
        Ok(if b == BaseType::Bool {
            self.b.build_int_truncate(v.into_int_value(), self.ctx.bool_type(), "b")?.into()
        } else {
            v
        })
    }

    pub fn store_elem(
        &mut self,
        data: PointerValue<'ctx>,
        i: IntValue<'ctx>,
        b: BaseType,
        v: BasicValueEnum<'ctx>,
    ) -> R<()> {
        let mem = self.mem_ty(b);
        let p = self.gep(mem, data, &[i], "elem")?;
        let v: BasicValueEnum<'ctx> = if b == BaseType::Bool {
            self.b.build_int_z_extend(v.into_int_value(), self.ctx.i8_type(), "b")?.into()
        } else {
            v
        };
        let st = self.b.build_store(p, v)?;
        self.tag_elem(Some(st), b)?;
        Ok(())
    }

    /// A new array of `rank` extents read from `shape` (an `i64` buffer).
    pub fn alloc_array(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        b: BaseType,
        rank: IntValue<'ctx>,
        shape: PointerValue<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        let code = self.i32().const_int(elem_code(b), false);
        let a = self
            .call(self.rt.alloc, &[fx.ctxp.into(), code.into(), rank.into(), shape.into()])?
            .ok_or_else(|| CodegenError::Bug("alloc".into()))?;
        self.check_error(fx)?;
        Ok(a.into_pointer_value())
    }

    /// A `WlArray` header the runtime never frees (count -1), for `size`
    /// elements of type `b` at `data` in `shape`: its LLVM type (the
    /// runtime's layout, `rt::ARR_*`) and its fields' values.
    fn immortal_header(
        &self,
        b: BaseType,
        shape: &[usize],
        size: usize,
        data: PointerValue<'ctx>,
    ) -> (inkwell::types::StructType<'ctx>, [BasicValueEnum<'ctx>; 7]) {
        let (i64t, i32t) = (self.i64(), self.i32());
        let extents: Vec<_> = shape.iter().map(|&d| i64t.const_int(d as u64, false)).collect();
        let header_ty = self.ctx.struct_type(
            &[
                i64t.into(),
                i64t.into(),
                i64t.into(),
                self.ptr().into(),
                i32t.into(),
                i32t.into(),
                i64t.array_type(shape.len() as u32).into(),
            ],
            false,
        );
        let fields = [
            i64t.const_int(u64::MAX, true).into(),
            i64t.const_int(shape.len() as u64, false).into(),
            i64t.const_int(size as u64, false).into(),
            data.into(),
            i32t.const_int(elem_code(b), false).into(),
            i32t.const_int(elem_bytes(b), false).into(),
            i64t.const_array(&extents).into(),
        ];
        (header_ty, fields)
    }

    /// An `int` vector of `n` elements in the frame (see [`stack_vectors`]):
    /// a `WlArray` header whose count marks it immortal, as a constant's,
    /// and its elements, both allocas of the function's entry block. Its
    /// elements are left for the caller to store; their pointer is the
    /// second value. Registered with the constants, so its elements are read
    /// through the alloca (LLVM keeps them in registers) and no count is
    /// ever changed.
    pub fn stack_vector(&mut self, fx: &Fx<'ctx, 'a>, n: usize) -> R<(PointerValue<'ctx>, PointerValue<'ctx>)> {
        let data = self.alloca(fx, self.mem_ty(BaseType::Int).array_type(n as u32).into(), "stackvec.data")?;
        let (header_ty, fields) = self.immortal_header(BaseType::Int, &[n], n, data);
        let header = self.alloca(fx, header_ty.into(), "stackvec")?;
        for (k, v) in fields.into_iter().enumerate() {
            let at = self.b.build_struct_gep(header_ty, header, k as u32, "stackvec.field")?;
            if v.is_array_value() {
                // The shape, extent by extent: FastISel (the code generator of
                // `-O0` and of the cold part) cannot store an aggregate and
                // leaves the rest of the block to SelectionDAG, at several
                // times the cost (relax_apl's cold part: most of its blocks).
                let extents = self.i64().array_type(1);
                let first = self.gep(extents, at, &[self.const_i64(0), self.const_i64(0)], "stackvec.extent")?;
                self.b.build_store(first, self.const_i64(n as i64))?;
                continue;
            }
            self.b.build_store(at, v)?;
        }
        self.const_arrays.insert(header, data);
        Ok((header, data))
    }

    /// A stack buffer of `n` `i64`s.
    pub fn i64_buffer(&mut self, fx: &Fx<'ctx, 'a>, n: u32, name: &str) -> R<PointerValue<'ctx>> {
        self.alloca(fx, self.i64().array_type(n.max(1)).into(), name)
    }

    pub fn const_i64(&self, v: i64) -> IntValue<'ctx> {
        self.i64().const_int(v as u64, true)
    }

    /// Where a statement's errors are reported.
    pub fn stmt_loc(&mut self, s: &Stmt) -> PointerValue<'ctx> {
        match s.blame {
            Blame::Caller => self.ptr().const_null(),
            _ => {
                let span = s.blame_span();
                match span {
                    Some(sp) if self.sources.is_library(sp) => self.ptr().const_null(),
                    other => self.loc(other),
                }
            }
        }
    }

    pub fn value(&self, fx: &Fx<'ctx, 'a>, v: ValueId) -> R<BasicValueEnum<'ctx>> {
        fx.vals
            .get(&v)
            .copied()
            .ok_or_else(|| CodegenError::Bug(format!("%{} used before it is defined in `{}`", v.0, fx.irf.name)))
    }
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Emits every function of the module.
    pub fn functions(&mut self) -> R<()> {
        self.declare_functions();
        for k in 0..self.ir.functions.len() {
            if self.owns(k) {
                self.function(k)?;
            }
        }
        Ok(())
    }

    /// A fresh function `name(ctx, …)` of type `ty` with an entry block, a
    /// body block (the builder is there) and a failure exit returning
    /// `fail_value` (none: `ret void`).
    pub fn wrapper_fx(
        &mut self,
        name: &str,
        ty: inkwell::types::FunctionType<'ctx>,
        linkage: Linkage,
        fail_value: Option<BasicValueEnum<'ctx>>,
        irf: &'a Function,
    ) -> R<Fx<'ctx, 'a>> {
        let func = self.module.add_function(name, ty, Some(linkage));
        let entry_bb = self.ctx.append_basic_block(func, "entry");
        let body_bb = self.ctx.append_basic_block(func, "body");
        let fail_bb = self.ctx.append_basic_block(func, "fail");
        self.b.position_at_end(fail_bb);
        match fail_value {
            Some(v) => self.b.build_return(Some(&v))?,
            None => self.b.build_return(None)?,
        };
        self.b.position_at_end(entry_bb);
        self.b.build_unconditional_branch(body_bb)?;
        self.b.position_at_end(body_bb);
        let ctxp = func.get_nth_param(0).ok_or_else(|| CodegenError::Bug("ctx parameter".into()))?.into_pointer_value();
        Ok(Fx {
            func,
            irf,
            vals: HashMap::default(),
            ctxp,
            fail_bb,
            entry_bb,
            loc: self.ptr().const_null(),
            consts: HashMap::default(),
            virt: std::rc::Rc::new(HashSet::default()),
            shape_views: std::rc::Rc::new(HashMap::default()),
            comps: HashMap::default(),
            wide: HashMap::default(),
            defs: std::rc::Rc::new(compiler_core::opt::index::defs(irf)),
            data: HashMap::default(),
            borrowed: std::rc::Rc::new(HashSet::default()),
            stack: std::rc::Rc::new(HashSet::default()),
            hoisted: HashSet::default(),
            offset_extents: HashMap::default(),
            in_chunk: false,
            time_tile: None,
        })
    }

    /// `void name(ctx, const WlArg *args, WlArg *results)`: calls IR function
    /// `k` on arguments the runtime describes (scalars as bits, arrays as
    /// arrays of the parameter's representation) and describes its results
    /// (arrays owned by the caller). Errors are reported at the function's
    /// span when no statement of user code is to blame.
    pub fn trampoline(&mut self, k: usize, name: &str) -> R<FunctionValue<'ctx>> {
        let irf: &'a Function = &self.ir.functions[k];
        let p = self.ptr();
        let ty = self.ctx.void_type().fn_type(&[p.into(), p.into(), p.into()], false);
        let mut fx = self.wrapper_fx(name, ty, Linkage::External, None, irf)?;
        let args = fx.func.get_nth_param(1).ok_or_else(|| CodegenError::Bug("args".into()))?.into_pointer_value();
        let results = fx.func.get_nth_param(2).ok_or_else(|| CodegenError::Bug("results".into()))?.into_pointer_value();
        let site = self.loc(Some(irf.span));
        let site_p = self.ctx_field(&fx, rt::CTX_SITE)?;
        self.b.build_store(site_p, site)?;
        let mut call_args: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> = vec![fx.ctxp.into()];
        let mut outs = Vec::new();
        for r in &irf.results {
            let slot = self.alloca(&fx, self.value_ty(r), "res")?;
            outs.push(slot);
            call_args.push(slot.into());
        }
        for (i, prm) in irf.params.iter().enumerate() {
            let slot = self.gep(self.rt.arg, args, &[self.const_i64(i as i64)], "arg")?;
            let ty = irf.ty(*prm).clone();
            call_args.push(self.read_arg(slot, &ty)?.into());
        }
        self.b.build_call(self.funcs[k], &call_args, "")?;
        self.check_error(&fx)?;
        for (j, (slot, r)) in outs.iter().zip(&irf.results).enumerate() {
            let x = self.b.build_load(self.value_ty(r), *slot, "r")?;
            let out = self.gep(self.rt.arg, results, &[self.const_i64(j as i64)], "res")?;
            self.write_arg(out, x, r)?;
        }
        self.b.build_return(None)?;
        fx.vals.clear();
        Ok(fx.func)
    }

    /// Marks every defined function for the target CPU and verifies the module;
    /// [`optimise`] then runs LLVM's pipeline on it.
    pub fn finish(self, spec: &TargetSpec, options: &Options) -> R<(Module<'ctx>, crate::machines::Lease)> {
        let tm = crate::machines::lease(spec, options)?;
        self.module.set_triple(&tm.get_triple());
        self.module.set_data_layout(&tm.get_target_data().get_data_layout());
        let cpu = self.ctx.create_string_attribute("target-cpu", &spec.cpu);
        let features = self.ctx.create_string_attribute("target-features", &spec.features);
        let nounwind =
            self.ctx.create_enum_attribute(inkwell::attributes::Attribute::get_named_enum_kind_id("nounwind"), 0);
        // Instances that only drive: called once per call of an entry, whose
        // own code has no loop but of a few iterations and little arithmetic
        // and hands its work to chunk functions (its with-loops and
        // element-wise loops), are left unoptimised, as the wrappers and C
        // functions around them are: a few hundred instructions that
        // allocate, check shapes and start the chunks, run once per call (the
        // compile service's instructions for `dot` and `implies`, both
        // instances drivers, 20-25% fewer in LLVM). An entry that computes
        // itself (a 4x4 determinant unrolled, no loop) stays optimised.
        let optnone = inkwell::attributes::Attribute::get_named_enum_kind_id("optnone");
        let work_takers: Vec<PointerValue<'ctx>> = self
            .chunk_funcs
            .iter()
            .chain([&self.rt.gemm_f64])
            .map(|f| f.as_global_value().as_pointer_value())
            .collect();
        for (k, func) in self.funcs.iter().enumerate() {
            let driver = self.ir.functions[k].kind == ir::FunctionKind::Instance
                && self.called_from_c[k]
                && func.count_basic_blocks() > 0
                && func.get_enum_attribute(inkwell::attributes::AttributeLoc::Function, optnone).is_none()
                && !has_loop(*func, &self.few_latches.borrow())
                && only_drives(*func, &work_takers);
            if driver {
                self.unoptimised(*func, false);
            }
        }
        let mut f = self.module.get_first_function();
        while let Some(func) = f {
            if func.count_basic_blocks() > 0 {
                if instruction_count(func) > LARGE_FUNCTION {
                    self.unoptimised(func, false);
                }
                func.add_attribute(inkwell::attributes::AttributeLoc::Function, cpu);
                if !spec.features.is_empty() {
                    func.add_attribute(inkwell::attributes::AttributeLoc::Function, features);
                }
                func.add_attribute(inkwell::attributes::AttributeLoc::Function, nounwind);
            }
            f = func.get_next_function();
        }
        if let Err(e) = self.module.verify() {
            return Err(CodegenError::Bug(format!("the LLVM module does not verify: {}", e.to_string_lossy())));
        }
        Ok((self.module, tm))
    }
}

/// The most floating-point operations a function that only drives chunk
/// functions may do itself ([`only_drives`]).
const DRIVER_MAX_FLOAT_OPS: usize = 16;

/// Whether `func` hands work to one of `takers` (passes it to the runtime,
/// or calls it: the chunk functions and the runtime's matrix product), and
/// does little arithmetic itself: at most [`DRIVER_MAX_FLOAT_OPS`]
/// floating-point operations (combining a fold's partial results, a scalar
/// argument's scaling).
fn only_drives<'ctx>(func: inkwell::values::FunctionValue<'ctx>, takers: &[PointerValue<'ctx>]) -> bool {
    use inkwell::values::{InstructionOpcode, Operand};
    let mut float_ops = 0;
    let mut chunks = false;
    for inst in instructions(func) {
        if matches!(
            inst.get_opcode(),
            InstructionOpcode::FAdd
                | InstructionOpcode::FSub
                | InstructionOpcode::FMul
                | InstructionOpcode::FDiv
                | InstructionOpcode::FRem
                | InstructionOpcode::FNeg
        ) {
            float_ops += 1;
        }
        chunks |= (0..inst.get_num_operands()).any(|i| match inst.get_operand(i) {
            Some(Operand::Value(inkwell::values::BasicValueEnum::PointerValue(p))) => takers.contains(&p),
            _ => false,
        });
    }
    chunks && float_ops <= DRIVER_MAX_FLOAT_OPS
}

/// Whether `func`'s control flow has a cycle other than the loops whose
/// back edges are `few` (loops of a few iterations).
fn has_loop<'ctx>(func: inkwell::values::FunctionValue<'ctx>, few: &[InstructionValue<'ctx>]) -> bool {
    use inkwell::values::Operand;
    let blocks = func.get_basic_blocks();
    let index: HashMap<inkwell::basic_block::BasicBlock<'ctx>, usize> =
        blocks.iter().enumerate().map(|(k, b)| (*b, k)).collect();
    let successors = |k: usize| -> (Option<InstructionValue<'ctx>>, Vec<usize>) {
        let Some(t) = blocks[k].get_terminator() else { return (None, Vec::new()) };
        let next = (0..t.get_num_operands())
            .filter_map(|i| match t.get_operand(i) {
                Some(Operand::Block(b)) => index.get(&b).copied(),
                _ => None,
            })
            .collect();
        (Some(t), next)
    };
    // Depth first from the entry: an edge to a block on the path is a back edge.
    let mut state = vec![0u8; blocks.len()];
    let mut stack: Vec<(usize, Option<InstructionValue<'ctx>>, Vec<usize>)> = Vec::new();
    if blocks.is_empty() {
        return false;
    }
    let (t, next) = successors(0);
    state[0] = 1;
    stack.push((0, t, next));
    while let Some((k, t, next)) = stack.last_mut() {
        match next.pop() {
            Some(n) if state[n] == 1 => {
                if !t.is_some_and(|t| few.contains(&t)) {
                    return true;
                }
            }
            Some(n) if state[n] == 0 => {
                state[n] = 1;
                let (t, next) = successors(n);
                stack.push((n, t, next));
            }
            Some(_) => {}
            None => {
                state[*k] = 2;
                stack.pop();
            }
        }
    }
    false
}

/// Functions with more LLVM instructions than this are left unoptimised
/// (`optnone`, as cold code is). LLVM's optimisation and code generation
/// grow faster than linearly with a function's size: a rank-generic loop
/// whose library calls all inlined as dispatch code (60,000 instructions in
/// one function) took 27 s to compile at -O3 and 0.9 s at -O0. The largest
/// function of bench/kernels.sac has about 4,000.
pub const LARGE_FUNCTION: usize = 25_000;

/// The instructions of `func`'s body, block by block (an instruction
/// inserted before the one just handed out is not visited).
pub(crate) fn instructions<'ctx>(
    func: inkwell::values::FunctionValue<'ctx>,
) -> impl Iterator<Item = InstructionValue<'ctx>> {
    func.get_basic_blocks()
        .into_iter()
        .flat_map(|bb| std::iter::successors(bb.get_first_instruction(), |inst| inst.get_next_instruction()))
}

/// The instructions of `func`'s body.
fn instruction_count(func: inkwell::values::FunctionValue<'_>) -> usize {
    instructions(func).count()
}

/// Runs LLVM's optimisation pipeline ([`llvm_pipeline`]) on a finished module.
pub fn optimise(module: &Module<'_>, tm: &inkwell::targets::TargetMachine, options: &Options) -> R<()> {
    let x86_64 = tm.get_triple().as_str().to_string_lossy().starts_with("x86_64");
    let passes = llvm_pipeline(options.opt_level, x86_64);
    if options.vector_math && options.opt_level > 0 {
        crate::vecmath::widen_math(module, &crate::target_spec(options));
    }
    module
        .run_passes(&passes, tm, inkwell::passes::PassBuilderOptions::create())
        .map_err(|e| CodegenError::Llvm(format!("optimisation: {}", e.to_string_lossy())))?;
    keep_unoptimised_calls(module);
    if options.vector_math {
        crate::vecmath::use_libmvec(module, &crate::target_spec(options));
    }
    if options.opt_level > 0 && x86_64 {
        parallel::mark_streaming_stores(module);
    }
    Ok(())
}

/// Takes back, from each function an unoptimised (`optnone`) function calls,
/// what LLVM's pipeline inferred about its effects and its return
/// (`memory`, `noreturn`, `willreturn`), once the pipeline is done with
/// them: the code generator would drop a call to a function it believes
/// has no effects, and an unoptimised caller (the C functions, [`crate::abi`])
/// has not inlined its callee as an optimised one would. An endless loop
/// without effects (`tests/abi/spin.sac`) is inferred `noreturn` and
/// `memory(none)`; its C function then returned at once instead of looping.
/// Only code generation is left to use the facts, and a call kept costs
/// nothing the callee's own machine code does not.
fn keep_unoptimised_calls(module: &Module<'_>) {
    use inkwell::attributes::{Attribute, AttributeLoc};
    let optnone = Attribute::get_named_enum_kind_id("optnone");
    let facts = ["memory", "noreturn", "willreturn"].map(Attribute::get_named_enum_kind_id);
    for caller in module.get_functions() {
        if caller.get_enum_attribute(AttributeLoc::Function, optnone).is_none() {
            continue;
        }
        for inst in instructions(caller) {
            let Ok(call) = inkwell::values::CallSiteValue::try_from(inst) else { continue };
            let Some(callee) = call.get_called_fn_value() else { continue };
            if callee.count_basic_blocks() == 0 {
                continue;
            }
            for kind in facts {
                callee.remove_enum_attribute(AttributeLoc::Function, kind);
                call.remove_enum_attribute(AttributeLoc::Function, kind);
            }
        }
    }
}

/// LLVM's pass pipeline at `opt_level`: `default<O0…O3>`, and on targets other
/// than x86-64 loop strength reduction after it, where LLVM's code generator
/// would have run it (it is off there, see `configure_llvm`: on x86-64 it
/// cost compile time and bought nothing; targets with narrower addressing
/// modes keep it).
///
/// Above `-O0`, identical functions are merged first (`mergefunc`: callers
/// call one of them, a function whose address is taken becomes a jump to it),
/// so LLVM optimises and compiles each once: the instances of an element-wise
/// function for different shapes have the same flat chunk loop (the AKS
/// instance's, streaming, is the AKD instance's streaming one), and each
/// copy cost the whole pipeline. Negation hinted at 4000x4000 with its AKD
/// and AUD instances: LLVM's instructions 155M -> 139M (callgrind, both
/// phases); kernels without such copies (each bench kernel as the compile
/// service gets it, one hint per parameter: `bench/ab/compile_cost.py`)
/// pay nothing measurable for the pass.
pub(crate) fn llvm_pipeline(opt_level: u8, x86_64: bool) -> String {
    let level = opt_level.min(3);
    if level == 0 {
        return "default<O0>".to_string();
    }
    let pipeline =
        if level == 3 { format!("mergefunc,{}", o3_pipeline()) } else { format!("mergefunc,default<O{level}>") };
    if x86_64 { pipeline } else { pipeline + ",function(loop-mssa(canon-freeze,loop-reduce))" }
}

/// LLVM 19's `default<O3>` as `opt -passes='default<O3>' -print-pipeline-passes`
/// spells it, in the same order with the same parameters, less the passes that
/// find nothing to do in the modules we emit but still cost their visit of
/// every function (and the analyses they ask for):
///
/// - `loop-load-elim` (store-to-load forwarding across iterations of one
///   array: a with-loop writes one array and reads others; its loop access
///   analysis was 5-8% of the pipeline's instructions on bench kernels) and
///   `loop-distribute` (only acts on a loop that asks for it);
/// - coroutine, OpenMP, instrumentation and profile passes (`coro-*`,
///   `openmp-opt*`, `ee-instrument`, `lower-expect`, `chr`, `loop-sink`,
///   `cg-profile`), and `annotation2metadata`, `annotation-remarks`,
///   `forceattrs`, `callsite-splitting`, `called-value-propagation`,
///   `speculative-execution` (divergent targets only), `libcalls-shrinkwrap`,
///   `move-auto-init`, `constmerge`, `rel-lookup-table-converter`.
///
/// The SLP vectoriser stays although it packs nothing at our
/// `-slp-max-vf=1` ([`crate::configure_llvm`]): without it det's minor
/// elimination compiled to other code.
///
/// One difference the text cannot avoid: `default<O3>` runs a second loop
/// unswitching after `indvars` only on the loops the first one asked it for
/// (a pass manager with no name in the pipeline syntax); printed, it reads as
/// an unconditional `simple-loop-unswitch`, which ran on every loop. It is
/// left out. The machine code of bench/kernels.sac and bench/kernels.l0
/// with the bench library's hints is `default<O3>`'s but for the order of
/// the index arithmetic in three of det's functions (the Laplace expansion's
/// minor elimination for 6x6 to 8x8; det's times within noise,
/// `bench/ab/ab.c`), at 7.5% fewer instructions in
/// LLVM's optimisation pipeline (callgrind, `opt` on the bench library's
/// module: 2,822M -> 2,610M; negation's alone 41M -> 37M); the 13 kernels
/// as the compile service gets them, all of LLVM's work: 3,266M -> 3,146M
/// (`bench/ab/compile_cost.py`). A new LLVM brings its own
/// `default<O3>`: compare this list with what it prints before moving.
fn o3_pipeline() -> String {
    // The pass settings `default<O3>` uses; `ic` and `cfg` recur most.
    let ic = "instcombine<max-iterations=1;no-use-loop-info;no-verify-fixpoint>";
    let cfg = "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;\
               keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;\
               no-speculate-unpredictables>";
    let early_cfg = "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;no-switch-range-to-icmp;\
                     no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;\
                     simplify-cond-branch;no-speculate-unpredictables>";
    let sinking_cfg = "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;\
                       no-switch-to-lookup;keep-loops;hoist-common-insts;sink-common-insts;speculate-blocks;\
                       simplify-cond-branch;no-speculate-unpredictables>";
    let late_cfg = "simplifycfg<bonus-inst-threshold=1;forward-switch-cond;switch-range-to-icmp;switch-to-lookup;\
                    no-keep-loops;hoist-common-insts;sink-common-insts;speculate-blocks;simplify-cond-branch;\
                    no-speculate-unpredictables>";
    let last_cfg = "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;\
                    no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;\
                    simplify-cond-branch;speculate-unpredictables>";
    let rotate = "loop-rotate<header-duplication;no-prepare-for-lto>";
    let unswitch = "simple-loop-unswitch<nontrivial;trivial>";
    // Module simplification: the inliner's walk of the call graph, each
    // function simplified as it is reached.
    let simplify = [
        "inferattrs".to_string(),
        format!("function<eager-inv>({early_cfg},sroa<modify-cfg>,early-cse<>)"),
        "ipsccp,globalopt".to_string(),
        format!("function<eager-inv>(mem2reg,{ic},{cfg})"),
        "always-inline,require<globals-aa>,function(invalidate<aa>),require<profile-summary>".to_string(),
        format!(
            "cgscc(devirt<4>(inline,function-attrs<skip-non-recursive-function-attrs>,argpromotion,\
             function<eager-inv;no-rerun>(sroa<modify-cfg>,early-cse<memssa>,jump-threading,correlated-propagation,\
             {cfg},{ic},aggressive-instcombine,tailcallelim,{cfg},reassociate,constraint-elimination,\
             loop-mssa(loop-instsimplify,loop-simplifycfg,licm<no-allowspeculation>,{rotate},licm<allowspeculation>,\
             {unswitch}),{cfg},{ic},loop(loop-idiom,indvars,loop-deletion,loop-unroll-full),\
             sroa<modify-cfg>,vector-combine,mldst-motion<no-split-footer-bb>,gvn<>,sccp,bdce,{ic},jump-threading,\
             correlated-propagation,adce,memcpyopt,dse,loop-mssa(licm<allowspeculation>),{sinking_cfg},{ic}),\
             function-attrs,function(require<should-not-run-function-passes>)))"
        ),
    ];
    // Optimisation: vectorisation and unrolling of the simplified loops.
    let optimise = [
        "deadargelim,globalopt,globaldce,elim-avail-extern,rpo-function-attrs,recompute-globalsaa".to_string(),
        format!(
            "function<eager-inv>(float2int,lower-constant-intrinsics,loop({rotate},loop-deletion),\
             inject-tli-mappings,loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only;>,\
             infer-alignment,{ic},{late_cfg},slp-vectorizer,vector-combine,{ic},loop-unroll<O3>,transform-warning,\
             sroa<preserve-cfg>,infer-alignment,{ic},loop-mssa(licm<allowspeculation>),alignment-from-assumptions,\
             instsimplify,div-rem-pairs,tailcallelim,{last_cfg})"
        ),
        "globaldce".to_string(),
    ];
    simplify.iter().chain(&optimise).map(String::as_str).collect::<Vec<_>>().join(",")
}

pub(crate) fn is_undef(v: BasicValueEnum<'_>) -> bool {
    match v {
        BasicValueEnum::IntValue(x) => x.is_undef(),
        BasicValueEnum::FloatValue(x) => x.is_undef(),
        BasicValueEnum::PointerValue(x) => x.is_undef(),
        _ => false,
    }
}

pub(crate) fn undef(t: BasicTypeEnum<'_>) -> BasicValueEnum<'_> {
    match t {
        BasicTypeEnum::IntType(t) => t.get_undef().into(),
        BasicTypeEnum::FloatType(t) => t.get_undef().into(),
        BasicTypeEnum::PointerType(t) => t.get_undef().into(),
        BasicTypeEnum::ArrayType(t) => t.get_undef().into(),
        BasicTypeEnum::StructType(t) => t.get_undef().into(),
        BasicTypeEnum::VectorType(t) => t.get_undef().into(),
        BasicTypeEnum::ScalableVectorType(t) => t.get_undef().into(),
    }
}

/// The constants a block (and the blocks nested in it) defines.
fn collect_consts<'a>(b: &'a Block, out: &mut HashMap<ValueId, &'a Value>) {
    for s in &b.stmts {
        if let Op::Const(v) = &s.op {
            out.insert(s.defs[0], v);
        }
        s.op.walk_blocks(&mut |inner| collect_consts(inner, out));
    }
}

pub(crate) fn elem_bytes(b: BaseType) -> u64 {
    match b {
        BaseType::Bool | BaseType::Char | BaseType::Byte | BaseType::UByte => 1,
        BaseType::Short | BaseType::UShort => 2,
        BaseType::Int | BaseType::UInt | BaseType::Float => 4,
        _ => 8,
    }
}

/// When each owned value of a block dies, and which consuming uses move it.
pub(crate) struct Plan {
    pub owned: HashSet<ValueId>,
    /// Per statement: owned values whose last use it is.
    pub dies_after: Vec<Vec<ValueId>>,
    /// Per statement: values it consumes that move into it (no reference taken).
    pub moved: Vec<HashSet<ValueId>>,
    /// Owned values no statement and no yield uses.
    pub dead_on_arrival: Vec<ValueId>,
}

/// Per value a block owns (and does not release on entry): the statement
/// after which it is released or into which it moves; `None`: it is yielded.
fn release_points(b: &Block, plan: &Plan) -> HashMap<ValueId, Option<usize>> {
    let mut at: HashMap<ValueId, Option<usize>> = HashMap::default();
    for (i, dies) in plan.dies_after.iter().enumerate() {
        for v in dies {
            at.insert(*v, Some(i));
        }
    }
    for y in &b.yields {
        if plan.owned.contains(y) && !at.contains_key(y) {
            at.insert(*y, None);
        }
    }
    for v in &plan.dead_on_arrival {
        at.remove(v);
    }
    at
}

/// The values a statement consumes (takes over), besides borrowing operands.
pub(crate) fn consumed(s: &Stmt) -> Vec<ValueId> {
    match &s.op {
        Op::Prim {
            prim: compiler_core::sema::hir::Prim::Modarray | compiler_core::sema::hir::Prim::IdxModarray,
            args,
            in_place: true,
            ..
        } => vec![args[0]],
        Op::With(w) => w.reuse.iter().flatten().copied().collect(),
        Op::Loop { init, .. } => init.clone(),
        _ => Vec::new(),
    }
}

pub(crate) fn plan_block(f: &Function, b: &Block, extra_owned: &[ValueId], borrowed: &HashSet<ValueId>) -> Plan {
    let counted = |v: ValueId| {
        let t = f.ty(v);
        !scalar_repr(t) && t.elem != Elem::String
    };
    let mut owned: HashSet<ValueId> = extra_owned.iter().copied().filter(|v| counted(*v)).collect();
    for s in &b.stmts {
        owned.extend(s.defs.iter().copied().filter(|v| counted(*v) && !borrowed.contains(v)));
    }
    let n = b.stmts.len();
    let mut dies_after: Vec<Vec<ValueId>> = vec![Vec::new(); n];
    let mut moved: Vec<HashSet<ValueId>> = vec![HashSet::default(); n];
    let mut seen: HashSet<ValueId> = b.yields.iter().copied().collect();
    for i in (0..n).rev() {
        let s = &b.stmts[i];
        let uses = compiler_core::opt::util::free_uses(s);
        let cons = consumed(s);
        for v in &uses {
            if owned.contains(v) && seen.insert(*v) {
                dies_after[i].push(*v);
                // Consumed here, once, and read by nothing else in the statement: moves.
                // A with-loop whose result takes over `v`'s buffer may also read
                // `v` in its body (only where it writes: the reuse pass checked) and
                // name it as its modarray's array.
                let times = cons.iter().filter(|c| *c == v).count();
                let reused = match &s.op {
                    Op::With(w) => w.reuse.iter().flatten().any(|r| r == v),
                    _ => false,
                };
                let own_array = match &s.op {
                    Op::With(w) if reused => {
                        w.ops.iter().filter(|o| matches!(o, WithOp::Modarray { array } if array == v)).count()
                    }
                    _ => 0,
                };
                let nested = nested_uses(s).contains(v) && !reused;
                let other_operand = s.op.operands().iter().filter(|o| *o == v).count() > times + own_array;
                if times == 1 && !nested && !other_operand {
                    moved[i].insert(*v);
                }
            }
        }
    }
    let mut dead_on_arrival = Vec::new();
    for v in extra_owned {
        if owned.contains(v) && !seen.contains(v) {
            dead_on_arrival.push(*v);
        }
    }
    // Definitions nobody uses die right after the defining statement.
    for (i, s) in b.stmts.iter().enumerate() {
        for d in &s.defs {
            if owned.contains(d) && !seen.contains(d) {
                dies_after[i].push(*d);
            }
        }
    }
    // `free_uses` is a hash set: in handle order, the code is the same every
    // compile (the same bytes for the same program).
    for d in &mut dies_after {
        d.sort_unstable();
    }
    Plan { owned, dies_after, moved, dead_on_arrival }
}

/// What the nested blocks of a statement read from outside them.
fn nested_uses(s: &Stmt) -> HashSet<ValueId> {
    let mut nested = HashSet::default();
    s.op.walk_blocks(&mut |blk| {
        let defined = compiler_core::opt::util::defined_in(blk);
        blk.walk(&mut |t| {
            for v in t.op.operands() {
                if !defined.contains(&v) {
                    nested.insert(v);
                }
            }
        });
        for y in &blk.yields {
            if !defined.contains(y) {
                nested.insert(*y);
            }
        }
    });
    nested
}

/// How many iterations a counted loop ([`Emitter::for_range`]) runs, for
/// LLVM's loop passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trips {
    /// Over elements: LLVM may vectorise and interleave it
    /// ([`Emitter::loop_hints`]).
    Many,
    /// A few (an index vector's components, a shape's extents, a parallel
    /// job's chunks): kept a scalar loop ([`Emitter::small_loop_hints`]).
    Few,
}
