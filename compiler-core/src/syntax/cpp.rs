//! The C preprocessor that sac2c runs before parsing.
//!
//! Works on tokens, not text, so every token that reaches the parser still has a span
//! in the file the user wrote (tokens produced by a macro carry the span of the macro's
//! use). Supported: `#include "f"` / `<f>` (through a [`SourceLoader`], so the core does
//! no IO), object- and function-like `#define` (variadic, `#` stringizing, `##`
//! pasting), `#undef`, `#if/#ifdef/#ifndef/#elif/#else/#endif` with C integer
//! expressions and `defined`, `#error`, `#warning`, `#pragma once`, `__FILE__`,
//! `__LINE__`; `#pragma` and `#line` are otherwise ignored.
//!
//! Expansion follows the C standard's rescanning rules with per-token "hide sets"
//! (Prosser's algorithm): a macro is never expanded inside its own expansion.
//!
//! Limits: include depth 64 and a cap on the number of tokens one file may expand to,
//! so a macro bomb or an include cycle is an error, not a hang.

use crate::{HashMap, HashSet};
use std::collections::VecDeque;

use smol_str::SmolStr;

use super::lexer::lex;
use super::token::{Token, TokenKind};
use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::span::{FileId, FileKind, SourceMap, Span};

/// Where `#include` gets files from. The CLI reads the file system; the service
/// offers no includes (or the files sent with the request).
pub trait SourceLoader {
    /// Finds and reads `path` as included from the file named `includer`.
    /// Returns the name to show in diagnostics and the text, or why it failed.
    fn load(
        &self,
        path: &str,
        angled: bool,
        includer: &str,
        include_dirs: &[String],
    ) -> Result<(String, String), String>;
}

/// A loader for sources that may not include anything (e.g. a single uploaded file).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoIncludes;

impl SourceLoader for NoIncludes {
    fn load(&self, path: &str, _: bool, _: &str, _: &[String]) -> Result<(String, String), String> {
        Err(format!("`{path}` cannot be included here: this compilation has no file system"))
    }
}

/// A loader over files given in memory, by exact name.
#[derive(Debug, Default, Clone)]
pub struct MemoryLoader {
    pub files: HashMap<String, String>,
}

impl SourceLoader for MemoryLoader {
    fn load(&self, path: &str, _: bool, _: &str, _: &[String]) -> Result<(String, String), String> {
        self.files.get(path).map(|t| (path.to_string(), t.clone())).ok_or_else(|| format!("no file named `{path}`"))
    }
}

/// Preprocessor settings, from `-D` and `-I` flags.
#[derive(Clone, Debug, Default)]
pub struct PpOptions {
    /// `NAME` or `NAME=VALUE`, as given to `-D`.
    pub defines: Vec<String>,
    pub include_dirs: Vec<String>,
}

const MAX_INCLUDE_DEPTH: usize = 64;
/// Includes in all, and the bytes they bring: a file including the next one
/// twice, 25 deep, is 2^25 includes of a few bytes each (minutes and
/// gigabytes) without ever nesting deeper than 25.
const MAX_INCLUDES: usize = 10_000;
const MAX_INCLUDED_BYTES: usize = 64 << 20;
const MAX_OUTPUT_TOKENS: usize = 4_000_000;

#[derive(Clone, Debug)]
struct Macro {
    /// The macro's name, interned ([`Preprocessor::macro_id`]) for hide sets.
    id: MacroId,
    params: Option<Vec<SmolStr>>,
    variadic: bool,
    body: Vec<Token>,
    /// Per token of `body`: the parameter it names (`__VA_ARGS__`: the one
    /// after the named ones), found once at `#define` rather than at every
    /// expansion.
    body_params: Vec<Option<usize>>,
    span: Span,
}

/// A macro name, interned: hide sets hold these, not strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct MacroId(u32);

#[derive(Clone, Debug)]
struct PTok {
    tok: Token,
    hide: HideSet,
}

impl PTok {
    fn plain(tok: Token) -> PTok {
        PTok { tok, hide: HideSet::EMPTY }
    }
}

/// Where expansion puts the tokens it is done with.
trait Sink {
    fn put(&mut self, t: PTok);
}

/// A list still to be rescanned or looked at (a macro's argument, a
/// directive's operands), hide sets and all.
impl Sink for Vec<PTok> {
    fn put(&mut self, t: PTok) {
        self.push(t);
    }
}

/// The preprocessor's output, for a run of ordinary lines: tokens without
/// their hide sets, at most [`MAX_OUTPUT_TOKENS`]; the diagnostics of
/// invalid ones, and where the output ran over, for the caller to report.
struct Output {
    tokens: Vec<Token>,
    invalid: Vec<Diagnostic>,
    overflow: Option<Span>,
}

impl Sink for Output {
    fn put(&mut self, t: PTok) {
        if self.tokens.len() >= MAX_OUTPUT_TOKENS {
            self.overflow.get_or_insert(t.tok.span);
            return;
        }
        if let TokenKind::Invalid(d) = &t.tok.kind {
            self.invalid.push((**d).clone());
        }
        self.tokens.push(t.tok);
    }
}

/// A hide set (Prosser): the macros a token came out of, which it must not
/// expand again. Interned in [`HideSets`]: a token carries an index, so the
/// tokens of an expansion, copied and rescanned many times, share one set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct HideSet(u32);

impl HideSet {
    const EMPTY: HideSet = HideSet(0);
}

/// The hide sets of one preprocessor run, each a sorted list of macro names,
/// with the unions expansion asks for again and again remembered.
struct HideSets {
    sets: Vec<Vec<MacroId>>,
    ids: HashMap<Vec<MacroId>, HideSet>,
    unions: HashMap<(HideSet, HideSet), HideSet>,
}

impl HideSets {
    fn new() -> HideSets {
        let mut ids = HashMap::default();
        ids.insert(Vec::new(), HideSet::EMPTY);
        HideSets { sets: vec![Vec::new()], ids, unions: HashMap::default() }
    }

    fn contains(&self, h: HideSet, name: MacroId) -> bool {
        self.sets[h.0 as usize].binary_search(&name).is_ok()
    }

    fn intern(&mut self, mut names: Vec<MacroId>) -> HideSet {
        names.sort_unstable();
        names.dedup();
        if let Some(h) = self.ids.get(&names) {
            return *h;
        }
        let h = HideSet(self.sets.len() as u32);
        self.sets.push(names.clone());
        self.ids.insert(names, h);
        h
    }

    /// `h` with `name` added.
    fn with(&mut self, h: HideSet, name: MacroId) -> HideSet {
        if self.contains(h, name) {
            return h;
        }
        let mut names = self.sets[h.0 as usize].clone();
        names.push(name);
        self.intern(names)
    }

    fn union(&mut self, a: HideSet, b: HideSet) -> HideSet {
        if a == b || b == HideSet::EMPTY {
            return a;
        }
        if a == HideSet::EMPTY {
            return b;
        }
        if let Some(u) = self.unions.get(&(a, b)) {
            return *u;
        }
        let names = self.sets[a.0 as usize].iter().chain(&self.sets[b.0 as usize]).copied().collect();
        let u = self.intern(names);
        self.unions.insert((a, b), u);
        u
    }

    fn intersection(&mut self, a: HideSet, b: HideSet) -> HideSet {
        if a == b {
            return a;
        }
        let names = self.sets[a.0 as usize].iter().filter(|n| self.contains(b, **n)).copied().collect();
        self.intern(names)
    }
}

struct Conditional {
    /// Whether the enclosing region is live.
    parent_active: bool,
    /// Whether some branch of this `#if` chain has been taken.
    taken: bool,
    active: bool,
    seen_else: bool,
    span: Span,
}

/// Runs the preprocessor over `file` and returns the token stream for the parser,
/// ending with an `Eof` token.
pub fn preprocess(
    sources: &mut SourceMap,
    file: FileId,
    loader: &dyn SourceLoader,
    options: &PpOptions,
    diagnostics: &mut Diagnostics,
) -> Vec<Token> {
    let mut pp = Preprocessor {
        sources,
        loader,
        diags: diagnostics,
        macros: HashMap::default(),
        macro_ids: HashMap::default(),
        include_dirs: options.include_dirs.clone(),
        output: Vec::new(),
        pragma_once: HashSet::default(),
        overflowed: false,
        included: (0, 0),
        includes_exhausted: false,
        hides: HideSets::new(),
    };
    pp.define_command_line(&options.defines);
    pp.process_file(file, 0);
    let end = {
        let text_len = pp.sources.get(file).text.len();
        Span::new(file, text_len, text_len)
    };
    let mut output = pp.output;
    output.push(Token {
        kind: TokenKind::Eof,
        text: SmolStr::default(),
        span: end,
        line_start: true,
        space_before: true,
    });
    output
}

struct Preprocessor<'a> {
    sources: &'a mut SourceMap,
    loader: &'a dyn SourceLoader,
    diags: &'a mut Diagnostics,
    /// Shared so that expanding one does not copy its body.
    macros: HashMap<SmolStr, std::rc::Rc<Macro>>,
    /// Every macro name defined so far, interned.
    macro_ids: HashMap<SmolStr, MacroId>,
    include_dirs: Vec<String>,
    output: Vec<Token>,
    pragma_once: HashSet<SmolStr>,
    overflowed: bool,
    hides: HideSets,
    /// Includes loaded so far, and their bytes.
    included: (usize, usize),
    /// [`MAX_INCLUDES`] or [`MAX_INCLUDED_BYTES`] was passed (reported once).
    includes_exhausted: bool,
}

impl Preprocessor<'_> {
    fn macro_id(&mut self, name: &SmolStr) -> MacroId {
        let next = MacroId(self.macro_ids.len() as u32);
        *self.macro_ids.entry(name.clone()).or_insert(next)
    }

    fn define_command_line(&mut self, defines: &[String]) {
        for def in defines {
            let (name, value) = match def.split_once('=') {
                Some((n, v)) => (n.trim().to_string(), v.to_string()),
                None => (def.trim().to_string(), "1".to_string()),
            };
            let text = format!("{name} {value}");
            let file = self.sources.add(format!("<-D {def}>"), text.clone(), FileKind::CommandLine);
            let tokens = lex(file, &text, self.diags);
            if tokens.first().is_none_or(|t| !t.is_ident()) {
                self.diags.push(
                    Diagnostic::error(
                        codes::MALFORMED_DIRECTIVE,
                        format!("`-D {def}` does not start with a macro name"),
                    )
                    .at(Span::new(file, 0, text.len()), ""),
                );
                continue;
            }
            let span = tokens[0].span;
            let body: Vec<Token> = tokens[1..]
                .iter()
                .cloned()
                .map(|mut t| {
                    t.line_start = false;
                    t
                })
                .collect();
            let name = SmolStr::new(&name);
            let id = self.macro_id(&name);
            let body_params = vec![None; body.len()];
            let mac = Macro { id, params: None, variadic: false, body, body_params, span };
            self.macros.insert(name, std::rc::Rc::new(mac));
        }
    }

    fn process_file(&mut self, file: FileId, depth: usize) {
        let source = self.sources.get(file);
        let (text, library) = (source.text.clone(), source.kind == FileKind::Library);
        // Room for what a library file expands to, reserved once: one macro
        // per element type, about three tokens per byte of source. Only the
        // pages written are faulted in; grown by doubling, the output was
        // copied to new ones four or five times over (950 of the 4980 page
        // faults of `withloop check` on a one-line program). A user's file
        // grows as needed (a run's address space may be limited, and its
        // source large), and a reservation that fails is only a hint not taken.
        if library {
            let room = (text.len() * 4).min(MAX_OUTPUT_TOKENS.saturating_sub(self.output.len()));
            let _ = self.output.try_reserve(room);
        }
        let tokens = lex(file, &text, self.diags);
        let mut stack: Vec<Conditional> = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            let active = stack.last().is_none_or(|c| c.active);
            if tokens[i].is_punct("#") && tokens[i].line_start {
                let mut j = i + 1;
                while j < tokens.len() && !tokens[j].line_start {
                    j += 1;
                }
                self.directive(&tokens[i], &tokens[i + 1..j], &mut stack, active, file, depth);
                i = j;
                continue;
            }
            // A run of ordinary lines up to the next directive.
            let mut j = i;
            while j < tokens.len() && !(tokens[j].is_punct("#") && tokens[j].line_start) {
                j += 1;
            }
            if active {
                let run: VecDeque<PTok> = tokens[i..j].iter().cloned().map(PTok::plain).collect();
                // Straight into the output: a library file expands to tens of
                // thousands of tokens, which a list of their own, grown and
                // then copied, had the process fault in twice.
                let mut output =
                    Output { tokens: std::mem::take(&mut self.output), invalid: Vec::new(), overflow: None };
                self.expand_into(run, &mut output);
                self.output = output.tokens;
                // Reported here; the parser treats such a token as an erroneous
                // expression without reporting again (so one mistake gives one error).
                self.diags.extend(output.invalid);
                if let Some(span) = output.overflow
                    && !self.overflowed
                {
                    self.overflowed = true;
                    self.diags.push(
                        Diagnostic::error(codes::MACRO_ARITY, "macro expansion produces too many tokens")
                            .at(span, "while expanding this")
                            .with_note(format!("the limit is {MAX_OUTPUT_TOKENS} tokens")),
                    );
                }
            }
            i = j;
        }
        for open in stack {
            self.diags.push(
                Diagnostic::error(codes::UNTERMINATED_CONDITIONAL, "this conditional has no `#endif`")
                    .at(open.span, "opened here"),
            );
        }
    }

    fn directive(
        &mut self,
        hash: &Token,
        line: &[Token],
        stack: &mut Vec<Conditional>,
        active: bool,
        file: FileId,
        depth: usize,
    ) {
        let Some(name_tok) = line.first() else {
            return; // the null directive `#`
        };
        let name = name_tok.text.as_str();
        let args = &line[1..];
        let whole = line.last().map_or(hash.span, |l| hash.span.to(l.span));
        match name {
            "if" | "ifdef" | "ifndef" => {
                let value = if !active {
                    false
                } else if name == "if" {
                    self.eval_condition(args, whole)
                } else {
                    match args.first() {
                        Some(t) if t.is_ident() => {
                            let defined = self.macros.contains_key(&t.text) || is_builtin_macro(&t.text);
                            if name == "ifdef" { defined } else { !defined }
                        }
                        _ => {
                            self.diags.push(
                                Diagnostic::error(codes::MALFORMED_DIRECTIVE, format!("`#{name}` needs a macro name"))
                                    .at(whole, ""),
                            );
                            false
                        }
                    }
                };
                stack.push(Conditional {
                    parent_active: active,
                    taken: value,
                    active: active && value,
                    seen_else: false,
                    span: whole,
                });
            }
            "elif" | "else" => {
                let Some(top) = stack.last_mut() else {
                    self.diags.push(
                        Diagnostic::error(codes::UNMATCHED_CONDITIONAL, format!("`#{name}` without `#if`"))
                            .at(whole, ""),
                    );
                    return;
                };
                if top.seen_else {
                    self.diags.push(
                        Diagnostic::error(codes::UNMATCHED_CONDITIONAL, format!("`#{name}` after `#else`"))
                            .at(whole, "")
                            .with_label(top.span, "this conditional already had its `#else`"),
                    );
                    return;
                }
                let parent_active = top.parent_active;
                let taken = top.taken;
                if name == "else" {
                    let top = stack.last_mut().expect("checked above");
                    top.seen_else = true;
                    top.active = parent_active && !taken;
                    top.taken = true;
                } else {
                    let value = parent_active && !taken && self.eval_condition(args, whole);
                    let top = stack.last_mut().expect("checked above");
                    top.active = value;
                    top.taken = taken || value;
                }
            }
            "endif" => {
                if stack.pop().is_none() {
                    self.diags
                        .push(Diagnostic::error(codes::UNMATCHED_CONDITIONAL, "`#endif` without `#if`").at(whole, ""));
                }
            }
            _ if !active => {}
            "define" => self.define(args, whole),
            "undef" => {
                if let Some(t) = args.first().filter(|t| t.is_ident()) {
                    self.macros.remove(&t.text);
                } else {
                    self.diags.push(
                        Diagnostic::error(codes::MALFORMED_DIRECTIVE, "`#undef` needs a macro name").at(whole, ""),
                    );
                }
            }
            "include" | "include_next" | "import" => self.include(args, whole, file, depth),
            "error" => {
                let message = self.line_text(args);
                self.diags.push(Diagnostic::error(codes::ERROR_DIRECTIVE, format!("#error {message}")).at(whole, ""));
            }
            "warning" => {
                let message = self.line_text(args);
                self.diags
                    .push(Diagnostic::warning(codes::WARNING_DIRECTIVE, format!("#warning {message}")).at(whole, ""));
            }
            "pragma" => {
                if args.first().is_some_and(|t| t.text == "once") {
                    let name = self.sources.get(file).name.clone();
                    self.pragma_once.insert(name);
                }
            }
            "line" => {}
            _ => {
                if name_tok.kind == TokenKind::Int {
                    return; // `# 12 "file"` line markers
                }
                self.diags.push(
                    Diagnostic::error(codes::UNKNOWN_DIRECTIVE, format!("unknown preprocessor directive `#{name}`"))
                        .at(hash.span.to(name_tok.span), "")
                        .with_hint("known directives: #include #define #undef #if #ifdef #ifndef #elif #else #endif #error #warning #pragma"),
                );
            }
        }
    }

    fn line_text(&self, tokens: &[Token]) -> String {
        match (tokens.first(), tokens.last()) {
            (Some(a), Some(b)) => self.sources.snippet(a.span.to(b.span)).to_string(),
            _ => String::new(),
        }
    }

    fn define(&mut self, args: &[Token], whole: Span) {
        let Some(name) = args.first().filter(|t| t.is_ident()) else {
            self.diags
                .push(Diagnostic::error(codes::MALFORMED_DIRECTIVE, "`#define` needs a macro name").at(whole, ""));
            return;
        };
        let mut rest = &args[1..];
        let mut params = None;
        let mut variadic = false;
        // A function-like macro has `(` right after the name, without a space.
        if rest.first().is_some_and(|t| t.is_punct("(") && !t.space_before) {
            let mut list = Vec::new();
            let mut k = 1;
            let mut ok = false;
            while k < rest.len() {
                let t = &rest[k];
                if t.is_punct(")") {
                    ok = true;
                    k += 1;
                    break;
                } else if t.is_punct("...") {
                    variadic = true;
                } else if t.is_ident() {
                    list.push(t.text.clone());
                } else if !t.is_punct(",") {
                    break;
                }
                k += 1;
            }
            if !ok {
                self.diags.push(
                    Diagnostic::error(codes::MALFORMED_DIRECTIVE, "malformed macro parameter list")
                        .at(whole, "")
                        .with_hint("write `#define NAME(a, b) body`"),
                );
                return;
            }
            params = Some(list);
            rest = &rest[k..];
        }
        let body: Vec<Token> = rest
            .iter()
            .cloned()
            .map(|mut t| {
                t.line_start = false;
                t
            })
            .collect();
        let body_params = body
            .iter()
            .map(|t| {
                let params = params.as_deref()?;
                if !t.is_ident() {
                    None
                } else if variadic && t.text == "__VA_ARGS__" {
                    Some(params.len())
                } else {
                    params.iter().position(|p| *p == t.text)
                }
            })
            .collect();
        let id = self.macro_id(&name.text);
        let new = Macro { id, params, variadic, body, body_params, span: name.span };
        if let Some(old) = self.macros.get(&name.text) {
            let same = old.params == new.params
                && old.body.len() == new.body.len()
                && old.body.iter().zip(&new.body).all(|(a, b)| a.text == b.text);
            if !same {
                self.diags.push(
                    Diagnostic::warning(codes::MACRO_REDEFINED, format!("macro `{}` redefined", name.text))
                        .at(name.span, "new definition")
                        .with_label(old.span, "previous definition"),
                );
            }
        }
        self.macros.insert(name.text.clone(), std::rc::Rc::new(new));
    }

    fn include(&mut self, args: &[Token], whole: Span, file: FileId, depth: usize) {
        // `#include MACRO` expands first.
        let expanded: Vec<Token>;
        let args = if args.first().is_some_and(|t| t.is_ident()) {
            expanded =
                self.expand(args.iter().cloned().map(PTok::plain).collect()).into_iter().map(|p| p.tok).collect();
            &expanded[..]
        } else {
            args
        };
        let (path, angled) = match args.first() {
            Some(t) if t.kind == TokenKind::Str => (t.text.trim_matches('"').to_string(), false),
            Some(t) if t.is_punct("<") => {
                let Some(close) = args.iter().position(|t| t.is_punct(">")) else {
                    self.diags
                        .push(Diagnostic::error(codes::MALFORMED_DIRECTIVE, "missing `>` in `#include`").at(whole, ""));
                    return;
                };
                // Rebuild the path from the tokens between the brackets.
                let path: String = args[1..close].iter().map(|t| t.text.as_str()).collect();
                (path, true)
            }
            _ => {
                self.diags.push(
                    Diagnostic::error(codes::MALFORMED_DIRECTIVE, "`#include` needs \"file\" or <file>").at(whole, ""),
                );
                return;
            }
        };
        if depth >= MAX_INCLUDE_DEPTH {
            self.diags.push(
                Diagnostic::error(
                    codes::INCLUDE_DEPTH,
                    format!("`#include` nested more than {MAX_INCLUDE_DEPTH} deep"),
                )
                .at(whole, "")
                .with_hint("a file probably includes itself; add an include guard or `#pragma once`"),
            );
            return;
        }
        let includer = self.sources.get(file).name.to_string();
        match self.loader.load(&path, angled, &includer, &self.include_dirs) {
            Ok((name, text)) => {
                if self.pragma_once.contains(name.as_str()) {
                    return;
                }
                self.included = (self.included.0 + 1, self.included.1 + text.len());
                if self.included.0 > MAX_INCLUDES || self.included.1 > MAX_INCLUDED_BYTES {
                    // Reported once; the includes after it are skipped too.
                    if !std::mem::replace(&mut self.includes_exhausted, true) {
                        self.diags.push(
                            Diagnostic::error(
                                codes::INCLUDE_DEPTH,
                                format!(
                                    "more than {MAX_INCLUDES} `#include`s or {} MiB of included text in all",
                                    MAX_INCLUDED_BYTES >> 20
                                ),
                            )
                            .at(whole, "")
                            .with_hint("files include each other over and over; add include guards or `#pragma once`"),
                        );
                    }
                    return;
                }
                let kind = self.sources.get(file).kind;
                let id = self.sources.add(name, text, kind);
                self.process_file(id, depth + 1);
            }
            Err(why) => self.diags.push(
                Diagnostic::error(codes::INCLUDE_NOT_FOUND, format!("cannot include `{path}`"))
                    .at(whole, "")
                    .with_note(why),
            ),
        }
    }

    // ---------------------------------------------------------------- expansion

    fn expand(&mut self, queue: VecDeque<PTok>) -> Vec<PTok> {
        let mut out = Vec::with_capacity(queue.len());
        self.expand_into(queue, &mut out);
        out
    }

    /// Expands `queue` into `out`.
    fn expand_into(&mut self, mut queue: VecDeque<PTok>, out: &mut impl Sink) {
        let mut budget = MAX_OUTPUT_TOKENS;
        while let Some(t) = queue.pop_front() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                if !self.overflowed {
                    self.overflowed = true;
                    self.diags.push(
                        Diagnostic::error(codes::MACRO_ARITY, "macro expansion does not terminate in reasonable size")
                            .at(t.tok.span, "while expanding this"),
                    );
                }
                return;
            }
            if !t.tok.is_ident() {
                out.put(t);
                continue;
            }
            if t.tok.text.starts_with("__") && is_builtin_macro(&t.tok.text) {
                let file = self.sources.get(t.tok.span.file);
                let (kind, text) = if t.tok.text == "__LINE__" {
                    (TokenKind::Int, SmolStr::new(file.line_col(t.tok.span.start).0.to_string()))
                } else {
                    (TokenKind::Str, SmolStr::new(format!("\"{}\"", file.name)))
                };
                out.put(PTok { tok: Token { kind, text, ..t.tok }, hide: t.hide });
                continue;
            }
            // Most identifiers are not macros: one lookup decides.
            let Some(mac) = self.macros.get(&t.tok.text).cloned() else {
                out.put(t);
                continue;
            };
            if self.hides.contains(t.hide, mac.id) {
                out.put(t);
                continue;
            }
            let name = t.tok.text.clone();
            let span = t.tok.span;
            match &mac.params {
                None => {
                    let hide = self.hides.with(t.hide, mac.id);
                    let body = self.substitute(&mac, &[], span, hide, t.tok.space_before);
                    for b in body.into_iter().rev() {
                        queue.push_front(b);
                    }
                }
                Some(params) => {
                    if !queue.front().is_some_and(|n| n.tok.is_punct("(")) {
                        out.put(t);
                        continue;
                    }
                    let Some((args, rparen)) = self.collect_args(&mut queue, span, &name) else {
                        continue;
                    };
                    let n_params = params.len();
                    let arity_ok = if mac.variadic {
                        args.len() >= n_params
                    } else {
                        args.len() == n_params || (n_params == 0 && args.len() == 1 && args[0].is_empty())
                    };
                    if !arity_ok {
                        let d = Diagnostic::error(
                            codes::MACRO_ARITY,
                            format!("macro `{name}` takes {n_params} argument(s) but {} were given", args.len()),
                        )
                        .at(span.to(rparen.tok.span), "")
                        .with_label(mac.span, "macro defined here");
                        self.diags.push(d.clone());
                        // Leave a placeholder so the parser does not report a missing operand.
                        let placeholder = Token {
                            kind: TokenKind::Invalid(Box::new(d)),
                            text: name.clone(),
                            span: span.to(rparen.tok.span),
                            line_start: t.tok.line_start,
                            space_before: t.tok.space_before,
                        };
                        out.put(PTok::plain(placeholder));
                        continue;
                    }
                    let common = self.hides.intersection(t.hide, rparen.hide);
                    let hide = self.hides.with(common, mac.id);
                    let body = self.substitute(&mac, &args, span.to(rparen.tok.span), hide, t.tok.space_before);
                    for b in body.into_iter().rev() {
                        queue.push_front(b);
                    }
                }
            }
        }
    }

    /// Reads `( a, b, ... )` from the queue. Returns the arguments and the `)`.
    fn collect_args(&mut self, queue: &mut VecDeque<PTok>, span: Span, name: &str) -> Option<(Vec<Vec<PTok>>, PTok)> {
        let open = queue.pop_front()?;
        let mut args: Vec<Vec<PTok>> = vec![Vec::new()];
        let mut depth = 0usize;
        loop {
            let Some(t) = queue.pop_front() else {
                self.diags.push(
                    Diagnostic::error(codes::UNTERMINATED_MACRO_CALL, format!("unterminated call of macro `{name}`"))
                        .at(span.to(open.tok.span), "arguments start here")
                        .with_hint("a macro call must end before the next preprocessor directive"),
                );
                return None;
            };
            if t.tok.is_punct("(") {
                depth += 1;
            } else if t.tok.is_punct(")") {
                if depth == 0 {
                    return Some((args, t));
                }
                depth -= 1;
            } else if t.tok.is_punct(",") && depth == 0 {
                args.push(Vec::new());
                continue;
            }
            args.last_mut().expect("never empty").push(t);
        }
    }

    fn substitute(
        &mut self,
        mac: &Macro,
        args: &[Vec<PTok>],
        span: Span,
        hide: HideSet,
        space_before: bool,
    ) -> Vec<PTok> {
        let params = mac.params.as_deref().unwrap_or(&[]);
        let param_index = |k: usize| -> Option<usize> { mac.body_params.get(k).copied().flatten() };
        let arg_tokens = |idx: usize| -> Vec<PTok> {
            if idx < params.len() {
                args.get(idx).cloned().unwrap_or_default()
            } else {
                // __VA_ARGS__: the remaining arguments with their commas.
                let mut v = Vec::new();
                for (k, a) in args.iter().enumerate().skip(params.len()) {
                    if k > params.len() {
                        let comma = Token {
                            kind: TokenKind::Punct,
                            text: ",".into(),
                            span,
                            line_start: false,
                            space_before: false,
                        };
                        v.push(PTok::plain(comma));
                    }
                    v.extend(a.iter().cloned());
                }
                v
            }
        };
        let body = &mac.body;
        let mut result: Vec<PTok> = Vec::new();
        // Each argument is macro-expanded once, however often it is used.
        let mut expanded: Vec<Option<Vec<PTok>>> = vec![None; params.len() + 1];
        let mut k = 0;
        while k < body.len() {
            let t = &body[k];
            let next_is_paste = body.get(k + 1).is_some_and(|n| n.is_punct("##"));
            let prev_is_paste = k > 0 && body[k - 1].is_punct("##");
            if t.is_punct("#")
                && mac.params.is_some()
                && let Some(idx) = param_index(k + 1)
            {
                let text = stringize(&arg_tokens(idx));
                result.push(PTok::plain(Token {
                    kind: TokenKind::Str,
                    text: SmolStr::new(text),
                    span,
                    line_start: false,
                    space_before: t.space_before,
                }));
                k += 2;
                continue;
            }
            if t.is_punct("##") {
                // Paste the previous result token with the next operand.
                k += 1;
                let Some(rhs_tok) = body.get(k) else { break };
                let rhs: Vec<PTok> = match param_index(k) {
                    Some(idx) => arg_tokens(idx),
                    None => vec![PTok::plain(rhs_tok.clone())],
                };
                let mut rhs = rhs.into_iter();
                match (result.pop(), rhs.next()) {
                    (Some(l), Some(r)) => {
                        let pasted = format!("{}{}", l.tok.text, r.tok.text);
                        result.push(self.paste(&pasted, span, l.tok.space_before));
                    }
                    (Some(l), None) => result.push(l),
                    (None, Some(r)) => result.push(r),
                    (None, None) => {}
                }
                result.extend(rhs);
                k += 1;
                continue;
            }
            match param_index(k) {
                Some(idx) => {
                    let mut tokens = if next_is_paste || prev_is_paste {
                        arg_tokens(idx)
                    } else {
                        match &expanded[idx] {
                            Some(e) => e.clone(),
                            None => {
                                let e = self.expand(arg_tokens(idx).into());
                                expanded[idx] = Some(e.clone());
                                e
                            }
                        }
                    };
                    if let Some(first) = tokens.first_mut() {
                        first.tok.space_before = t.space_before;
                    }
                    result.extend(tokens);
                }
                None => result.push(PTok::plain(t.clone())),
            }
            k += 1;
        }
        for (n, r) in result.iter_mut().enumerate() {
            r.tok.span = span;
            r.tok.line_start = false;
            if n == 0 {
                r.tok.space_before = space_before;
            }
            r.hide = self.hides.union(r.hide, hide);
        }
        result
    }

    fn paste(&mut self, text: &str, span: Span, space_before: bool) -> PTok {
        let mut scratch = Diagnostics::new();
        let tokens = lex(span.file, text, &mut scratch);
        if tokens.len() == 1 && scratch.is_empty() {
            let mut tok = tokens.into_iter().next().expect("one token");
            tok.span = span;
            tok.space_before = space_before;
            tok.line_start = false;
            PTok::plain(tok)
        } else {
            self.diags.push(
                Diagnostic::error(
                    codes::MALFORMED_DIRECTIVE,
                    format!("`##` produced `{text}`, which is not one token"),
                )
                .at(span, ""),
            );
            let kind =
                TokenKind::Invalid(Box::new(Diagnostic::error(codes::UNEXPECTED_CHAR, "bad token paste").at(span, "")));
            PTok::plain(Token { kind, text: SmolStr::new(text), span, line_start: false, space_before })
        }
    }

    // ---------------------------------------------------------------- #if

    fn eval_condition(&mut self, tokens: &[Token], whole: Span) -> bool {
        // Replace `defined X` / `defined(X)` before expansion.
        let mut replaced: VecDeque<PTok> = VecDeque::new();
        let mut k = 0;
        while k < tokens.len() {
            let t = &tokens[k];
            if t.is_ident() && t.text == "defined" {
                let (name, used) = if tokens.get(k + 1).is_some_and(|t| t.is_punct("(")) {
                    if tokens.get(k + 3).is_some_and(|t| t.is_punct(")")) { (tokens.get(k + 2), 4) } else { (None, 1) }
                } else {
                    (tokens.get(k + 1), 2)
                };
                match name.filter(|n| n.is_ident()) {
                    Some(n) => {
                        let defined = self.macros.contains_key(&n.text) || is_builtin_macro(&n.text);
                        let text = if defined { "1" } else { "0" };
                        replaced.push_back(PTok::plain(Token { kind: TokenKind::Int, text: text.into(), ..t.clone() }));
                        k += used;
                        continue;
                    }
                    None => {
                        self.diags.push(
                            Diagnostic::error(codes::BAD_PP_EXPRESSION, "`defined` needs a macro name").at(t.span, ""),
                        );
                        return false;
                    }
                }
            }
            replaced.push_back(PTok::plain(t.clone()));
            k += 1;
        }
        let expanded: Vec<Token> = self.expand(replaced).into_iter().map(|p| p.tok).collect();
        if expanded.is_empty() {
            self.diags.push(Diagnostic::error(codes::BAD_PP_EXPRESSION, "`#if` without a condition").at(whole, ""));
            return false;
        }
        let mut eval = PpExpr { tokens: &expanded, pos: 0 };
        match eval.ternary().and_then(|v| if eval.pos == expanded.len() { Ok(v) } else { Err(eval.pos) }) {
            Ok(v) => v != 0,
            Err(pos) => {
                let at = expanded.get(pos).map_or(whole, |t| t.span);
                self.diags.push(
                    Diagnostic::error(codes::BAD_PP_EXPRESSION, "cannot evaluate this `#if` condition")
                        .at(at, "unexpected here")
                        .with_note("conditions are C integer constant expressions"),
                );
                false
            }
        }
    }
}

fn is_builtin_macro(name: &str) -> bool {
    matches!(name, "__LINE__" | "__FILE__")
}

fn stringize(tokens: &[PTok]) -> String {
    let mut s = String::from("\"");
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 && t.tok.space_before {
            s.push(' ');
        }
        for c in t.tok.text.chars() {
            if matches!(t.tok.kind, TokenKind::Str | TokenKind::Char) && (c == '"' || c == '\\') {
                s.push('\\');
            }
            s.push(c);
        }
    }
    s.push('"');
    s
}

/// Evaluator for `#if` expressions (C integer constant expressions over i64).
struct PpExpr<'a> {
    tokens: &'a [Token],
    pos: usize,
}

type PpResult = Result<i64, usize>;

impl PpExpr<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, p: &str) -> bool {
        if self.peek().is_some_and(|t| t.is_punct(p)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn ternary(&mut self) -> PpResult {
        let c = self.binary(0)?;
        if self.eat("?") {
            let a = self.ternary()?;
            if !self.eat(":") {
                return Err(self.pos);
            }
            let b = self.ternary()?;
            return Ok(if c != 0 { a } else { b });
        }
        Ok(c)
    }

    fn binary(&mut self, min_prec: u8) -> PpResult {
        let mut lhs = self.unary()?;
        while let Some(op) = self.peek().filter(|t| t.kind == TokenKind::Punct).map(|t| t.text.clone()) {
            let prec = match op.as_str() {
                "||" => 1,
                "&&" => 2,
                "|" => 3,
                "^" => 4,
                "&" => 5,
                "==" | "!=" => 6,
                "<" | "<=" | ">" | ">=" => 7,
                "<<" | ">>" => 8,
                "+" | "-" => 9,
                "*" | "/" | "%" => 10,
                _ => break,
            };
            if prec < min_prec {
                break;
            }
            let op_pos = self.pos;
            self.pos += 1;
            let rhs = self.binary(prec + 1)?;
            lhs = match op.as_str() {
                "||" => ((lhs != 0) || (rhs != 0)) as i64,
                "&&" => ((lhs != 0) && (rhs != 0)) as i64,
                "|" => lhs | rhs,
                "^" => lhs ^ rhs,
                "&" => lhs & rhs,
                "==" => (lhs == rhs) as i64,
                "!=" => (lhs != rhs) as i64,
                "<" => (lhs < rhs) as i64,
                "<=" => (lhs <= rhs) as i64,
                ">" => (lhs > rhs) as i64,
                ">=" => (lhs >= rhs) as i64,
                "<<" => lhs.wrapping_shl(rhs as u32),
                ">>" => lhs.wrapping_shr(rhs as u32),
                "+" => lhs.wrapping_add(rhs),
                "-" => lhs.wrapping_sub(rhs),
                "*" => lhs.wrapping_mul(rhs),
                "/" | "%" if rhs == 0 => return Err(op_pos),
                "/" => lhs.wrapping_div(rhs),
                _ => lhs.wrapping_rem(rhs),
            };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> PpResult {
        if self.eat("-") {
            return Ok(self.unary()?.wrapping_neg());
        }
        if self.eat("+") {
            return self.unary();
        }
        if self.eat("!") {
            return Ok((self.unary()? == 0) as i64);
        }
        if self.eat("~") {
            return Ok(!self.unary()?);
        }
        if self.eat("(") {
            let v = self.ternary()?;
            if !self.eat(")") {
                return Err(self.pos);
            }
            return Ok(v);
        }
        let Some(t) = self.peek() else {
            return Err(self.pos);
        };
        let value = match t.kind {
            // Identifiers left after expansion are 0, as in C.
            TokenKind::Ident => 0,
            TokenKind::Int => parse_pp_int(&t.text).ok_or(self.pos)?,
            TokenKind::Char => {
                let body = t.text.trim_matches('\'');
                super::lexer::unescape(body).ok().and_then(|b| b.first().copied()).ok_or(self.pos)? as i64
            }
            _ => return Err(self.pos),
        };
        self.pos += 1;
        Ok(value)
    }
}

fn parse_pp_int(text: &str) -> Option<i64> {
    let digits = text.trim_end_matches(|c: char| {
        c.is_ascii_alphabetic() && !c.is_ascii_hexdigit() || c == 'u' || c == 'U' || c == 'l' || c == 'L'
    });
    if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok().map(|v| v as i64);
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return u64::from_str_radix(&digits[1..], 8).ok().map(|v| v as i64);
    }
    digits.parse::<u64>().ok().map(|v| v as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str, defines: &[&str]) -> (String, Vec<String>) {
        let mut sources = SourceMap::new();
        let file = sources.add("main.sac", src, FileKind::User);
        let mut loader = MemoryLoader::default();
        loader.files.insert("inc.h".into(), "#define FROM_INC 7\nint inc;".into());
        let mut d = Diagnostics::new();
        let opts = PpOptions { defines: defines.iter().map(|s| s.to_string()).collect(), include_dirs: vec![] };
        let toks = preprocess(&mut sources, file, &loader, &opts, &mut d);
        let text = toks.iter().filter(|t| !t.is_eof()).map(|t| t.text.as_str()).collect::<Vec<_>>().join(" ");
        (text, d.iter().map(|d| d.code.id.to_string()).collect())
    }

    #[test]
    fn object_and_function_macros_expand() {
        let (out, errs) = run("#define N 10\n#define SQ(x) ((x)*(x))\nint a = SQ(N+1);", &[]);
        assert_eq!(out, "int a = ( ( 10 + 1 ) * ( 10 + 1 ) ) ;");
        assert!(errs.is_empty());
    }

    #[test]
    fn an_output_past_the_limit_is_one_error_and_what_fits() {
        // Three million tokens a run, each run within expansion's budget; the
        // second takes the file's output past the limit.
        let bomb = "#define A x x x x x x x x x x\n#define B A A A A A A A A A A\n\
                    #define C B B B B B B B B B B\n#define D C C C C C C C C C C\n\
                    #define E D D D D D D D D D D\n#define F E E E E E E E E E E\n\
                    F F F\n#define G\nF F F\n";
        let mut sources = SourceMap::new();
        let file = sources.add("main.sac", bomb, FileKind::User);
        let mut d = Diagnostics::new();
        let toks = preprocess(&mut sources, file, &NoIncludes, &PpOptions::default(), &mut d);
        assert_eq!(toks.len(), MAX_OUTPUT_TOKENS + 1, "the tokens that fit, and the end");
        let errors: Vec<&Diagnostic> = d.iter().collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].message.contains("too many tokens"), "{}", errors[0].message);
    }

    #[test]
    fn self_reference_does_not_loop() {
        let (out, _) = run("#define foo foo + 1\nfoo", &[]);
        assert_eq!(out, "foo + 1");
    }

    #[test]
    fn conditionals_select_branches() {
        let src = "#if 0\ndon't\n#elif defined(X) && X > 1\nyes\n#else\nno\n#endif\n#ifdef Y\ny\n#endif";
        assert_eq!(run(src, &["X=2"]).0, "yes");
        assert_eq!(run(src, &["X=1", "Y"]).0, "no y");
        assert!(run(src, &[]).1.is_empty());
    }

    #[test]
    fn stringize_and_paste() {
        let (out, _) = run("#define S(x) #x\n#define CAT(a,b) a##b\nS(a + b) CAT(foo,bar) CAT(1,2)", &[]);
        assert_eq!(out, "\"a + b\" foobar 12");
    }

    #[test]
    fn includes_and_line_continuation() {
        let (out, errs) = run("#include \"inc.h\"\n#define LONG 1 + \\\n 2\nFROM_INC LONG", &[]);
        assert_eq!(out, "int inc ; 7 1 + 2");
        assert!(errs.is_empty());
        let (_, errs) = run("#include \"missing.h\"\n", &[]);
        assert_eq!(errs, ["E0012"]);
    }

    #[test]
    fn includes_that_double_at_every_level_stop_at_the_limit() {
        // h0 includes h1 twice, h1 h2 twice, …: 2^30 includes, never more than
        // 31 deep. One error once 10000 are in (without the limit: hours).
        let mut sources = SourceMap::new();
        let file = sources.add("main.sac", "#include \"h0\"\nint main() { return 0; }", FileKind::User);
        let mut loader = MemoryLoader::default();
        for k in 0..30 {
            loader.files.insert(format!("h{k}"), format!("#include \"h{0}\"\n#include \"h{0}\"\n", k + 1));
        }
        loader.files.insert("h30".into(), "int x;".into());
        let mut d = Diagnostics::new();
        preprocess(&mut sources, file, &loader, &PpOptions::default(), &mut d);
        let codes: Vec<&str> = d.iter().map(|d| d.code.id).collect();
        assert_eq!(codes, ["E0019"]);
        assert!(d.iter().next().unwrap().message.contains("more than 10000 `#include`s"));
    }

    #[test]
    fn unbalanced_conditionals_are_errors() {
        assert_eq!(run("#if 1\nx", &[]).1, ["E0013"]);
        assert_eq!(run("#endif\n#else", &[]).1, ["E0014", "E0014"]);
        assert_eq!(run("#foo", &[]).1, ["E0010"]);
    }

    #[test]
    fn variadic_macros() {
        let (out, _) = run("#define P(fmt, ...) printf(fmt, __VA_ARGS__)\nP(\"%d %d\", 1, 2)", &[]);
        assert_eq!(out, "printf ( \"%d %d\" , 1 , 2 )");
    }
}
