//! The generic path for primitives: any primitive on any values, by converting
//! to the reference interpreter's values and applying its implementation. The
//! code generator emits inline code for the primitives that matter for speed
//! (scalar arithmetic, element selection and update, shapes, offsets) and calls
//! this for the rest: structural operations (reshape, cat, take, drop, dot
//! selections), printing, and operations on arrays of unknown rank.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_char;

use compiler_core::interp::value::Value;
use compiler_core::sema::hir::Prim;

use crate::error::{WlCtx, WlLoc, set_error, text};
use crate::io::write_out;
use crate::values::{WlArg, arg_to_value, value_to_arg, value_to_array_arg};

thread_local! {
    /// Primitive names (static strings in compiled code) already parsed.
    static PRIMS: RefCell<HashMap<usize, Option<Prim>>> = RefCell::new(HashMap::new());
}

fn prim_named(name: *const c_char) -> Option<Prim> {
    PRIMS.with(|cache| {
        cache
            .borrow_mut()
            .entry(name as usize)
            .or_insert_with(|| compiler_core::ir::parse::prim_from_name(&unsafe { text(name) }))
            .clone()
    })
}

/// `out = name(args…)`. Returns 0, or 1 after recording an error. Array results
/// are new arrays the caller owns; the arguments are only read. With `boxed`
/// set, a scalar result comes back as a rank-0 array (for results whose static
/// type is not a scalar).
///
/// # Safety
/// `args` holds `n` valid arguments; `out` is writable; `name` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_prim(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    name: *const c_char,
    n: i64,
    args: *const WlArg,
    out: *mut WlArg,
    boxed: i32,
) -> i32 {
    let Some(prim) = prim_named(name) else {
        unsafe { set_error(ctx, loc, "B0001", &format!("unknown primitive `{}`", text(name))) };
        return 1;
    };
    let args: &[WlArg] = if n <= 0 { &[] } else { unsafe { std::slice::from_raw_parts(args, n as usize) } };
    let values: Vec<Value> = args.iter().map(|a| unsafe { arg_to_value(a) }).collect();
    let result = compiler_core::interp::apply_prim(&prim, values, &mut |b: &[u8]| unsafe { write_out(ctx, b) });
    match result {
        Ok(v) => {
            let arg =
                if boxed != 0 { unsafe { value_to_array_arg(ctx, &v) } } else { unsafe { value_to_arg(ctx, &v) } };
            if unsafe { (*ctx).error } != 0 {
                return 1;
            }
            unsafe { out.write(arg) };
            0
        }
        Err(e) => {
            unsafe { set_error(ctx, loc, e.code.id, &e.message) };
            1
        }
    }
}

/// `out = [args…]`: values of one shape and type stacked along a new axis.
///
/// # Safety
/// As [`wl_prim`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_stack(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    n: i64,
    args: *const WlArg,
    out: *mut WlArg,
) -> i32 {
    let args: &[WlArg] = if n <= 0 { &[] } else { unsafe { std::slice::from_raw_parts(args, n as usize) } };
    let values: Vec<Value> = args.iter().map(|a| unsafe { arg_to_value(a) }).collect();
    match compiler_core::interp::prims::stack(values) {
        Ok(v) => {
            let arg = unsafe { value_to_arg(ctx, &v) };
            if unsafe { (*ctx).error } != 0 {
                return 1;
            }
            unsafe { out.write(arg) };
            0
        }
        Err(e) => {
            unsafe { set_error(ctx, loc, e.code.id, &e.message) };
            1
        }
    }
}

/// A rank-0 array holding a scalar (where compiled code needs an array of
/// unknown rank that happens to be a scalar).
///
/// # Safety
/// `ctx` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_box(ctx: *mut WlCtx, elem: i32, bits: u64) -> *mut crate::array::WlArray {
    let a = unsafe { crate::array::wl_alloc(ctx, elem, 0, std::ptr::null()) };
    if !a.is_null() {
        unsafe { crate::values::set_element(a, 0, crate::values::scalar_from_bits(elem, bits)) };
    }
    a
}

/// Whether the arguments' shapes match a function's type patterns; writes the
/// pattern variables to `out` in order. The texts are `;`-separated lists:
/// `specs` the patterns as SaC writes them (`[n,n];[n]`), `types` the
/// parameters' types and `names` their names (for the message), `vars` the
/// variables to bind. With `first_result < n` it checks results instead
/// (see `Op::Pattern`): the first `first_result` arguments are the values of
/// `vars`, the rest results matched against `specs` (`names` says what each is,
/// "the result of `f`"); nothing is written to `out`. Returns 0, or 1 after
/// recording an error (R0014; R0011 for a result).
///
/// # Safety
/// `args` holds `n` arrays or scalars; `out` has room for every variable;
/// strings are NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_pattern(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    function: *const c_char,
    specs: *const c_char,
    types: *const c_char,
    names: *const c_char,
    vars: *const c_char,
    n: i64,
    first_result: i64,
    args: *const WlArg,
    out: *mut WlArg,
) -> i32 {
    let (specs_text, types_text, names_text) = unsafe { (text(specs), text(types), text(names)) };
    let args: &[WlArg] = if n <= 0 { &[] } else { unsafe { std::slice::from_raw_parts(args, n as usize) } };
    let mut env = compiler_core::interp::dispatch::Bindings::default();
    let (types, names): (Vec<&str>, Vec<&str>) = (types_text.split(';').collect(), names_text.split(';').collect());
    // A result check binds the variables from their values, then matches the results.
    let results = (0..n).contains(&first_result);
    let given = if results { first_result as usize } else { 0 };
    if results {
        for (name, arg) in unsafe { text(vars) }.split(';').filter(|s| !s.is_empty()).zip(&args[..given]) {
            let v = unsafe { arg_to_value(arg) };
            let Some(b) = compiler_core::interp::dispatch::Binding::of_value(&v) else {
                unsafe {
                    set_error(ctx, loc, "B0001", &format!("pattern variable `{name}` is not an int or a vector"))
                };
                return 1;
            };
            env.insert(compiler_core::syntax::ast::Name::new(name), b);
        }
    }
    for (k, (spec_text, arg)) in specs_text.split(';').zip(&args[given..]).enumerate() {
        let Some(spec) = compiler_core::ir::parse::parse_shape_spec(spec_text) else {
            unsafe { set_error(ctx, loc, "B0001", &format!("bad type pattern `{spec_text}`")) };
            return 1;
        };
        let v = unsafe { arg_to_value(arg) };
        if !compiler_core::interp::dispatch::match_pattern(&spec, v.shape(), &mut env) {
            let declared = types.get(k).copied().unwrap_or(spec_text);
            let (code, message) = if results {
                let what = names.get(k).copied().unwrap_or("a result");
                ("R0011", format!("{what} is {} but is declared {declared}", compiler_core::interp::describe_value(&v)))
            } else {
                let shape = compiler_core::interp::shape_text(v.shape());
                let (name, function) = (names.get(k).copied().unwrap_or("?"), unsafe { text(function) });
                ("R0014", format!("argument `{name}` of shape {shape} does not match `{declared}` in `{function}`"))
            };
            unsafe { set_error(ctx, loc, code, &message) };
            return 1;
        }
    }
    if results {
        return 0;
    }
    let names = unsafe { text(vars) };
    for (k, name) in names.split(';').filter(|s| !s.is_empty()).enumerate() {
        let Some(b) = env.get(name) else {
            unsafe { set_error(ctx, loc, "B0001", &format!("pattern variable `{name}` is not bound")) };
            return 1;
        };
        // A pattern variable is typed `int[*]` when lowered (an array to the
        // code reading it) and perhaps `int` once the optimiser knows its
        // rank: a scalar comes as both, its bits and a rank-0 array (which
        // code reading the bits releases).
        let value = b.to_value();
        let mut arg = unsafe { value_to_array_arg(ctx, &value) };
        if let Value::Scalar(s) = value {
            arg.bits = crate::values::scalar_bits(s).1;
        }
        unsafe { out.add(k).write(arg) };
    }
    0
}
