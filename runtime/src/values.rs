//! Values crossing between compiled code and the runtime's Rust side: scalars as
//! bit patterns, arrays as [`WlArray`]s, and the reference interpreter's
//! [`Value`]s (for the primitives and formatting the runtime borrows from it).

use std::ffi::c_void;
use std::sync::Arc;

use compiler_core::interp::value::{Array, Elems, Scalar, Value};
use compiler_core::syntax::ast::BaseType;

use crate::array::{WlArray, base_of, code_of, wl_alloc};
use crate::error::WlCtx;

/// A value passed to the runtime or returned from it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WlArg {
    /// [`ARG_SCALAR`], [`ARG_ARRAY`] or [`ARG_STRING`].
    pub kind: i32,
    /// The element type's code.
    pub elem: i32,
    /// A scalar's bits; a string's length.
    pub bits: u64,
    /// An array (`*mut WlArray`) or a string's bytes.
    pub ptr: *mut c_void,
}

pub const ARG_SCALAR: i32 = 0;
pub const ARG_ARRAY: i32 = 1;
pub const ARG_STRING: i32 = 2;

impl WlArg {
    pub fn scalar(s: Scalar) -> WlArg {
        let (elem, bits) = scalar_bits(s);
        WlArg { kind: ARG_SCALAR, elem, bits, ptr: std::ptr::null_mut() }
    }
}

/// A scalar as (element type code, bits): integers as their normalised `i64`,
/// `float` in the low 32 bits, `double` as its bits, `bool` 0/1, `char` its byte.
pub fn scalar_bits(s: Scalar) -> (i32, u64) {
    let bits = match s {
        Scalar::Bool(b) => b as u64,
        Scalar::Char(c) => c as u64,
        Scalar::Int(_, v) => v as u64,
        Scalar::Float(f) => f.to_bits() as u64,
        Scalar::Double(d) => d.to_bits(),
    };
    (code_of(s.base()), bits)
}

pub fn scalar_from_bits(elem: i32, bits: u64) -> Scalar {
    match base_of(elem) {
        BaseType::Bool => Scalar::Bool(bits & 1 != 0),
        BaseType::Char => Scalar::Char(bits as u8),
        BaseType::Float => Scalar::Float(f32::from_bits(bits as u32)),
        BaseType::Double => Scalar::Double(f64::from_bits(bits)),
        t => Scalar::Int(t, compiler_core::interp::value::wrap_int(t, bits as i64)),
    }
}

/// Element `i` of an array.
pub fn element(a: &WlArray, i: usize) -> Scalar {
    let b = a.bytes();
    let e = a.esize as usize;
    let raw = &b[i * e..(i + 1) * e];
    let mut buf = [0u8; 8];
    buf[..e].copy_from_slice(raw);
    let u = u64::from_le_bytes(buf);
    let base = a.base();
    let v: i64 = match base {
        BaseType::Byte => raw[0] as i8 as i64,
        BaseType::Short => i16::from_le_bytes([raw[0], raw[1]]) as i64,
        BaseType::Int => i32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as i64,
        _ => u as i64,
    };
    match base {
        BaseType::Bool => Scalar::Bool(u & 1 != 0),
        BaseType::Char => Scalar::Char(u as u8),
        BaseType::Float => Scalar::Float(f32::from_bits(u as u32)),
        BaseType::Double => Scalar::Double(f64::from_bits(u)),
        t => Scalar::Int(t, v),
    }
}

/// Stores element `i`.
///
/// # Safety
/// `a` owns writable data with more than `i` elements of `s`'s type.
pub unsafe fn set_element(a: *mut WlArray, i: usize, s: Scalar) {
    let arr = unsafe { &*a };
    let e = arr.esize as usize;
    let (_, bits) = scalar_bits(s);
    let bytes = bits.to_le_bytes();
    // SAFETY: in range by the caller's promise.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), arr.data.add(i * e), e) };
}

/// The array as an interpreter value (a copy).
pub fn array_to_value(a: &WlArray) -> Value {
    let n = a.size as usize;
    let shape: Vec<usize> = a.shape().iter().map(|&d| d as usize).collect();
    let elems = match a.base() {
        BaseType::Bool => Elems::Bool((0..n).map(|i| matches!(element(a, i), Scalar::Bool(true))).collect()),
        BaseType::Char => {
            Elems::Char((0..n).map(|i| if let Scalar::Char(c) = element(a, i) { c } else { 0 }).collect())
        }
        BaseType::Float => {
            Elems::Float((0..n).map(|i| if let Scalar::Float(f) = element(a, i) { f } else { 0.0 }).collect())
        }
        BaseType::Double => {
            Elems::Double((0..n).map(|i| if let Scalar::Double(d) = element(a, i) { d } else { 0.0 }).collect())
        }
        t => Elems::Int(t, (0..n).map(|i| element(a, i).as_i64().unwrap_or(0)).collect()),
    };
    if shape.is_empty()
        && let Some(s) = elems.get(0)
    {
        return Value::Scalar(s);
    }
    Value::Array(Arc::new(Array { shape, elems }))
}

/// A new array (count 1) holding an interpreter array's elements; null on error.
///
/// # Safety
/// `ctx` is valid.
pub unsafe fn value_to_array(ctx: *mut WlCtx, v: &Value) -> *mut WlArray {
    let Some(base) = v.base() else { return std::ptr::null_mut() };
    let shape: Vec<i64> = v.shape().iter().map(|&d| d as i64).collect();
    let a = unsafe { wl_alloc(ctx, code_of(base), shape.len() as i64, shape.as_ptr()) };
    if a.is_null() {
        return a;
    }
    for i in 0..v.len() {
        if let Some(s) = v.elem(i) {
            unsafe { set_element(a, i, s) };
        }
    }
    a
}

/// An argument as an interpreter value (arrays and strings copied).
///
/// # Safety
/// Array and string pointers are valid.
pub unsafe fn arg_to_value(arg: &WlArg) -> Value {
    match arg.kind {
        ARG_ARRAY => array_to_value(unsafe { &*(arg.ptr as *const WlArray) }),
        ARG_STRING => {
            let bytes = if arg.ptr.is_null() {
                &[][..]
            } else {
                unsafe { std::slice::from_raw_parts(arg.ptr as *const u8, arg.bits as usize) }
            };
            Value::Str(Arc::from(bytes))
        }
        _ => Value::Scalar(scalar_from_bits(arg.elem, arg.bits)),
    }
}

/// An interpreter value as an argument (arrays become new arrays the caller owns;
/// strings are leaked, they only come from constants).
///
/// # Safety
/// `ctx` is valid.
pub unsafe fn value_to_arg(ctx: *mut WlCtx, v: &Value) -> WlArg {
    match v {
        Value::Scalar(s) => WlArg::scalar(*s),
        Value::Array(_) => {
            let a = unsafe { value_to_array(ctx, v) };
            WlArg { kind: ARG_ARRAY, elem: code_of(v.base().unwrap_or(BaseType::Int)), bits: 0, ptr: a as *mut c_void }
        }
        Value::Str(s) => {
            let leaked: &'static [u8] = Box::leak(s.to_vec().into_boxed_slice());
            WlArg { kind: ARG_STRING, elem: 0, bits: leaked.len() as u64, ptr: leaked.as_ptr() as *mut c_void }
        }
    }
}

/// An interpreter value as an array argument, scalars as rank-0 arrays.
///
/// # Safety
/// `ctx` is valid.
pub unsafe fn value_to_array_arg(ctx: *mut WlCtx, v: &Value) -> WlArg {
    match v {
        Value::Scalar(s) => {
            let (elem, bits) = scalar_bits(*s);
            let a = unsafe { crate::prim::wl_box(ctx, elem, bits) };
            WlArg { kind: ARG_ARRAY, elem, bits: 0, ptr: a as *mut c_void }
        }
        other => unsafe { value_to_arg(ctx, other) },
    }
}
