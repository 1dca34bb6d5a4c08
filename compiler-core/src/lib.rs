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

/// The hash map every pass uses. Keys are mostly small integers (value and
/// function handles) hashed millions of times per compile; SipHash made
/// hashing a tenth of the optimiser's time. foldhash is several times faster
/// and still seeded per process, so crafted programs cannot aim collisions.
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// The hash set every pass uses (see [`HashMap`]).
pub type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
