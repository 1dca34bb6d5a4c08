//! withloop's compiler core: everything between source text and a result, with no IO.
//!
//! ```text
//!  source ──cpp──▶ tokens ──parse──▶ AST ──resolve──▶ program ──interpret──▶ values
//!  (syntax::cpp)           (syntax::parser)  (sema)            (interp)
//! ```
//!
//! Later stages (types and specialisation, the optimising IR, code generation) hang off
//! the resolved program. Diagnostics are plain data ([`diagnostics`]); rendering them is
//! left to the caller. IO (reading `#include`d files) comes in through
//! [`syntax::cpp::SourceLoader`].

pub mod diagnostics;
pub mod driver;
pub mod interp;
pub mod ir;
pub mod l0;
pub mod library;
pub mod opt;
pub mod sema;
pub mod span;
pub mod syntax;
