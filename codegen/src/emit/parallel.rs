//! Parallel with-loop parts: the outermost loop of a part split over threads.
//!
//! A with-loop qualifies when every result is allocated before the loops
//! (genarray with a static cell shape, modarray), every fold is a scalar fold
//! with a primitive that has an identity (no extra arguments, no fixpoint), no
//! part's body prints or calls a function that may print, `first_match` does not matter,
//! every part's index length is static or the part is flat (one loop over
//! its frame's offsets, `compiler_core::opt::util::flat_part`; its chunks
//! are ranges of offsets), and there is no scan or filter (they
//! make a sequential pass over their frame after the parts, see `scan.rs`).
//! For such a part the emitter outlines the loop nest into a chunk function
//!
//! ```text
//! void wl.chunk(wl_ctx *ctx, env *e, i64 chunk, i64 lo, i64 hi)
//! ```
//!
//! that runs outer iterations `lo..hi`, reading what the body needs from
//! outside (non-constant values only) from `e`; offsets of constant indices
//! it recomputes from extents instead ([`RematOffset`]). At run time the runtime's
//! `wl_parallel_chunks` decides from the part's size whether to split
//! (`WITHLOOP_THREADS`, the context's thread count, a size threshold); below
//! the threshold the parent calls the chunk function itself, as chunk 0 over
//! the whole range (the loop nest exists once, in the chunk function, which
//! is `noinline`: LLVM compiles one copy, not an inline one beside it).
//!
//! Folds: chunk 0 continues from the accumulator, the other chunks start from
//! the operation's identity and store their partial results; the parent
//! combines them in chunk order. One chunk is the sequential computation;
//! several reassociate floating-point sums (as every parallel reduction does).
//! Errors: each chunk runs with a private context, and the error of the lowest
//! chunk is the one reported (the one a sequential run meets first).

use compiler_core::{HashMap, HashSet};

use compiler_core::ir::{Op, Part, Stmt, With};
use compiler_core::opt::util::free_uses;
use compiler_core::sema::hir::Elem;
use compiler_core::syntax::ast::BaseType;
use inkwell::IntPredicate;
use inkwell::module::Linkage;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, PointerValue};

use super::ops::{static_extent, static_rank};
use super::withloop::{Frame, OpState, PartCx, Result as GenResult};
use super::{Emitter, Fx, R, Trips, base, scalar_repr};
use crate::CodegenError;
use crate::rt;

/// The fewest indices a part needs for its nested with-loops' work to count
/// towards splitting it over threads ([`Emitter::statically_small`]).
const NESTED_WORK_MIN_ITERATIONS: i64 = 8;

/// Values of the parent function a chunk function reads through its
/// environment.
#[derive(Default)]
struct Captures<'ctx> {
    values: Vec<BasicValueEnum<'ctx>>,
    index: HashMap<BasicValueEnum<'ctx>, usize>,
}

impl<'ctx> Captures<'ctx> {
    fn add(&mut self, v: BasicValueEnum<'ctx>) {
        if is_constant(v) || self.index.contains_key(&v) {
            return;
        }
        self.index.insert(v, self.values.len());
        self.values.push(v);
    }
}

fn is_constant(v: BasicValueEnum<'_>) -> bool {
    match v {
        BasicValueEnum::IntValue(x) => x.is_const(),
        BasicValueEnum::FloatValue(x) => x.is_const(),
        BasicValueEnum::PointerValue(x) => x.is_const(),
        _ => v.as_instruction_value().is_none(),
    }
}

/// A part's chunk function and the environment it is called with.
struct Outlined<'ctx> {
    func: inkwell::values::FunctionValue<'ctx>,
    /// The streaming copy of `func`, for a part that streams by size.
    stream_func: Option<inkwell::values::FunctionValue<'ctx>>,
    env: PointerValue<'ctx>,
    env_ty: inkwell::types::StructType<'ctx>,
    /// The environment's field holding where partial fold results go.
    partials_field: Option<u32>,
    /// The environment's field of each captured value.
    fields: HashMap<BasicValueEnum<'ctx>, usize>,
}

/// Whether a parallel part's stores stream past the caches
/// ([`Emitter::part_streams`]).
enum Streaming<'ctx> {
    Never,
    Always,
    /// When the part writes and reads [`PART_STREAM_MIN_FOOTPRINT`] or more
    /// (a step of a loop: the context's `stream_min`), known at run time:
    /// its chunk function has a streaming copy. The footprint is `known`
    /// bytes, plus `cell_bytes` per index of the part (unless
    /// `static_cells`: counted in `known`), plus each of `arrays`' elements
    /// at its width.
    Sized {
        cell_bytes: u64,
        known: u64,
        arrays: Vec<(PointerValue<'ctx>, u64)>,
        static_cells: bool,
        step: bool,
    },
}

/// A chunk function being emitted ([`Emitter::chunk_shell`]).
struct ChunkShell<'ctx, 'a> {
    func: inkwell::values::FunctionValue<'ctx>,
    /// The chunk function's own emission state (no values bound yet).
    cfx: Fx<'ctx, 'a>,
    /// The parent's captured values → their loads in the chunk function.
    remap: Remap<'ctx>,
    chunk: IntValue<'ctx>,
    lo: IntValue<'ctx>,
    hi: IntValue<'ctx>,
    entry_bb: inkwell::basic_block::BasicBlock<'ctx>,
    body_bb: inkwell::basic_block::BasicBlock<'ctx>,
}

/// Parent value → its copy in the chunk function.
struct Remap<'ctx> {
    map: HashMap<BasicValueEnum<'ctx>, BasicValueEnum<'ctx>>,
}

impl<'ctx> Remap<'ctx> {
    fn v(&self, v: BasicValueEnum<'ctx>) -> BasicValueEnum<'ctx> {
        self.map.get(&v).copied().unwrap_or(v)
    }
    fn int(&self, v: IntValue<'ctx>) -> IntValue<'ctx> {
        self.v(v.into()).into_int_value()
    }
    fn ptr(&self, v: PointerValue<'ctx>) -> PointerValue<'ctx> {
        self.v(v.into()).into_pointer_value()
    }
    fn frame(&self, f: &Frame<'ctx>) -> Frame<'ctx> {
        Frame {
            len: self.int(f.len),
            buf: self.ptr(f.buf),
            ext: f.ext.as_ref().map(|e| e.iter().map(|x| self.int(*x)).collect()),
        }
    }
}

fn frame_values<'ctx>(f: &Frame<'ctx>, c: &mut Captures<'ctx>) {
    c.add(f.len.into());
    c.add(f.buf.into());
    for e in f.ext.iter().flatten() {
        c.add((*e).into());
    }
}

/// Whether a block has effects, or calls a function that may have
/// (`effectful`): then it must not run in parallel (its output would
/// interleave). A call of a pure function may run on a pool thread: its
/// with-loops run sequentially there (a chunk's context asks for one
/// thread), its errors reach the caller as the chunk's, and its recursion
/// is checked against that thread's stack.
fn sequential_only(b: &compiler_core::ir::Block, effectful: &[bool]) -> bool {
    let mut bad = false;
    b.walk(&mut |s| match &s.op {
        Op::Call { func, .. } if effectful.get(func.0 as usize).copied().unwrap_or(true) => bad = true,
        Op::Prim { prim, .. } if prim.has_effect() => bad = true,
        _ => {}
    });
    bad
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Whether with-loop `w` (its results prepared in `states`) may run its
    /// parts in parallel.
    pub(crate) fn parallel_eligible(&self, fx: &Fx<'ctx, 'a>, w: &With, states: &[OpState<'ctx, 'a>]) -> bool {
        if w.first_match && w.parts.len() > 1 {
            return false;
        }
        let results_ready = states.iter().all(|st| match st {
            OpState::Gen { result: GenResult::Eager { .. }, cell_static: Some(_), .. } => true,
            OpState::Mod { .. } => true,
            OpState::Fold { ty, fun, partial, fix, .. } => {
                scalar_repr(ty)
                    && partial.is_empty()
                    && fix.is_none()
                    && Self::fold_identity(fun, base(ty)).is_some()
                    // Chunks change the order of a floats' fold (`+`, `*`,
                    // and `min`/`max` where a NaN is met): exact folds keep it.
                    && !(self.exact_folds && matches!(base(ty), BaseType::Float | BaseType::Double))
            }
            // Scans and filters make a sequential pass over their frame
            // after the parts (in row-major order, whatever the parts are).
            OpState::Scan(_) | OpState::Filter(_) => false,
            _ => false,
        });
        results_ready
            && w.parts.iter().all(|p| {
                let n = p.scalars.as_ref().map(Vec::len).or_else(|| static_extent(fx.irf.ty(p.lower), 0));
                let flat = n.is_none() && compiler_core::opt::util::flat_part(&*fx.defs, w, p);
                (n.is_some_and(|n| n >= 1) || flat) && !sequential_only(&p.body, &self.effectful)
            })
    }

    /// Whether a part is known here to be too small to split over threads
    /// ([`Emitter::static_parallel_min`]): it then runs inline, without a chunk function.
    ///
    /// The work of an index counts its nested loops and calls; its nested
    /// with-loops count only where the part has [`NESTED_WORK_MIN_ITERATIONS`]
    /// indices or more. Most nested with-loops are small and fixed (a
    /// determinant's minors: counting them gave every small with-loop a chunk
    /// function), but a Laplace expansion inlined whole is folds nested in
    /// folds, and its outer fold, ten indices each a 9x9 determinant, is the
    /// one to split (hinted-only `det`: one thread instead of two without it).
    /// Fewer indices than that would not keep the threads busy: the nested
    /// with-loops split instead.
    pub(crate) fn statically_small(&self, fx: &Fx<'ctx, 'a>, p: &Part) -> bool {
        use compiler_core::opt::util::{part_loop_work, part_work, static_iterations};
        let Some(n) = static_iterations(&*fx.defs, p) else { return false };
        // `part_work` counts all that `part_loop_work` does and nested with-loops besides.
        let work = if n >= NESTED_WORK_MIN_ITERATIONS { part_work } else { part_loop_work };
        n.saturating_mul(work(&*fx.defs, p, &self.call_work)) < self.static_parallel_min
    }

    /// Whether a part's outer axis, the one threads split, spans at most one
    /// index whatever the extents (`[m - 1, 0] <= iv < [m, n]`: a stencil's
    /// first or last row in generic code): a parallel variant of it would
    /// never run, as no with-loop splits into more chunks than it has outer
    /// indices. A two-dimensional part that packs panels splits on its
    /// columns instead ([`chunked_axis`]) and keeps its variant.
    pub(crate) fn never_splits(
        &self,
        fx: &Fx<'ctx, 'a>,
        part: &Part,
        states: &[OpState<'ctx, 'a>],
        w: &'a With,
        s: &'a Stmt,
    ) -> bool {
        let reader = compiler_core::opt::index::Reader::new(fx.irf, &*fx.defs);
        let (Some(lo), Some(hi)) = (reader.vector(part.lower), reader.vector(part.upper)) else { return false };
        let one_row = lo.first().zip(hi.first()).and_then(|(l, h)| h.minus(l)).is_some_and(|d| d <= 1);
        let pcx = PartCx { w, part, s, iv_slot: None, mask: None, end: None, stream: false };
        one_row && !(lo.len() == 2 && self.packs_panels(fx, &pcx, states, 2))
    }

    /// Whether a part is a with-loop of static size inside a chunk function:
    /// it runs on that chunk's thread alone, or inside a part whose whole work
    /// was too small to split, so a parallel variant would be code that never
    /// runs ([`Fx::in_chunk`]). A part of dynamic size keeps its variant: its
    /// enclosing part's estimate assumed [`compiler_core::opt::util::UNKNOWN_TRIPS`]
    /// indices for it and may have kept a much larger loop on one thread.
    pub(crate) fn nested_in_chunk(&self, fx: &Fx<'ctx, 'a>, p: &Part) -> bool {
        fx.in_chunk && compiler_core::opt::util::static_iterations(&*fx.defs, p).is_some()
    }

    /// One part of an eligible with-loop: split over threads when the runtime
    /// says it is worth it, else run on this thread (one call of the chunk
    /// function over the whole range).
    pub(crate) fn parallel_part(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        s: &'a Stmt,
        w: &'a With,
        part: &'a Part,
        states: &mut [OpState<'ctx, 'a>],
    ) -> R<()> {
        let lty = fx.irf.ty(part.lower).clone();
        let n = part.scalars.as_ref().map(Vec::len).or_else(|| static_extent(&lty, 0));
        let pcx = PartCx { w, part, s, iv_slot: None, mask: None, end: None, stream: false };
        let panels = n.is_some_and(|n| self.packs_panels(fx, &pcx, states, n));
        let flat = super::withloop::runs_flat(fx, w, part, n);
        // The step of a loop run in time tiles: chunks of the part's rows.
        let tile =
            fx.time_tile.filter(|t| t.with == s.defs[0] && !flat && n.is_some_and(|n| chunked_axis(n, panels) == 0));
        let (outer, total) = match n {
            // A flat part: its offsets are the outer loop.
            _ if flat => {
                let t = self.flat_count(fx, part)?;
                (t, t)
            }
            Some(n) => self.outer_and_total(fx, s, part, n, chunked_axis(n, panels))?,
            None => return Err(CodegenError::Bug("a parallel part without a static index length".into())),
        };
        // The runtime weighs the indices by the work each does (a row of an
        // interchanged fold is a loop of its own).
        let work = compiler_core::opt::util::part_work(&*fx.defs, part, &self.call_work);
        let weighted = if work > 1 { self.b.build_int_mul(total, self.const_i64(work), "work")? } else { total };
        let folds = states.iter().filter(|st| matches!(st, OpState::Fold { .. })).count();
        // The part is emitted once, in its chunk function: the inline path
        // calls it over the whole range (one copy of the loop nest instead of
        // two, so LLVM compiles half as much), its folds' results in a
        // buffer of its own.
        let inline_partials = if folds > 0 {
            self.alloca(fx, self.i64().array_type(folds as u32).into(), "par.inline.partials")?
        } else {
            self.ptr().const_null()
        };
        let streaming = self.part_streams(fx, s, w, part, states, n);
        let out = self.outline(fx, s, w, part, states, inline_partials, folds, &streaming)?;
        // The chunk function, or where the part streams by size, the one of
        // its two copies that fits.
        let chunk_fn = match out.stream_func {
            Some(stream_func) => {
                let large = self.streams_at_run_time(fx, &streaming, total)?;
                let (plain, stream) =
                    (out.func.as_global_value().as_pointer_value(), stream_func.as_global_value().as_pointer_value());
                Some(self.b.build_select(large, stream, plain, "chunk.fn")?.into_pointer_value())
            }
            None => None,
        };
        if let Some(t) = tile
            && let Some(n) = n
            && self.time_tiled(fx, s, part, n, states, &out, chunk_fn, weighted, t)?
        {
            return Ok(());
        }
        let chunks = self.chunks_for(fx, outer, weighted)?;
        let split = self.b.build_int_compare(IntPredicate::SGT, chunks, self.const_i64(1), "split")?;
        let par_bb = self.ctx.append_basic_block(fx.func, "par.split");
        let seq_bb = self.ctx.append_basic_block(fx.func, "par.inline");
        let join = self.ctx.append_basic_block(fx.func, "par.join");
        self.b.build_conditional_branch(split, par_bb, seq_bb)?;

        self.b.position_at_end(seq_bb);
        let zero = self.const_i64(0);
        let args = [fx.ctxp.into(), out.env.into(), zero.into(), zero.into(), outer.into()];
        match chunk_fn {
            Some(f) => self.b.build_indirect_call(self.chunk_fn_type(), f, &args, "")?,
            None => self.b.build_call(out.func, &args, "")?,
        };
        self.check_error(fx)?;
        let mut k = 0;
        for st in states.iter() {
            let OpState::Fold { slot, ty, .. } = st else { continue };
            let p = self.gep(self.i64(), inline_partials, &[self.const_i64(k)], "p0")?;
            let bits = self.b.build_load(self.i64(), p, "bits")?.into_int_value();
            let v = self.scalar_from_bits(bits, base(ty))?;
            self.b.build_store(*slot, v)?;
            k += 1;
        }
        self.b.build_unconditional_branch(join)?;

        self.b.position_at_end(par_bb);
        let partials = if folds > 0 {
            let n = self.b.build_int_mul(chunks, self.const_i64(folds as i64), "npartials")?;
            let p = self
                .call(self.rt.calloc, &[n.into(), self.const_i64(8).into()])?
                .ok_or_else(|| CodegenError::Bug("calloc".into()))?
                .into_pointer_value();
            let field = out.partials_field.ok_or_else(|| CodegenError::Bug("folds without partials".into()))?;
            let at = self.b.build_struct_gep(out.env_ty, out.env, field, "env.partials")?;
            self.b.build_store(at, p)?;
            p
        } else {
            self.ptr().const_null()
        };
        let env = out.env;
        let f = chunk_fn.unwrap_or_else(|| out.func.as_global_value().as_pointer_value());
        // A chunk that fails, or a fold function failing as the partials are
        // combined, leaves through a block that frees the partials first.
        let outer_fail = fx.fail_bb;
        if folds > 0 {
            let free_bb = self.ctx.append_basic_block(fx.func, "par.fail.partials");
            let here = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
            self.b.position_at_end(free_bb);
            self.call(self.rt.free, &[partials.into()])?;
            self.b.build_unconditional_branch(outer_fail)?;
            self.b.position_at_end(here);
            fx.fail_bb = free_bb;
        }
        self.call(self.rt.parallel_for, &[fx.ctxp.into(), outer.into(), chunks.into(), f.into(), env.into()])?;
        self.check_error(fx)?;
        // Combine the partial folds in chunk order.
        let mut k = 0;
        for st in states.iter() {
            let OpState::Fold { slot, ty, fun, .. } = st else { continue };
            let (slot, ty, fun) = (*slot, ty.clone(), *fun);
            let b = base(&ty);
            let first = self.gep(self.i64(), partials, &[self.const_i64(k)], "p0")?;
            let bits = self.b.build_load(self.i64(), first, "bits")?.into_int_value();
            let v = self.scalar_from_bits(bits, b)?;
            self.b.build_store(slot, v)?;
            let loc = fx.loc;
            let folds_n = self.const_i64(folds as i64);
            self.for_range(fx, Trips::Few, self.const_i64(1), chunks, &mut |e, fx, c| {
                let at = e.b.build_int_mul(c, folds_n, "at")?;
                let at = e.b.build_int_add(at, e.const_i64(k), "at")?;
                let p = e.gep(e.i64(), partials, &[at], "pc")?;
                let bits = e.b.build_load(e.i64(), p, "bits")?.into_int_value();
                let y = e.scalar_from_bits(bits, b)?;
                e.fold_step(fx, slot, &ty, fun, &[], None, None, y, &ty, loc)
            })?;
            k += 1;
        }
        fx.fail_bb = outer_fail;
        if folds > 0 {
            self.call(self.rt.free, &[partials.into()])?;
        }
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        Ok(())
    }

    /// The step of a loop marked `tiled` (see [`super::TimeTile`]): the
    /// runtime runs it over the part's rows, as many steps as it decides
    /// (`wl_time_tiled`), and the count goes to the loop. `false` (nothing
    /// emitted) where the environment does not hold the arrays as the
    /// runtime needs them: the old array's header (not a data pointer of it
    /// the parent loaded), the new array's header and its data pointer.
    #[allow(clippy::too_many_arguments)]
    fn time_tiled(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        s: &'a Stmt,
        part: &'a Part,
        n: usize,
        states: &[OpState<'ctx, 'a>],
        out: &Outlined<'ctx>,
        chunk_fn: Option<PointerValue<'ctx>>,
        work: IntValue<'ctx>,
        t: super::TimeTile<'ctx>,
    ) -> R<bool> {
        let [OpState::Mod { arr, data, .. }] = states else { return Ok(false) };
        let Some(src) = fx.vals.get(&t.array).copied().filter(|v| v.is_pointer_value()) else { return Ok(false) };
        if fx.data.contains_key(&t.array) || src == BasicValueEnum::from(*arr) {
            return Ok(false);
        }
        let field = |v: BasicValueEnum<'ctx>| out.fields.get(&v).map(|i| *i as u32);
        let (Some(src_f), Some(dst_f), Some(data_f)) = (field(src), field((*arr).into()), field((*data).into())) else {
            return Ok(false);
        };
        let Some(env_bytes) = out.env_ty.size_of() else { return Ok(false) };
        let ploc = self.sub_loc(s, part.span, fx.loc);
        let g = self.load_generator(fx, part, n, ploc)?;
        let slot = |e: &mut Self, f: u32| e.b.build_struct_gep(out.env_ty, out.env, f, "env.slot");
        let (src_slot, dst_slot, data_slot) = (slot(self, src_f)?, slot(self, dst_f)?, slot(self, data_f)?);
        // The part's box, as the runtime reads it.
        let bounds = self.i64().array_type(n as u32);
        let (lower, upper) =
            (self.alloca(fx, bounds.into(), "tile.lower")?, self.alloca(fx, bounds.into(), "tile.upper")?);
        for d in 0..n {
            let at = self.const_i64(d as i64);
            self.b.build_store(self.gep(self.i64(), lower, &[at], "lo")?, g.lo[d])?;
            self.b.build_store(self.gep(self.i64(), upper, &[at], "hi")?, g.hi[d])?;
        }
        let plain = out.func.as_global_value().as_pointer_value();
        let args = [
            fx.ctxp.into(),
            plain.into(),
            chunk_fn.unwrap_or(plain).into(),
            out.env.into(),
            self.b.build_int_s_extend_or_bit_cast(env_bytes, self.i64(), "env.bytes")?.into(),
            src_slot.into(),
            dst_slot.into(),
            data_slot.into(),
            lower.into(),
            upper.into(),
            self.const_i64(t.reach as i64).into(),
            t.remaining.into(),
            work.into(),
        ];
        let ran = self.call(self.rt.time_tiled, &args)?.ok_or_else(|| CodegenError::Bug("wl_time_tiled".into()))?;
        self.b.build_store(t.steps, ran)?;
        self.check_error(fx)?;
        Ok(true)
    }

    /// Whether a parallel part's stores stream past the caches
    /// ([`PartCx::stream`]): where the target streams, a part writing one
    /// result of scalar cells whose body computes scalars only, so that every
    /// store in its chunk function is a store of a cell (no index vector, no
    /// array built, no call, which LLVM may inline, no nested loop), and
    /// short ([`STREAM_MAX_STATEMENTS`]), dense (its rows are what
    /// [`Emitter::aligned_innermost`] aligns), and whose footprint, the cells
    /// it writes and the arrays the with-loop reads, is at least
    /// [`PART_STREAM_MIN_FOOTPRINT`]: known here where all of them have static
    /// sizes, else at run time ([`Streaming::Sized`]: a streaming copy of its
    /// chunk function) for a part that is flat (one loop over its frame's
    /// offsets, [`super::withloop::runs_flat`]) or a step of a loop
    /// ([`inside_loop`]). A step's bound is the context's `stream_min`,
    /// which follows the machine's last-level cache (a step's arrays that
    /// stay cached are read from there by the next step), so a step that
    /// reaches [`PART_STREAM_MIN_FOOTPRINT`] picks its copy at run time even
    /// where its footprint is static. Element-wise code and iterated stencils are where
    /// shape-generic code meets large arrays (without a copy, logical
    /// implication of two 4000x4000 `bool[.,.]` arrays took 1.4x its
    /// specialised instance's time, a 2000x2000 relaxation 1.35-1.39x); a
    /// copy of every generic part would be compiled in every generic instance
    /// (the benchmark library's compile took 12% longer), most of which run
    /// on small arrays (a determinant's minors). Never where streaming buys
    /// nothing: a thin part ([`thin_part`], a stencil's border), a step that
    /// updates its array in place ([`updates_in_place`]), a part reading
    /// slices of larger arrays ([`reads_slices`]), whose footprint says
    /// nothing.
    fn part_streams(
        &self,
        fx: &Fx<'ctx, 'a>,
        s: &Stmt,
        w: &With,
        part: &Part,
        states: &[OpState<'ctx, 'a>],
        n: Option<usize>,
    ) -> Streaming<'ctx> {
        if !self.streams || part.index.is_some() || !super::withloop::dense_part(fx, part) {
            return Streaming::Never;
        }
        let elem = match states {
            [OpState::Gen { result: GenResult::Eager { .. }, cell_static: Some(cell), elem, .. }]
                if cell.is_empty() =>
            {
                *elem
            }
            [OpState::Mod { elem, array_ty, .. }] if static_rank(array_ty).is_some() && static_rank(array_ty) == n => {
                *elem
            }
            _ => return Streaming::Never,
        };
        let mut scalar = part.body.yields.iter().all(|y| scalar_repr(fx.irf.ty(*y)));
        part.body.walk(&mut |st| {
            scalar &= match &st.op {
                Op::Call { .. } | Op::With(_) | Op::Loop { .. } | Op::Pattern { .. } => false,
                _ => st.defs.iter().all(|d| scalar_repr(fx.irf.ty(*d)) || fx.virt.contains(d)),
            }
        });
        if !scalar {
            return Streaming::Never;
        }
        let cell_bytes = super::elem_bytes(elem);
        let cells = compiler_core::opt::util::static_iterations(&*fx.defs, part);
        let mut known = cells.map_or(0, |c| (c.max(0) as u64).saturating_mul(cell_bytes));
        let mut arrays = Vec::new();
        let mut free: Vec<_> = free_uses(s).into_iter().collect();
        free.sort();
        for &v in &free {
            let ty = fx.irf.ty(v);
            if scalar_repr(ty) || fx.virt.contains(&v) {
                continue;
            }
            let Elem::Base(b) = ty.elem else { return Streaming::Never };
            match ty.shape.extents() {
                Some(extents) => {
                    let count = extents.iter().fold(1u64, |n, e| n.saturating_mul(*e as u64));
                    known = known.saturating_add(count.saturating_mul(super::elem_bytes(b)));
                }
                // An array of run-time size that is built (a shape view
                // never is): its header says how many elements.
                None => {
                    if let Some(BasicValueEnum::PointerValue(p)) = fx.vals.get(&v) {
                        arrays.push((*p, super::elem_bytes(b)));
                    }
                }
            }
        }
        let mut statements = 0;
        part.body.walk(&mut |_| statements += 1);
        let flat = super::withloop::runs_flat(fx, w, part, n);
        let step = inside_loop(fx.irf, s);
        if statements > STREAM_MAX_STATEMENTS
            || thin_part(fx, part)
            || (step && updates_in_place(w, part))
            || (!flat && reads_slices(fx, &free, part))
        {
            return Streaming::Never;
        }
        let static_cells = cells.is_some();
        match (cells, arrays.is_empty()) {
            (Some(_), true) if known < PART_STREAM_MIN_FOOTPRINT => Streaming::Never,
            (Some(_), true) if !step => Streaming::Always,
            _ if flat || step => Streaming::Sized { cell_bytes, known, arrays, static_cells, step },
            _ => Streaming::Never,
        }
    }

    /// Whether a part that streams by size ([`Streaming::Sized`]) writes and
    /// reads [`PART_STREAM_MIN_FOOTPRINT`] or more (a step of a loop: the
    /// context's `stream_min`): an `i1`. `cells`: how many indices the part
    /// has.
    fn streams_at_run_time(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        streaming: &Streaming<'ctx>,
        cells: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        let Streaming::Sized { cell_bytes, known, arrays, static_cells, step } = streaming else {
            return Err(CodegenError::Bug("a run-time streaming test of a part that does not stream by size".into()));
        };
        let mut bytes = self.const_i64(*known as i64);
        if !static_cells {
            let written = self.b.build_int_mul(cells, self.const_i64(*cell_bytes as i64), "cells.bytes")?;
            bytes = self.b.build_int_add(bytes, written, "footprint")?;
        }
        for (array, elem_bytes) in arrays {
            let count = self.size(*array)?;
            let read = self.b.build_int_mul(count, self.const_i64(*elem_bytes as i64), "read.bytes")?;
            bytes = self.b.build_int_add(bytes, read, "footprint")?;
        }
        let min = if *step {
            let p = self.ctx_field(fx, rt::CTX_STREAM_MIN)?;
            self.b.build_load(self.i64(), p, "stream.min")?.into_int_value()
        } else {
            self.const_i64(PART_STREAM_MIN_FOOTPRINT as i64)
        };
        Ok(self.b.build_int_compare(IntPredicate::SGE, bytes, min, "streams")?)
    }

    /// A stack environment holding `caps`' values (filled here).
    fn fill_env(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        caps: &Captures<'ctx>,
    ) -> R<(PointerValue<'ctx>, inkwell::types::StructType<'ctx>)> {
        let types: Vec<BasicTypeEnum<'ctx>> = caps.values.iter().map(|v| v.get_type()).collect();
        let env_ty = self.ctx.struct_type(&types, false);
        let env = self.alloca(fx, env_ty.into(), "par.env")?;
        for (i, v) in caps.values.iter().enumerate() {
            let p = self.b.build_struct_gep(env_ty, env, i as u32, "env")?;
            self.b.build_store(p, *v)?;
        }
        Ok((env, env_ty))
    }

    /// A new chunk function of `fx`'s function (named from `prefix`), its
    /// builder in the body block after loading `caps` from the environment:
    /// `noinline`, since the parent both calls it and hands it to the runtime,
    /// and one copy is the point. The caller emits the body, returns, and
    /// closes the entry block with a branch to the body block.
    fn chunk_shell(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        prefix: &str,
        caps: &Captures<'ctx>,
        env_ty: inkwell::types::StructType<'ctx>,
    ) -> R<ChunkShell<'ctx, 'a>> {
        let name = self.fresh(&format!("{prefix}.{}", fx.irf.name));
        let func = self.module.add_function(&name, self.chunk_fn_type(), Some(Linkage::Internal));
        self.chunk_funcs.push(func);
        let noinline = inkwell::attributes::Attribute::get_named_enum_kind_id("noinline");
        func.add_attribute(inkwell::attributes::AttributeLoc::Function, self.ctx.create_enum_attribute(noinline, 0));
        let entry_bb = self.ctx.append_basic_block(func, "entry");
        let body_bb = self.ctx.append_basic_block(func, "body");
        let fail_bb = self.ctx.append_basic_block(func, "fail");
        self.b.position_at_end(fail_bb);
        self.b.build_return(None)?;
        self.b.position_at_end(body_bb);
        let param = |i: u32| func.get_nth_param(i).ok_or_else(|| CodegenError::Bug("chunk parameter".into()));
        let (ctxp, env) = (param(0)?.into_pointer_value(), param(1)?.into_pointer_value());
        let (chunk, lo, hi) = (param(2)?.into_int_value(), param(3)?.into_int_value(), param(4)?.into_int_value());
        let mut remap = Remap { map: HashMap::default() };
        for (i, v) in caps.values.iter().enumerate() {
            let at = self.b.build_struct_gep(env_ty, env, i as u32, "env")?;
            let x = self.b.build_load(v.get_type(), at, "cap")?;
            remap.map.insert(*v, x);
        }
        let cfx = Fx {
            func,
            irf: fx.irf,
            vals: HashMap::default(),
            ctxp,
            fail_bb,
            entry_bb,
            loc: fx.loc,
            consts: fx.consts.clone(),
            virt: fx.virt.clone(),
            shape_views: fx.shape_views.clone(),
            comps: HashMap::default(),
            wide: HashMap::default(),
            defs: fx.defs.clone(),
            data: HashMap::default(),
            borrowed: fx.borrowed.clone(),
            stack: fx.stack.clone(),
            hoisted: HashSet::default(),
            offset_extents: HashMap::default(),
            in_chunk: true,
            time_tile: None,
        };
        Ok(ChunkShell { func, cfx, remap, chunk, lo, hi, entry_bb, body_bb })
    }

    /// How many chunks to split `outer` iterations weighing `weighted` into:
    /// `wl_parallel_chunks`, called only when the work reaches the context's
    /// threshold (generic code runs many small with-loops, a determinant's
    /// minors one per call, and each paid a call to learn it runs alone).
    fn chunks_for(&mut self, fx: &Fx<'ctx, 'a>, outer: IntValue<'ctx>, weighted: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        let min_p = self.ctx_field(fx, rt::CTX_PARALLEL_MIN)?;
        let min = self.b.build_load(self.i64(), min_p, "par.min")?.into_int_value();
        let small = self.b.build_int_compare(IntPredicate::SLT, weighted, min, "par.small")?;
        let here = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no insert block".into()))?;
        let ask = self.ctx.append_basic_block(fx.func, "par.ask");
        let decided = self.ctx.append_basic_block(fx.func, "par.decided");
        self.b.build_conditional_branch(small, decided, ask)?;
        self.b.position_at_end(ask);
        let asked = self
            .call(self.rt.parallel_chunks, &[fx.ctxp.into(), outer.into(), weighted.into()])?
            .ok_or_else(|| CodegenError::Bug("parallel_chunks".into()))?
            .into_int_value();
        let ask_end = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no insert block".into()))?;
        self.b.build_unconditional_branch(decided)?;
        self.b.position_at_end(decided);
        let phi = self.b.build_phi(self.i64(), "chunks")?;
        phi.add_incoming(&[(&self.const_i64(1), here), (&asked, ask_end)]);
        Ok(phi.as_basic_value().into_int_value())
    }

    /// The type of a chunk function (see the module documentation).
    fn chunk_fn_type(&self) -> inkwell::types::FunctionType<'ctx> {
        let (p, i64t) = (self.ptr(), self.i64());
        self.ctx.void_type().fn_type(&[p.into(), p.into(), i64t.into(), i64t.into(), i64t.into()], false)
    }

    /// A part's chunk function and its environment, filled here (at the
    /// builder's position, where it stays); the folds' partial results go
    /// to `partials` (a field of the environment the caller may overwrite).
    #[allow(clippy::too_many_arguments)]
    fn outline(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        s: &'a Stmt,
        w: &'a With,
        part: &'a Part,
        states: &[OpState<'ctx, 'a>],
        partials: PointerValue<'ctx>,
        folds: usize,
        streaming: &Streaming<'ctx>,
    ) -> R<Outlined<'ctx>> {
        // What the chunk function reads from here.
        let mut caps = Captures::default();
        let mut free: Vec<_> = free_uses(s).into_iter().collect();
        free.sort();
        let remat = rematerialised_offsets(fx, &free);
        for e in remat.iter().flat_map(|r| &r.extents) {
            caps.add((*e).into());
        }
        for v in &free {
            if remat.iter().any(|r| r.value == *v) {
                continue;
            }
            if let Some(x) = fx.vals.get(v) {
                caps.add(*x);
            }
            // The exact offset too (see `Fx::wide`), so that LLVM sees
            // addresses in the chunk as affine without a sign extension.
            if let Some(w) = fx.wide.get(v) {
                caps.add((*w).into());
            }
        }
        for st in states.iter() {
            match st {
                OpState::Gen { frame, result, .. } => {
                    frame_values(frame, &mut caps);
                    if let GenResult::Eager { arr, data, cell_len } = result {
                        caps.add((*arr).into());
                        caps.add((*data).into());
                        caps.add((*cell_len).into());
                    }
                }
                OpState::Mod { frame, arr, data, .. } => {
                    frame_values(frame, &mut caps);
                    caps.add((*arr).into());
                    caps.add((*data).into());
                }
                OpState::Fold { slot, .. } => caps.add((*slot).into()),
                OpState::Scan(_) | OpState::Filter(_) => {
                    return Err(CodegenError::Bug("a scan or filter in a parallel with-loop".into()));
                }
            }
        }
        caps.add(partials.into());
        let (env, env_ty) = self.fill_env(fx, &caps)?;
        let here = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no insert block".into()))?;
        let always = matches!(streaming, Streaming::Always);
        let func = self.chunk_function(fx, s, w, part, states, &caps, env_ty, partials, folds, &remat, always)?;
        let stream_func = match streaming {
            Streaming::Sized { .. } => {
                Some(self.chunk_function(fx, s, w, part, states, &caps, env_ty, partials, folds, &remat, true)?)
            }
            _ => None,
        };
        self.b.position_at_end(here);
        let partials_field = caps.index.get(&partials.into()).map(|i| *i as u32);
        Ok(Outlined { func, stream_func, env, env_ty, partials_field, fields: caps.index })
    }

    /// A part of static index length `n`: its outer trip count and its size.
    fn outer_and_total(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        s: &'a Stmt,
        part: &'a Part,
        n: usize,
        axis: usize,
    ) -> R<(IntValue<'ctx>, IntValue<'ctx>)> {
        let ploc = self.sub_loc(s, part.span, fx.loc);
        let g = self.load_generator(fx, part, n, ploc)?;
        let zero = self.const_i64(0);
        let nonneg = |this: &mut Self, x: IntValue<'ctx>| -> R<IntValue<'ctx>> {
            let neg = this.b.build_int_compare(IntPredicate::SLT, x, zero, "neg")?;
            Ok(this.b.build_select(neg, zero, x, "clamp")?.into_int_value())
        };
        let span = self.b.build_int_sub(g.hi[axis], g.lo[axis], "span")?;
        let span = nonneg(self, span)?;
        let outer = if g.dense[axis] {
            span
        } else {
            let sm1 = self.b.build_int_sub(g.step[axis], self.const_i64(1), "sm1")?;
            let padded = self.b.build_int_add(span, sm1, "padded")?;
            self.b.build_int_signed_div(padded, g.step[axis], "blocks")?
        };
        let mut total = outer;
        for d in (0..n).filter(|&d| d != axis) {
            let e = self.b.build_int_sub(g.hi[d], g.lo[d], "span")?;
            let e = nonneg(self, e)?;
            total = self.b.build_int_mul(total, e, "total")?;
        }
        Ok((outer, total))
    }

    /// The chunk function of a part (see the module documentation).
    #[allow(clippy::too_many_arguments)]
    fn chunk_function(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        s: &'a Stmt,
        w: &'a With,
        part: &'a Part,
        states: &[OpState<'ctx, 'a>],
        caps: &Captures<'ctx>,
        env_ty: inkwell::types::StructType<'ctx>,
        partials: PointerValue<'ctx>,
        folds: usize,
        remat: &[RematOffset<'ctx>],
        stream: bool,
    ) -> R<inkwell::values::FunctionValue<'ctx>> {
        let p = self.ptr();
        let ChunkShell { func, mut cfx, remap, chunk, lo, hi, entry_bb, body_bb } =
            self.chunk_shell(fx, if stream { "wl.chunk.stream" } else { "wl.chunk" }, caps, env_ty)?;
        // Only what the with-loop reads from outside crosses over.
        let free = free_uses(s);
        cfx.vals = free.iter().filter_map(|k| fx.vals.get(k).map(|v| (*k, remap.v(*v)))).collect();
        cfx.wide = free.iter().filter_map(|k| fx.wide.get(k).map(|v| (*k, remap.int(*v)))).collect();
        for r in remat {
            // Horner's rule over the extents, as `vect2offset` computes it.
            let mut off = self.const_i64(0);
            for (ext, c) in
                std::iter::once(self.const_i64(0)).chain(r.extents.iter().map(|e| remap.int(*e))).zip(&r.index)
            {
                let scaled = self.b.build_int_mul(off, ext, "off")?;
                off = self.b.build_int_add(scaled, self.const_i64(*c), "off")?;
            }
            cfx.wide.insert(r.value, off);
            let x = self.as_int(off)?;
            cfx.vals.insert(r.value, x.into());
        }
        cfx.data = fx.data.iter().map(|(k, p)| (*k, remap.ptr(*p))).collect();
        // The chunk's own states: the same results, private accumulators.
        let mut mine: Vec<OpState<'ctx, 'a>> = Vec::with_capacity(states.len());
        for st in states {
            mine.push(match st {
                OpState::Gen { frame, elem, result, cell_static, cell_ty, default } => OpState::Gen {
                    frame: remap.frame(frame),
                    elem: *elem,
                    result: match result {
                        GenResult::Eager { arr, data, cell_len } => GenResult::Eager {
                            arr: remap.ptr(*arr),
                            data: remap.ptr(*data),
                            cell_len: remap.int(*cell_len),
                        },
                        GenResult::Lazy { .. } => {
                            return Err(CodegenError::Bug("a lazy result in a parallel with-loop".into()));
                        }
                    },
                    cell_static: cell_static.clone(),
                    cell_ty: cell_ty.clone(),
                    default: default.as_ref().map(|(v, t)| (remap.v(*v), t.clone())),
                },
                OpState::Mod { frame, elem, arr, data, array_ty } => OpState::Mod {
                    frame: remap.frame(frame),
                    elem: *elem,
                    arr: remap.ptr(*arr),
                    data: remap.ptr(*data),
                    array_ty: array_ty.clone(),
                },
                OpState::Fold { slot, ty, fun, .. } => {
                    let parent_slot = remap.ptr(*slot);
                    let own = self.alloca(&cfx, self.value_ty(ty), "chunk.acc")?;
                    let identity = Self::fold_identity(fun, base(ty))
                        .ok_or_else(|| CodegenError::Bug("a parallel fold without an identity".into()))?;
                    let id = self.scalar_const(identity);
                    let current = self.b.build_load(self.value_ty(ty), parent_slot, "acc")?;
                    let first = self.b.build_int_compare(IntPredicate::EQ, chunk, self.const_i64(0), "first")?;
                    let init = self.b.build_select(first, current, id, "init")?;
                    self.b.build_store(own, init)?;
                    OpState::Fold { slot: own, ty: ty.clone(), fun, partial: Vec::new(), fix: None, done: None }
                }
                OpState::Scan(_) | OpState::Filter(_) => {
                    return Err(CodegenError::Bug("a scan or filter in a parallel with-loop".into()));
                }
            });
        }
        let iv_slot = if part.index.is_some() { Some(self.alloca(&cfx, p.into(), "wl.iv")?) } else { None };
        let pcx = PartCx { w, part, s, iv_slot, mask: None, end: None, stream };
        if stream {
            self.mark_streaming(func);
        }
        self.part_range(&mut cfx, &pcx, &mut mine, Some((lo, hi)))?;
        // Partial folds go to `partials[chunk * folds + k]`.
        let partials = remap.ptr(partials);
        let mut k = 0;
        for st in &mine {
            let OpState::Fold { slot, ty, .. } = st else { continue };
            let v = self.b.build_load(self.value_ty(ty), *slot, "acc")?;
            let bits = self.bits_of(v, base(ty))?;
            let at = self.b.build_int_mul(chunk, self.const_i64(folds as i64), "at")?;
            let at = self.b.build_int_add(at, self.const_i64(k), "at")?;
            let dst = self.gep(self.i64(), partials, &[at], "partial")?;
            self.b.build_store(dst, bits)?;
            k += 1;
        }
        self.b.build_return(None)?;
        self.b.position_at_end(entry_bb);
        self.b.build_unconditional_branch(body_bb)?;
        if w.reuse.iter().all(Option::is_none) {
            let results: Vec<PointerValue<'ctx>> = mine
                .iter()
                .filter_map(|st| match st {
                    OpState::Gen { result: GenResult::Eager { data, .. }, .. } | OpState::Mod { data, .. } => {
                        Some(*data)
                    }
                    _ => None,
                })
                .collect();
            scope_result_accesses(func, &results);
        }
        Ok(func)
    }
}

/// Tells LLVM that in chunk function `func` the cells of the results
/// (`results`, their data) are not what any load reads: every store through
/// a result's data gets an alias scope of its own and every load `noalias`
/// of it. So the vectoriser needs no run-time overlap test between the
/// cells written and the arrays read (two pointer ranges compared per
/// array and a scalar fallback loop, in every chunk function: a
/// relaxation's generic instance compiled with 8% fewer instructions
/// executed). Only for with-loops without `reuse`: their results are
/// fresh buffers (a `genarray`'s allocation, a `modarray`'s copy) that
/// nothing read in the with-loop can point into, and no with-loop reads its
/// own result.
fn scope_result_accesses(func: inkwell::values::FunctionValue<'_>, results: &[PointerValue<'_>]) {
    use inkwell::values::{AsValueRef, InstructionOpcode};
    if results.is_empty() {
        return;
    }
    let ctx = func.get_type().get_context();
    let name = func.get_name().to_string_lossy().into_owned();
    let domain = ctx.metadata_node(&[ctx.metadata_string(&format!("{name}.results")).into()]);
    let scope = ctx.metadata_node(&[ctx.metadata_string(&format!("{name}.cells")).into(), domain.into()]);
    let list = ctx.metadata_node(&[scope.into()]);
    let (scope_kind, noalias_kind) = (ctx.get_kind_id("alias.scope"), ctx.get_kind_id("noalias"));
    let results: Vec<_> = results.iter().map(|p| p.as_value_ref()).collect();
    let of_result = |inst, operand| address_base(inst, operand).map(|b| results.contains(&b.as_value_ref()));
    for inst in super::instructions(func) {
        match inst.get_opcode() {
            InstructionOpcode::Store if of_result(inst, 1) == Some(true) => {
                let _ = inst.set_metadata(list, scope_kind);
            }
            InstructionOpcode::Load if of_result(inst, 0) == Some(false) => {
                let _ = inst.set_metadata(list, noalias_kind);
            }
            _ => {}
        }
    }
}

/// An offset the with-loop reads, `_vect2offset_(shp, c)` of a constant
/// index `c` (a stencil's neighbour, `iv + o - 1` after index vector
/// elimination), that its chunk function computes from `shp`'s extents
/// instead of reading it from the environment. Captured, a 27-point
/// stencil's 27 offsets were 27 unrelated values: 27 pointers live in the
/// loop, which spilled (a rank-generic `double[.,.,.]` relaxation ran 1.7x
/// slower than its `[128,128,128]` instance, whose offsets are constants).
/// Computed here, LLVM sees that they differ by constants and addresses
/// them from a few pointers.
pub(crate) struct RematOffset<'ctx> {
    value: compiler_core::ir::ValueId,
    /// The constant index.
    index: Vec<i64>,
    /// Extents 1.. of the shape, as the parent read them when it computed
    /// the offset (extent 0 does not enter it).
    extents: Vec<IntValue<'ctx>>,
}

/// The with-loop's free values (`free`) that are offsets of constant indices
/// whose extents the parent read ([`Fx::offset_extents`]). Each offset's
/// computation read the extents of its shape again; the offsets of one shape
/// share the extents first read (the same values: a shape is immutable, and
/// every read precedes the with-loop), so a 27-point stencil's chunk function
/// captures two extents, not 52 (which LLVM took as 26 unrelated
/// expressions: the `llvm-opt` phase of a module with a rank-generic
/// `double[.,.,.]` 27-point stencil took 108 ms, now 50; the chunk's machine
/// code halved).
fn rematerialised_offsets<'ctx>(fx: &Fx<'ctx, '_>, free: &[compiler_core::ir::ValueId]) -> Vec<RematOffset<'ctx>> {
    let mut first: HashMap<(compiler_core::ir::ValueId, usize), IntValue<'ctx>> = HashMap::default();
    free.iter()
        .filter_map(|v| {
            let (shape, extents, index) = fx.offset_extents.get(v)?;
            let extents = extents.iter().enumerate().map(|(d, e)| *first.entry((*shape, d)).or_insert(*e)).collect();
            Some(RematOffset { value: *v, index: index.clone(), extents })
        })
        .collect()
}

/// The body of a flat loop [`Emitter::flat_loop`] runs: one iteration at
/// offset `i`, reading what it needs from outside from `caps` (the values the
/// caller listed, as they are where the body runs).
pub(crate) type FlatBody<'b, 'ctx, 'a> =
    dyn FnMut(&mut Emitter<'ctx, 'a>, &mut Fx<'ctx, 'a>, &[BasicValueEnum<'ctx>], IntValue<'ctx>) -> R<()> + 'b;

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// `for i in 0..n` over independent iterations (an element-wise
    /// primitive's loop): split over threads as a with-loop part is when the
    /// runtime says `n` is worth it, else on this thread; either way through
    /// one chunk function, so the loop is compiled once (twice where `n` is
    /// known only at run time on a target that streams: a plain and a
    /// streaming copy, see [`streams`]). `caps`: the values of
    /// this function the body reads, the first the data of the array whose
    /// element `i` (of `out_bytes` bytes) the body writes (a streaming copy
    /// aligns those stores, see [`Emitter::flat_chunk`]). With
    /// `--sequential`, in cold code, or when `static_n` is known to be small:
    /// a plain loop here.
    pub(crate) fn flat_loop(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        n: IntValue<'ctx>,
        static_n: Option<i64>,
        caps: &[BasicValueEnum<'ctx>],
        out_bytes: u64,
        body: &mut FlatBody<'_, 'ctx, 'a>,
    ) -> R<()> {
        let small = static_n.is_some_and(|k| k < self.static_parallel_min);
        if !self.parallel || fx.irf.cold || small {
            let caps = caps.to_vec();
            return self.for_range(fx, Trips::Many, self.const_i64(0), n, &mut |e, fx, i| body(e, fx, &caps, i));
        }
        let chunks = self.chunks_for(fx, n, n)?;
        // The environment: every captured value that is not a constant.
        let mut captures = Captures::default();
        for v in caps {
            captures.add(*v);
        }
        let (env, env_ty) = self.fill_env(fx, &captures)?;
        let here = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no insert block".into()))?;
        // The chunk function: iterations lo..hi. A length known here decides
        // now whether the loop streams; one known only at run time gets a
        // streaming copy of the chunk function too, taken when the loop
        // writes enough (a rank-2 `-a` of run-time shape on a 4000x4000
        // array, one thread, best of 8: 16.7 -> 11.3 ms, as the
        // shape-specialised instance).
        let streaming = |e: &mut Self, fx: &Fx<'ctx, 'a>, body: &mut FlatBody<'_, 'ctx, 'a>| {
            let f = e.flat_chunk(fx, "wl.flat.stream", caps, &captures, env_ty, Some(out_bytes), body)?;
            e.mark_streaming(f);
            Ok::<_, CodegenError>(f)
        };
        let mut stream_copy = None;
        let func = match static_n {
            Some(n) if self.streams && streams(out_bytes, n) => streaming(self, fx, body)?,
            Some(_) => self.flat_chunk(fx, "wl.flat", caps, &captures, env_ty, None, body)?,
            None => {
                let plain = self.flat_chunk(fx, "wl.flat", caps, &captures, env_ty, None, body)?;
                if self.streams {
                    stream_copy = Some(streaming(self, fx, body)?);
                }
                plain
            }
        };
        // Here: split, or one call over the whole range.
        self.b.position_at_end(here);
        let func_ptr = match stream_copy {
            Some(streaming) => {
                let bytes = self.b.build_int_mul(n, self.const_i64(out_bytes as i64), "flat.bytes")?;
                let large = self.b.build_int_compare(
                    IntPredicate::SGE,
                    bytes,
                    self.const_i64(STREAM_MIN_BYTES as i64),
                    "large",
                )?;
                let plain = func.as_global_value().as_pointer_value();
                let streaming = streaming.as_global_value().as_pointer_value();
                self.b.build_select(large, streaming, plain, "flat.fn")?.into_pointer_value()
            }
            None => func.as_global_value().as_pointer_value(),
        };
        let split = self.b.build_int_compare(IntPredicate::SGT, chunks, self.const_i64(1), "split")?;
        let par_bb = self.ctx.append_basic_block(fx.func, "flat.split");
        let seq_bb = self.ctx.append_basic_block(fx.func, "flat.inline");
        let join = self.ctx.append_basic_block(fx.func, "flat.join");
        self.b.build_conditional_branch(split, par_bb, seq_bb)?;
        self.b.position_at_end(seq_bb);
        let zero = self.const_i64(0);
        let args = [fx.ctxp.into(), env.into(), zero.into(), zero.into(), n.into()];
        if stream_copy.is_some() {
            self.b.build_indirect_call(self.chunk_fn_type(), func_ptr, &args, "")?;
        } else {
            self.b.build_call(func, &args, "")?;
        }
        self.check_error(fx)?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(par_bb);
        self.call(self.rt.parallel_for, &[fx.ctxp.into(), n.into(), chunks.into(), func_ptr.into(), env.into()])?;
        self.check_error(fx)?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        Ok(())
    }
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// A chunk function (named from `prefix`) running iterations `lo..hi` of
    /// a flat loop's `body`, whose captured values `caps` it loads from the
    /// environment (`captures`, of type `env_ty`). Leaves the builder in it.
    ///
    /// `aligned`: the width of the elements the body writes through `caps[0]`
    /// (see [`Emitter::flat_loop`]), for a streaming copy. The chunk then
    /// runs the body up to the first element on a 64-byte boundary, and
    /// from there on tells LLVM that boundary is aligned (an `llvm.assume`
    /// with an `align` bundle): its vectorised stores become aligned ones,
    /// which stay whole vectors when made non-temporal (LLVM splits an
    /// under-aligned vector store into one `movntsd` per element: a
    /// 4000x4000 `-a` on a Zen 5 ran 0.98-0.99x the time on one thread,
    /// 0.94-0.96x on two, aligned; a relaxation's row loop in C ran twice
    /// as long with `movntsd` as with aligned `_mm512_stream_pd`). The
    /// chunk boundaries fall anywhere, so each chunk finds its own boundary.
    #[allow(clippy::too_many_arguments)]
    fn flat_chunk(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        prefix: &str,
        caps: &[BasicValueEnum<'ctx>],
        captures: &Captures<'ctx>,
        env_ty: inkwell::types::StructType<'ctx>,
        aligned: Option<u64>,
        body: &mut FlatBody<'_, 'ctx, 'a>,
    ) -> R<inkwell::values::FunctionValue<'ctx>> {
        let ChunkShell { func, mut cfx, remap, lo, hi, entry_bb, body_bb, .. } =
            self.chunk_shell(fx, prefix, captures, env_ty)?;
        let inner: Vec<BasicValueEnum<'ctx>> = caps.iter().map(|v| remap.v(*v)).collect();
        match aligned {
            Some(bytes) if bytes.is_power_of_two() && bytes <= STREAM_ALIGN => {
                let out = inner[0].into_pointer_value();
                self.aligned_range(&mut cfx, lo, hi, (out, lo, bytes), &mut |e, fx, i| body(e, fx, &inner, i))?;
            }
            _ => self.for_range(&mut cfx, Trips::Many, lo, hi, &mut |e, fx, i| body(e, fx, &inner, i))?,
        }
        self.b.build_return(None)?;
        self.b.position_at_end(entry_bb);
        self.b.build_unconditional_branch(body_bb)?;
        Ok(func)
    }
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// The first index from `lo` on whose element of `bytes` bytes at `out`
    /// starts on a [`STREAM_ALIGN`]-byte boundary: `lo` plus the elements
    /// before it. `out` is an array's data, aligned to its element at least
    /// (the runtime's arrays to 64 bytes).
    pub(crate) fn aligned_start(
        &mut self,
        out: PointerValue<'ctx>,
        lo: IntValue<'ctx>,
        bytes: u64,
    ) -> R<IntValue<'ctx>> {
        let base = self.b.build_ptr_to_int(out, self.i64(), "out.addr")?;
        let offset = self.b.build_int_mul(lo, self.const_i64(bytes as i64), "lo.bytes")?;
        let at = self.b.build_int_add(base, offset, "lo.addr")?;
        let to_boundary = self.b.build_int_neg(at, "lo.neg")?;
        let gap = self.b.build_and(to_boundary, self.const_i64(STREAM_ALIGN as i64 - 1), "gap.bytes")?;
        let shift = self.const_i64(bytes.trailing_zeros() as i64);
        let gap = self.b.build_right_shift(gap, shift, false, "gap")?;
        Ok(self.b.build_int_add(lo, gap, "aligned.start")?)
    }

    /// Runs `body` over indices `lo..hi`, whose elements of `bytes` bytes lie
    /// in `out`, index `lo`'s at element `first`: up to the first one on a
    /// [`STREAM_ALIGN`]-byte boundary (a scalar loop of a few iterations),
    /// then from there with LLVM told that boundary is aligned
    /// ([`Self::assume_aligned_at`]), so the vectorised stores of the second
    /// loop are aligned ones (a streaming flat loop's chunk, a streaming
    /// with-loop part's rows). `body` is emitted twice.
    pub(crate) fn aligned_range(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        (out, first, bytes): (PointerValue<'ctx>, IntValue<'ctx>, u64),
        body: &mut dyn FnMut(&mut Self, &mut Fx<'ctx, 'a>, IntValue<'ctx>) -> R<()>,
    ) -> R<()> {
        let aligned = self.aligned_start(out, first, bytes)?;
        let gap = self.b.build_int_sub(aligned, first, "gap")?;
        let start = self.b.build_int_add(lo, gap, "aligned.index")?;
        let head_end =
            self.call_intrinsic("llvm.smin", &[self.i64().into()], &[start.into(), hi.into()])?.into_int_value();
        self.for_range(fx, Trips::Few, lo, head_end, body)?;
        let rest = self.ctx.append_basic_block(fx.func, "aligned.rest");
        let done = self.ctx.append_basic_block(fx.func, "aligned.done");
        let more = self.b.build_int_compare(IntPredicate::SLT, start, hi, "aligned.more")?;
        self.b.build_conditional_branch(more, rest, done)?;
        self.b.position_at_end(rest);
        self.assume_aligned_at(out, aligned, bytes)?;
        self.for_range(fx, Trips::Many, start, hi, body)?;
        self.b.build_unconditional_branch(done)?;
        self.b.position_at_end(done);
        Ok(())
    }

    /// Tells LLVM that element `start` of `out` (elements of `bytes` bytes)
    /// lies on a [`STREAM_ALIGN`]-byte boundary, as an assumption about `out`
    /// itself (`out - (-start·bytes)` is aligned), which LLVM's
    /// alignment-from-assumptions pass applies to every access through
    /// `out` it can relate to `start`: after vectorisation, the stores of a
    /// loop starting there.
    fn assume_aligned_at(&mut self, out: PointerValue<'ctx>, start: IntValue<'ctx>, bytes: u64) -> R<()> {
        use inkwell::values::{AnyValue, OperandBundle};
        let assume = self.intrinsic("llvm.assume", &[])?;
        let offset = self.b.build_int_mul(start, self.const_i64(bytes as i64), "start.bytes")?;
        let offset = self.b.build_int_neg(offset, "start.off")?;
        let align = OperandBundle::create(
            "align",
            &[
                out.as_any_value_enum(),
                self.const_i64(STREAM_ALIGN as i64).as_any_value_enum(),
                offset.as_any_value_enum(),
            ],
        );
        let yes = self.ctx.bool_type().const_all_ones();
        self.b.build_direct_call_with_operand_bundles(assume, &[yes.into()], &[align], "")?;
        Ok(())
    }
}

/// The boundary a streaming flat loop aligns its stores to: a cache line
/// (and the widest vector, AVX-512's).
const STREAM_ALIGN: u64 = 64;

/// Whether a flat loop storing `per_iteration` bytes per iteration over `n`
/// iterations writes enough to stream ([`STREAM_MIN_BYTES`]) where the
/// target streams (`Emitter::streams`: x86-64, optimised): a result that
/// large does not stay in the caches for its reader anyway, and
/// an ordinary store first reads every line it writes (a negation of a
/// 4000x4000 array moved 384 MB for 256 MB of data). The marking
/// ([`Emitter::mark_streaming`]) takes effect after LLVM's pipeline
/// ([`mark_streaming_stores`]), so that the vectoriser sees ordinary stores.
fn streams(per_iteration: u64, n: i64) -> bool {
    per_iteration.saturating_mul(n.max(0) as u64) >= STREAM_MIN_BYTES
}

/// Flat loops that write at least this many bytes store them non-temporally
/// ([`streams`]): the last-level cache of one Zen core
/// complex. A smaller result may still be in the cache when the next loop
/// reads it, which non-temporal stores would forfeit.
pub(crate) const STREAM_MIN_BYTES: u64 = 32 << 20;

/// A parallel with-loop part run once streams its stores when it writes and
/// reads at least this many bytes ([`Emitter::part_streams`]); a step of a
/// loop streams from the context's bound ([`withloop_rt::WlCtx::stream_min`],
/// which follows the machine's cache and is by default not lower), and one
/// of static size below this bound gets no streaming copy.
pub(crate) const PART_STREAM_MIN_FOOTPRINT: u64 = withloop_rt::STREAM_MIN_FOOTPRINT as u64;

/// Whether statement `s` lies in a loop of `f` (a step of an iterative
/// algorithm, which touches its arrays again every round).
fn inside_loop(f: &compiler_core::ir::Function, s: &Stmt) -> bool {
    fn find(b: &compiler_core::ir::Block, s: &Stmt, in_loop: bool) -> Option<bool> {
        for st in &b.stmts {
            if std::ptr::eq(st, s) {
                return Some(in_loop);
            }
            let inner = in_loop || matches!(st.op, Op::Loop { .. });
            let mut found = None;
            st.op.walk_blocks(&mut |blk| {
                if found.is_none() {
                    found = find(blk, s, inner);
                }
            });
            if found.is_some() {
                return found;
            }
        }
        None
    }
    find(&f.body, s, false).unwrap_or(false)
}

/// A part narrower than this on some axis (a border strip of a stencil)
/// writes too few cells for streaming them to matter.
const THIN_EXTENT: i64 = 16;

/// Whether `part` spans fewer than [`THIN_EXTENT`] indices on some axis,
/// its bounds differing there by a constant (a stencil's border rows and
/// columns, `[1, 0] <= iv < [m - 1, 1]`).
fn thin_part(fx: &Fx<'_, '_>, part: &Part) -> bool {
    let reader = compiler_core::opt::index::Reader::new(fx.irf, &*fx.defs);
    let (Some(lower), Some(upper)) = (reader.vector(part.lower), reader.vector(part.upper)) else { return false };
    lower.iter().zip(&upper).any(|(l, u)| u.minus(l).is_some_and(|e| e < THIN_EXTENT))
}

/// Whether `w` may update an array in place that `part`'s body reads (its
/// result takes over the buffer of an array read at the written index,
/// [`With::reuse`]): the lines it writes were just read into the cache, so
/// streaming them saves no read (an iterated Floyd-Warshall step).
fn updates_in_place(w: &With, part: &Part) -> bool {
    let mut reads = false;
    part.body.walk(&mut |st| st.op.for_each_operand(&mut |v| reads |= w.reuse.contains(&Some(v))));
    reads
}

/// Whether a with-loop whose free values are `free` reads an array of higher
/// rank than `part`'s index space: a slice of it, most likely
/// (Floyd-Warshall's copy of row `k` reads a row of an `n x n` array), so
/// that its footprint, counted in whole arrays, says nothing of what the
/// part touches.
fn reads_slices(fx: &Fx<'_, '_>, free: &[compiler_core::ir::ValueId], part: &Part) -> bool {
    let Some(rank) = super::ops::static_extent(fx.irf.ty(part.lower), 0) else { return true };
    free.iter().any(|&v| {
        let ty = fx.irf.ty(v);
        !scalar_repr(ty) && !fx.virt.contains(&v) && static_rank(ty).is_none_or(|r| r > rank)
    })
}

/// The most statements a part's body may have to stream
/// ([`Emitter::part_streams`]): a body whose time goes to memory (a fused
/// `!a | b` is four statements, a 5-point stencil twelve), not to arithmetic
/// (Black-Scholes' is over a hundred: it ran as fast streaming, and its
/// aligned head, the body once more, only made its compile slower).
const STREAM_MAX_STATEMENTS: usize = 16;

/// The function attribute that marks a chunk function whose stores stream
/// past the caches ([`mark_streaming_stores`]).
pub(crate) const STREAM_ATTRIBUTE: &str = "wl-stream";

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Marks chunk function `func` as streaming ([`STREAM_ATTRIBUTE`]).
    fn mark_streaming(&self, func: inkwell::values::FunctionValue<'ctx>) {
        func.add_attribute(
            inkwell::attributes::AttributeLoc::Function,
            self.ctx.create_string_attribute(STREAM_ATTRIBUTE, ""),
        );
    }
}

/// The pointer that operand `operand` of `inst`, an address, is an offset
/// of: the address itself, or the base of the `getelementptr`s it is made by.
fn address_base<'ctx>(
    inst: inkwell::values::InstructionValue<'ctx>,
    operand: u32,
) -> Option<inkwell::values::BasicValueEnum<'ctx>> {
    use inkwell::values::{InstructionOpcode, Operand};
    let Some(Operand::Value(mut at)) = inst.get_operand(operand) else { return None };
    while let Some(gep) = at.as_instruction_value().filter(|i| i.get_opcode() == InstructionOpcode::GetElementPtr) {
        let Some(Operand::Value(base)) = gep.get_operand(0) else { return None };
        at = base;
    }
    Some(at)
}

/// Whether store `inst` writes a stack slot (an `alloca`'s, perhaps at an
/// offset: a buffer of index components).
fn stores_to_stack(inst: inkwell::values::InstructionValue<'_>) -> bool {
    address_base(inst, 1)
        .and_then(|p| p.as_instruction_value())
        .is_some_and(|d| d.get_opcode() == inkwell::values::InstructionOpcode::Alloca)
}

/// After optimisation: in every function marked [`STREAM_ATTRIBUTE`], every
/// store to memory that is not a stack slot becomes non-temporal (x86's
/// `movnt*`: written to memory without first reading the line into the
/// cache; an under-aligned vector store is split into scalar ones by LLVM's
/// code generator, still non-temporal), and an `sfence` precedes every
/// return: non-temporal stores are weakly ordered, and whoever learns that
/// the chunk is done (the pool, through an atomic) must see its elements.
pub(crate) fn mark_streaming_stores(module: &inkwell::module::Module<'_>) {
    use inkwell::values::InstructionOpcode;
    let ctx = module.get_context();
    let kind = ctx.get_kind_id("nontemporal");
    let one = ctx.metadata_node(&[ctx.i32_type().const_int(1, false).into()]);
    let marked: Vec<_> = module
        .get_functions()
        .filter(|f| f.get_string_attribute(inkwell::attributes::AttributeLoc::Function, STREAM_ATTRIBUTE).is_some())
        .collect();
    // Declared only where some function streams.
    let Some(sfence) = (!marked.is_empty())
        .then(|| inkwell::intrinsics::Intrinsic::find("llvm.x86.sse.sfence"))
        .flatten()
        .and_then(|i| i.get_declaration(module, &[]))
    else {
        return;
    };
    let builder = ctx.create_builder();
    for func in marked {
        for inst in super::instructions(func) {
            match inst.get_opcode() {
                InstructionOpcode::Store if !stores_to_stack(inst) => {
                    let _ = inst.set_metadata(one, kind);
                }
                InstructionOpcode::Return => {
                    builder.position_before(&inst);
                    let _ = builder.build_call(sfence, &[], "");
                }
                _ => {}
            }
        }
    }
}

/// The axis a part of static index length `n` is split over threads on: the
/// outermost loop of its nest. That is axis 0, except in a two-dimensional
/// register-tiled part that packs panels (`tile.rs`), whose nest runs its
/// column tiles outside its row tiles: split on rows, every chunk would copy
/// every column tile's panel again (a 1024x1024 product on two threads
/// copied all of `b` four times); split on columns, each panel is copied
/// once, by the chunk that reads it.
pub(crate) fn chunked_axis(n: usize, packs_panels: bool) -> usize {
    if packs_panels && n == 2 { 1 } else { 0 }
}
