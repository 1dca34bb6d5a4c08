//! The typed, specialised program that inference produces.
//!
//! An [`Instance`] is a source function at particular parameter types, with the
//! types of its locals, the static target of every call site it reaches, and the
//! cell types of its with-loops. A [`Wrapper`] dispatches at run time, on dim and
//! shape, to the most specific instance of an overloaded function (seed 003 §4.2);
//! calls whose target cannot be fixed statically go through one. Each entry function
//! has a wrapper, so an entry accepts every argument its SaC type admits.

use crate::{HashMap, HashSet};
use std::rc::Rc;

use super::hir::{FunId, LoopId, SiteId, WithId};
use super::ty::Ty;
use crate::span::Span;
use crate::syntax::ast::Name;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WrapperId(pub u32);

/// Where a call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Resolved at compile time.
    Instance(InstanceId),
    /// Resolved at run time among the wrapper's instances.
    Wrapper(WrapperId),
}

/// Why an instance exists (reported in the variants list).
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// A user function at its declared parameter types (every definition has one).
    Declared,
    /// Asked for by a shape hint.
    Hint,
    /// Specialised for the argument types at a call site.
    CallSite(Span),
    /// Needed by a wrapper for argument types only known at run time.
    Wrapper,
}

#[derive(Clone, Debug)]
pub struct Instance {
    pub fun: FunId,
    pub params: Vec<Ty>,
    pub results: Vec<Ty>,
    /// Join of the types assigned to each local (`None`: never reached).
    pub locals: Vec<Option<Ty>>,
    pub calls: HashMap<SiteId, Target>,
    /// Cell type of each operator of each with-loop reached (`None`: unknown,
    /// e.g. when no element is computed and the cells' shape depends on the index).
    pub withs: HashMap<WithId, Vec<Option<Ty>>>,
    pub reason: Reason,
    /// Link name, after Kreye: `Det__i_3_3`, `Det__i_X_X`.
    pub symbol: String,
    /// Parameter types are narrower than the declared ones.
    pub specialised: bool,
    /// The `while`/`for` loops whose bodies inference reached (by loop, not
    /// by span: the loops of one macro expansion share its span); a loop not
    /// among them never runs (its condition is known to be false on entry, or
    /// the loop is dead code), and lowering leaves it out.
    pub loops_entered: HashSet<LoopId>,
    /// With-loop partitions whose generator inference found statically empty
    /// (by with-loop and partition number; not by span: the with-loops of one
    /// macro expansion share the expansion's span, and the library's `eq`
    /// has two, the first of them empty on scalars): their bodies never run
    /// and are not typed, and lowering leaves them out.
    pub parts_skipped: HashSet<(WithId, usize)>,
}

#[derive(Clone, Debug)]
pub struct Wrapper {
    pub name: Name,
    pub candidates: Rc<[FunId]>,
    /// Instances of the candidates, most specific first.
    pub instances: Vec<InstanceId>,
    pub symbol: String,
}

/// A remark about typing and specialisation, for the optimisation report.
#[derive(Clone, Debug, PartialEq)]
pub struct Remark {
    /// The function the remark is about.
    pub fun: FunId,
    pub message: String,
    pub span: Option<Span>,
}

#[derive(Clone, Debug, Default)]
pub struct Typed {
    pub instances: Vec<Instance>,
    pub wrappers: Vec<Wrapper>,
    /// Per user function name: the wrapper over its instances.
    pub entries: HashMap<Name, WrapperId>,
    pub remarks: Vec<Remark>,
    /// Instances reachable from the entries (what code generation needs).
    pub reachable: Vec<InstanceId>,
}

impl Typed {
    pub fn instance(&self, id: InstanceId) -> &Instance {
        &self.instances[id.0 as usize]
    }

    pub fn wrapper(&self, id: WrapperId) -> &Wrapper {
        &self.wrappers[id.0 as usize]
    }
}
