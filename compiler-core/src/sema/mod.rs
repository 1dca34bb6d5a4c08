//! Name resolution and desugaring: syntax tree → [`hir::Program`].
//!
//! Two namespaces exist. The *library* namespace holds every library function and
//! is what library code sees. The *user* namespace holds the user's functions plus
//! the library modules the program can see (the prelude unless `--noprelude`, and
//! what it `use`s or `import`s); a user function with exactly the signature of a
//! library one replaces it there. So a program may redefine `+` for itself without
//! changing how the library's `sum` works.
//!
//! Only functions reachable from the user's program are resolved; the rest of the
//! library stays as signatures. With entries ([`ResolveOptions::entries`]), every
//! user function is still resolved (and its errors reported), but library
//! functions only where the entries reach them: a one-kernel compile of a file
//! of thirteen kernels resolved the library code of all thirteen, most of its
//! front end. Errors are reported and resolution goes on, so one run reports
//! everything it can.

pub mod analysis;
pub mod hir;
pub mod infer;
pub mod prim_ty;
mod resolve;
pub mod ty;
pub mod typed;
pub mod types;

use crate::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::library::{self, Library};
use crate::span::Span;
use crate::syntax::ast::{self, ImportSelection, Item, Name, SourceModule};
use hir::{FunId, Function, Intrinsic, Program};
use types::TypeEnv;

/// What resolution needs to know besides the program.
#[derive(Clone, Debug)]
pub struct ResolveOptions {
    /// Load the implicit prelude (`--noprelude` turns it off).
    pub prelude: bool,
    /// The entry functions (by name) the program is compiled for; empty:
    /// all of them. Library code only they reach is resolved.
    pub entries: Vec<String>,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        ResolveOptions { prelude: true, entries: Vec::new() }
    }
}

/// Resolves a user program against the library.
pub fn resolve_program(user: &SourceModule, options: &ResolveOptions, diagnostics: &mut Diagnostics) -> Program {
    let lib = library::library();
    let mut state = State::new(lib, diagnostics);
    state.register_library();
    let typedefs = state.register_typedefs(user);
    let visible = state.visible_modules(user, options);
    let user_ids = state.register_user_functions(user, &typedefs);
    state.check_duplicates(&user_ids);
    state.build_user_namespace(&user_ids, &visible);
    for item in &user.items {
        if let Item::Unsupported { what, span } = item {
            state.diags.push(
                Diagnostic::error(codes::UNSUPPORTED, format!("{what} are not supported")).at(*span, "").with_note(
                    "withloop compiles single-module SaC programs without objects, classes or external code",
                ),
            );
        }
    }
    for id in &user_ids {
        state.queue.push(*id);
    }
    state.defer_library = !options.entries.is_empty();
    state.run_queue(&typedefs);
    if state.defer_library {
        state.defer_library = false;
        state.enqueue_library_reached(&options.entries);
        state.run_queue(&typedefs);
    }
    let mut program = state.finish();
    analysis::analyse(&mut program);
    program
}

/// The library's stubs and indexes ([`State::register_library`]). The
/// indexes never change after registration: compiles share them.
#[derive(Clone)]
struct LibraryStubs {
    functions: Vec<Rc<Function>>,
    sources: Vec<Source<'static>>,
    library_names: Arc<HashMap<Name, Vec<FunId>>>,
    library_by_module: Arc<HashMap<(Name, Name), Vec<FunId>>>,
    providers: Arc<HashMap<Name, Vec<&'static str>>>,
}

thread_local! {
    static LIBRARY_STUBS: std::cell::OnceCell<LibraryStubs> = const { std::cell::OnceCell::new() };
}

/// A module the user's code sees: its name, the only names taken from it (if
/// restricted), and the names excluded.
type VisibleModule = (Name, Option<HashSet<Name>>, HashSet<Name>);

/// Where a function's syntax tree lives.
#[derive(Clone, Copy)]
enum Source<'a> {
    Ast(&'a ast::FunDef),
    Intrinsic,
}

struct State<'a> {
    lib: &'a Library,
    diags: &'a mut Diagnostics,
    /// Shared with the library's stubs until changed ([`Program::functions`]).
    functions: Vec<Rc<Function>>,
    sources: Vec<Source<'a>>,
    /// Every library function, by name.
    library_names: Arc<HashMap<Name, Vec<FunId>>>,
    /// Library functions by (module, name), for qualified calls.
    library_by_module: Arc<HashMap<(Name, Name), Vec<FunId>>>,
    /// The user namespace.
    user_names: HashMap<Name, Vec<FunId>>,
    /// Functions whose bodies still need resolving.
    queue: Vec<FunId>,
    /// While user functions are resolved for given entries: the library
    /// functions they call wait for [`State::enqueue_library_reached`].
    defer_library: bool,
    n_sites: u32,
    n_withs: u32,
    n_loops: u32,
    /// Modules that define a name, for "add `use Array: all;`" hints.
    providers: Arc<HashMap<Name, Vec<&'static str>>>,
}

impl<'a> State<'a> {
    fn new(lib: &'a Library, diags: &'a mut Diagnostics) -> State<'a> {
        State {
            lib,
            diags,
            functions: Vec::new(),
            sources: Vec::new(),
            library_names: Arc::default(),
            library_by_module: Arc::default(),
            user_names: HashMap::default(),
            queue: Vec::new(),
            defer_library: false,
            n_sites: 0,
            n_withs: 0,
            n_loops: 0,
            providers: Arc::default(),
        }
    }

    fn add_function(&mut self, f: Function, source: Source<'a>) -> FunId {
        let id = FunId(self.functions.len() as u32);
        self.functions.push(Rc::new(f));
        self.sources.push(source);
        id
    }

    /// Every library function's stub and the library's indexes, from a copy
    /// made once per thread (the library is the same for every compile, and
    /// resolving its thousands of signatures was most of a small compile's
    /// front end; the compile service keeps its compile threads for this).
    fn register_library(&mut self) {
        debug_assert!(self.functions.is_empty(), "the library comes first");
        let stubs = LIBRARY_STUBS.with(|cell| {
            cell.get_or_init(|| {
                let lib: &'static Library = library::library();
                let mut scratch = Diagnostics::new();
                let mut fresh = State::new(lib, &mut scratch);
                fresh.register_library_stubs();
                // The same sources in the same order, borrowed from the library
                // for as long as it lives (the process).
                let mut sources: Vec<Source<'static>> = Vec::with_capacity(fresh.sources.len());
                for (_, src) in &lib.modules {
                    sources.extend(src.items.iter().filter_map(|item| match item {
                        Item::Function(def) => Some(Source::Ast(def)),
                        _ => None,
                    }));
                }
                sources.extend(library::INTRINSICS.iter().map(|_| Source::Intrinsic));
                debug_assert_eq!(sources.len(), fresh.functions.len());
                LibraryStubs {
                    functions: fresh.functions,
                    sources,
                    library_names: fresh.library_names,
                    library_by_module: fresh.library_by_module,
                    providers: fresh.providers,
                }
            })
            .clone()
        });
        self.functions = stubs.functions;
        self.sources = stubs.sources;
        self.library_names = stubs.library_names;
        self.library_by_module = stubs.library_by_module;
        self.providers = stubs.providers;
    }

    fn register_library_stubs(&mut self) {
        let no_typedefs = TypeEnv::default();
        for (module, src) in &self.lib.modules {
            for item in &src.items {
                let Item::Function(def) = item else { continue };
                // The library is ours: its signatures resolve or it is a bug caught by tests.
                let mut scratch = Diagnostics::new();
                let f = types::function_stub(def, Some(Name::new(module)), &no_typedefs, &mut scratch);
                let id = self.add_function(f, Source::Ast(def));
                self.index_library(module, &def.name, id);
            }
        }
        for (module, name) in library::INTRINSICS {
            let span = Span::new(crate::span::FileId(0), 0, 0);
            let f = Function {
                name: Name::new(name),
                module: Some(Name::new(module)),
                span,
                name_span: span,
                inline: ast::Inline::Default,
                params: Vec::new(),
                results: Vec::new(),
                pattern_locals: Vec::new(),
                conditions: Vec::new(),
                body: Vec::new(),
                locals: Vec::new(),
                resolved: true,
                pure: false,
                param_used: Vec::new(),
                intrinsic: Some(Intrinsic::Printf),
            };
            let id = self.add_function(f, Source::Intrinsic);
            self.index_library(module, name, id);
        }
    }

    fn index_library(&mut self, module: &'static str, name: &str, id: FunId) {
        let name = Name::new(name);
        // Registration owns the indexes alone: no copies are made here.
        Arc::make_mut(&mut self.library_names).entry(name.clone()).or_default().push(id);
        Arc::make_mut(&mut self.library_by_module).entry((Name::new(module), name.clone())).or_default().push(id);
        let providers = Arc::make_mut(&mut self.providers).entry(name).or_default();
        if !providers.contains(&module) {
            providers.push(module);
        }
    }

    fn register_typedefs(&mut self, user: &SourceModule) -> TypeEnv {
        let mut env = TypeEnv::default();
        for item in &user.items {
            if let Item::Typedef(t) = item {
                if let Some((_, prev)) = env.get(&t.name) {
                    let prev = *prev;
                    self.diags.push(
                        Diagnostic::error(codes::TYPEDEF_REDEFINED, format!("type `{}` is defined twice", t.name))
                            .at(t.span, "second definition")
                            .with_label(prev, "first definition"),
                    );
                    continue;
                }
                if ast::BaseType::from_name(&t.name).is_some() {
                    self.diags.push(
                        Diagnostic::error(codes::TYPEDEF_REDEFINED, format!("`{}` is a built-in type", t.name))
                            .at(t.span, ""),
                    );
                    continue;
                }
                if let Some(ty) = types::resolve_type(&t.ty, &env, self.diags) {
                    env.insert(t.name.clone(), (ty, t.span));
                }
            }
        }
        env
    }

    /// The library modules the user's code sees.
    fn visible_modules(&mut self, user: &SourceModule, options: &ResolveOptions) -> Vec<VisibleModule> {
        // (module, only these names, except these names)
        let mut visible = Vec::new();
        if options.prelude {
            for m in library::PRELUDE_MODULES {
                visible.push((Name::new(m), None, HashSet::default()));
            }
        }
        for item in &user.items {
            let Item::Import(import) = item else { continue };
            let Some(parts) = library::expand_module(&import.module) else {
                let mut d = Diagnostic::error(codes::UNKNOWN_MODULE, format!("unknown module `{}`", import.module))
                    .at(import.module_span, "")
                    .with_note(format!("available modules: {}", library::KNOWN_MODULES.join(", ")));
                if let Some(best) = closest(&import.module, library::KNOWN_MODULES.iter().copied()) {
                    d = d.with_hint(format!("did you mean `{best}`?"));
                }
                self.diags.push(d);
                continue;
            };
            let (only, except) = match &import.selection {
                ImportSelection::All => (None, HashSet::default()),
                ImportSelection::AllExcept(names) => (None, names.iter().map(|(n, _)| n.clone()).collect()),
                ImportSelection::Only(names) => {
                    for (n, span) in names {
                        let provided =
                            parts.iter().any(|m| self.library_by_module.contains_key(&(Name::new(m), n.clone())));
                        if !provided {
                            self.diags.push(
                                Diagnostic::error(
                                    codes::UNKNOWN_IMPORT,
                                    format!("module `{}` does not provide `{n}`", import.module),
                                )
                                .at(*span, ""),
                            );
                        }
                    }
                    (Some(names.iter().map(|(n, _)| n.clone()).collect()), HashSet::default())
                }
            };
            for m in parts {
                visible.push((Name::new(m), only.clone(), except.clone()));
            }
        }
        visible
    }

    fn register_user_functions(&mut self, user: &'a SourceModule, typedefs: &TypeEnv) -> Vec<FunId> {
        let mut ids = Vec::new();
        for item in &user.items {
            if let Item::Function(def) = item {
                let f = types::function_stub(def, None, typedefs, self.diags);
                ids.push(self.add_function(f, Source::Ast(def)));
            }
        }
        ids
    }

    /// Two user definitions with identical parameter types can never be told apart,
    /// and two that form a *crossing pair* (seed 003 §3.2: each more specific than
    /// the other at some parameter) make dispatch depend on argument order.
    fn check_duplicates(&mut self, user_ids: &[FunId]) {
        for (k, &a) in user_ids.iter().enumerate() {
            for &b in &user_ids[..k] {
                let (fa, fb) = (&self.functions[a.0 as usize], &self.functions[b.0 as usize]);
                if fa.name == fb.name && crossing_pair(fa, fb) {
                    let d = Diagnostic::error(
                        codes::AMBIGUOUS_OVERLOAD,
                        format!("`{}` and `{}` form a crossing pair", fb.signature(), fa.signature()),
                    )
                    .at(fa.name_span, "this instance is more specific at some parameter…")
                    .with_label(fb.name_span, "…and this one at another")
                    .with_note("a call matching both would be ambiguous; SaC rules such pairs out")
                    .with_hint(
                        "add an instance that is more specific than both, or make one of them more general everywhere",
                    );
                    self.diags.push(d);
                    continue;
                }
                if fa.name == fb.name && same_signature(fa, fb) {
                    let d = Diagnostic::error(
                        codes::DUPLICATE_DEFINITION,
                        format!("`{}` is defined twice with the same parameter types", fa.signature()),
                    )
                    .at(fa.name_span, "second definition")
                    .with_label(fb.name_span, "first definition")
                    .with_hint(
                        "overloaded instances must differ in their parameter types (element type, shape class or \
                         arity); a type pattern such as `int[n]` only adds a check to `int[.]`",
                    );
                    self.diags.push(d);
                }
            }
        }
    }

    fn build_user_namespace(&mut self, user_ids: &[FunId], visible: &[VisibleModule]) {
        for &id in user_ids {
            let name = self.functions[id.0 as usize].name.clone();
            self.user_names.entry(name).or_default().push(id);
        }
        let mut seen: HashSet<FunId> = HashSet::default();
        for (module, only, except) in visible {
            let mut entries: Vec<(&(Name, Name), &Vec<FunId>)> =
                self.library_by_module.iter().filter(|((m, _), _)| m == module).collect();
            entries.sort_by(|a, b| a.0.1.cmp(&b.0.1));
            let mut additions: Vec<(Name, FunId)> = Vec::new();
            for ((_, name), ids) in entries {
                if only.as_ref().is_some_and(|o| !o.contains(name)) || except.contains(name) {
                    continue;
                }
                for &id in ids {
                    if !seen.insert(id) {
                        continue;
                    }
                    // A user definition with the same signature replaces the library's.
                    let shadowed = user_ids.iter().any(|&u| {
                        let (fu, fl) = (&self.functions[u.0 as usize], &self.functions[id.0 as usize]);
                        fu.name == fl.name && same_signature(fu, fl)
                    });
                    if !shadowed {
                        additions.push((name.clone(), id));
                    }
                }
            }
            for (name, id) in additions {
                self.user_names.entry(name).or_default().push(id);
            }
        }
    }

    /// A call site of `caller` may call `callee`: its body is to be resolved
    /// (later, if `caller` is a user function and library code waits for
    /// the entries' reach; user functions are all queued from the start).
    fn enqueue(&mut self, caller: FunId, callee: FunId) {
        let is_library = |f: FunId| self.functions[f.0 as usize].is_library();
        if !(self.defer_library && !is_library(caller) && is_library(callee)) {
            self.queue.push(callee);
        }
    }

    /// Queues the library functions the user functions named `entries` call,
    /// directly or through other user functions (whose bodies are resolved).
    fn enqueue_library_reached(&mut self, entries: &[String]) {
        let mut reached: HashSet<FunId> = HashSet::default();
        let mut stack: Vec<FunId> = entries
            .iter()
            .filter_map(|e| self.user_names.get(e.as_str()))
            .flatten()
            .copied()
            .filter(|id| !self.functions[id.0 as usize].is_library())
            .collect();
        while let Some(f) = stack.pop() {
            if !reached.insert(f) {
                continue;
            }
            let functions = &self.functions;
            let queue = &mut self.queue;
            analysis::called_functions(&functions[f.0 as usize], &mut |g| {
                if functions[g.0 as usize].is_library() {
                    queue.push(g);
                } else {
                    stack.push(g);
                }
            });
        }
    }

    fn run_queue(&mut self, typedefs: &TypeEnv) {
        let no_typedefs = TypeEnv::default();
        while let Some(id) = self.queue.pop() {
            if self.functions[id.0 as usize].resolved {
                continue;
            }
            Rc::make_mut(&mut self.functions[id.0 as usize]).resolved = true;
            let Source::Ast(def) = self.sources[id.0 as usize] else { continue };
            let is_library = self.functions[id.0 as usize].is_library();
            let env = if is_library { &no_typedefs } else { typedefs };
            resolve::resolve_function(self, id, def, env);
        }
    }

    fn finish(self) -> Program {
        Program { functions: self.functions, user_names: self.user_names, n_sites: self.n_sites, n_withs: self.n_withs }
    }

    fn new_with(&mut self) -> hir::WithId {
        self.n_withs += 1;
        hir::WithId(self.n_withs - 1)
    }

    fn new_loop(&mut self) -> hir::LoopId {
        self.n_loops += 1;
        hir::LoopId(self.n_loops - 1)
    }

    fn new_site(&mut self) -> hir::SiteId {
        self.n_sites += 1;
        hir::SiteId(self.n_sites - 1)
    }

    /// The overload set `name` refers to from code in `library` or user code.
    fn lookup(&self, module: Option<&Name>, name: &str, from_library: bool) -> Option<Rc<[FunId]>> {
        let ids: Vec<FunId> = match module {
            Some(m) => {
                let parts = library::expand_module(m)?;
                let mut v = Vec::new();
                for p in parts {
                    if let Some(ids) = self.library_by_module.get(&(Name::new(p), Name::new(name))) {
                        v.extend(ids.iter().copied());
                    }
                }
                v
            }
            None if from_library => self.library_names.get(name)?.clone(),
            None => self.user_names.get(name)?.clone(),
        };
        if ids.is_empty() { None } else { Some(ids.into()) }
    }
}

/// Comparable at every parameter (same base type, one shape class inside the other),
/// strictly more specific at one position and strictly less at another.
fn crossing_pair(a: &Function, b: &Function) -> bool {
    use ty::Shape;
    if a.intrinsic.is_some() || b.intrinsic.is_some() || a.params.len() != b.params.len() {
        return false;
    }
    let (mut a_finer, mut b_finer) = (false, false);
    for (p, q) in a.params.iter().zip(&b.params) {
        if p.ty.elem != q.ty.elem {
            return false;
        }
        let (x, y) = (Shape::of_spec(&p.ty.shape), Shape::of_spec(&q.ty.shape));
        match (x.subset_of(&y), y.subset_of(&x)) {
            (true, true) => {}
            (true, false) => a_finer = true,
            (false, true) => b_finer = true,
            (false, false) => return false,
        }
    }
    a_finer && b_finer
}

/// Same parameter types: the same element types and shape classes. Type
/// patterns do not overload (`f(int[n] a)` and `f(int[.] a)` are both
/// `f(int[.])`, the pattern only adds a check): functions are overloaded by
/// argument type, shape class or arity.
fn same_signature(a: &Function, b: &Function) -> bool {
    use ty::Shape;
    a.intrinsic.is_none()
        && b.intrinsic.is_none()
        && a.params.len() == b.params.len()
        && a.params
            .iter()
            .zip(&b.params)
            .all(|(x, y)| x.ty.elem == y.ty.elem && Shape::of_spec(&x.ty.shape) == Shape::of_spec(&y.ty.shape))
}

/// The closest name by edit distance, if reasonably close.
pub fn closest<'n>(name: &str, candidates: impl Iterator<Item = &'n str>) -> Option<&'n str> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = edit_distance(&name.to_lowercase(), &c.to_lowercase());
        if d <= (name.len().max(2) / 3).max(1) && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = if ca == *cb { 0 } else { 1 };
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}
