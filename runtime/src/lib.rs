//! withloop's native runtime: what compiled code calls.
//!
//! Compiled code represents an array as a pointer to a [`WlArray`]: a reference
//! count, the rank, the number of elements, a data pointer, the element type, and
//! the shape. Arrays are immutable once built; an update writes in place only
//! into an array whose count is 1 ([`wl_unique`]). A negative count marks an
//! array the runtime must not free or write (constants, and arrays a C caller
//! passed in).
//!
//! Run-time errors never abort: the first error is recorded in the [`WlCtx`] the
//! compiled code threads through every call, and the code returns at once. The
//! messages are the reference interpreter's (this crate reuses its formatting and
//! its structural primitives, so compiled and interpreted programs print and fail
//! alike).
//!
//! Everything here is `extern "C"`; `codegen` declares the same functions in the
//! LLVM modules it builds, and `include/withloop.h` documents the public part.

// The runtime is the one place that handles raw memory for compiled code.
#![allow(unsafe_code)]

mod abi;
mod array;
mod blocks;
mod bulk;
mod cells;
mod error;
mod gemm;
mod io;
mod parallel;
mod prim;
mod timetile;
mod values;

pub use abi::*;
pub use array::*;
pub use cells::*;
pub use error::*;
pub use gemm::*;
pub use io::*;
pub use parallel::*;
pub use prim::*;
pub use timetile::*;
pub use values::*;
