//! Reads the text form written by [`super::print`] back into a [`Module`].
//!
//! The format is line-oriented (one statement or block boundary per line), so the
//! parser works line by line with a small tokenizer per line. Spans are not part
//! of the text; parsed statements get the span given to [`parse_module`].

use crate::HashMap;

use super::print::{MATH_FNS, prim_name};
use super::*;
use crate::interp::ops::{BinOp, UnOp};
use crate::interp::value::Scalar;
use crate::sema::hir::{DotKind, Elem, Hidden};
use crate::sema::ty::Shape;
use crate::syntax::ast::BaseType;

/// A problem in IR text: line number (1-based) and message.
#[derive(Clone, Debug, PartialEq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

type PResult<T> = Result<T, ParseError>;

/// The primitive a text name denotes.
pub fn prim_from_name(name: &str) -> Option<Prim> {
    let bins = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Mod,
        BinOp::AplMod,
        BinOp::Min,
        BinOp::Max,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::And,
        BinOp::Or,
        BinOp::BitAnd,
        BinOp::BitOr,
        BinOp::BitXor,
        BinOp::Shl,
        BinOp::Shr,
    ];
    let mut candidates: Vec<Prim> = bins.iter().map(|b| Prim::Bin(*b)).collect();
    candidates.extend([UnOp::Neg, UnOp::Not, UnOp::BitNot, UnOp::Abs].map(Prim::Un));
    candidates.extend(BaseType::ALL.iter().map(|b| Prim::Conv(*b)));
    candidates.extend(MATH_FNS.iter().map(|f| Prim::Math(*f)));
    candidates.extend([
        Prim::Dim,
        Prim::Shape,
        Prim::Size,
        Prim::Sel,
        Prim::Modarray,
        Prim::Reshape,
        Prim::Genarray,
        Prim::Cat,
        Prim::Take,
        Prim::Drop,
        Prim::Hide(Hidden::Value),
        Prim::Hide(Hidden::Shape),
        Prim::Hide(Hidden::Dim),
        Prim::Vect2Offset,
        Prim::IdxSel,
        Prim::IdxModarray,
        Prim::MatMul,
        Prim::All,
        Prim::MinVectors,
        Prim::MaxVectors,
        Prim::PrintScalar,
        Prim::PrintArray,
        Prim::Show,
        Prim::Puts,
        Prim::Printf,
        Prim::Error,
    ]);
    if let Some(p) = candidates.into_iter().find(|p| prim_name(p) == name) {
        return Some(p);
    }
    let kinds = |code: &str| -> Option<std::sync::Arc<[DotKind]>> {
        code.chars()
            .map(|c| match c {
                'i' => Some(DotKind::Index),
                'd' => Some(DotKind::Dot),
                'e' => Some(DotKind::Ellipsis),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(Into::into)
    };
    if let Some(code) = name.strip_prefix("dotsel_") {
        return kinds(code).map(Prim::DotSelect);
    }
    if let Some(code) = name.strip_prefix("arrange_") {
        return kinds(code).map(Prim::FrameArrange);
    }
    None
}

/// Parses a type such as `int[3,.]`, `double[+]`, `bool[+2]`, `int[*]`, `string`.
pub fn parse_type(text: &str) -> Option<Ty> {
    let (elem_text, shape_text) = match text.find('[') {
        Some(i) => (&text[..i], Some(&text[i..])),
        None => (text, None),
    };
    let elem = if elem_text == "string" { Elem::String } else { Elem::Base(BaseType::from_name(elem_text)?) };
    let shape = match shape_text {
        None => Shape::scalar(),
        Some(s) => {
            let inner = s.strip_prefix('[')?.strip_suffix(']')?;
            match inner {
                "*" => Shape::AtLeast(0),
                "+" => Shape::AtLeast(1),
                _ if inner.starts_with('+') => Shape::AtLeast(inner[1..].parse().ok()?),
                _ => Shape::Fixed(
                    inner
                        .split(',')
                        .map(|e| if e == "." { Some(None) } else { e.parse().ok().map(Some) })
                        .collect::<Option<Vec<_>>>()?,
                ),
            }
        }
    };
    Some(Ty::new(elem, shape))
}

/// Parses a constant in SaC syntax (plus `inf`, `-inf`, `nan`, `-nan`, strings).
pub fn parse_const(text: &str) -> Option<Value> {
    match text {
        "inf" => return Some(Value::Scalar(Scalar::Double(f64::INFINITY))),
        "-inf" => return Some(Value::Scalar(Scalar::Double(f64::NEG_INFINITY))),
        "nan" => return Some(Value::Scalar(Scalar::Double(f64::NAN))),
        "-nan" => return Some(Value::Scalar(Scalar::Double(-f64::NAN))),
        "-nanf" => return Some(Value::Scalar(Scalar::Float(-f32::NAN))),
        "inff" => return Some(Value::Scalar(Scalar::Float(f32::INFINITY))),
        "-inff" => return Some(Value::Scalar(Scalar::Float(f32::NEG_INFINITY))),
        "nanf" => return Some(Value::Scalar(Scalar::Float(f32::NAN))),
        _ => {}
    }
    if text.starts_with('"') {
        let body = text.strip_prefix('"')?.strip_suffix('"')?;
        let bytes = crate::syntax::lexer::unescape(body).ok()?;
        return Some(Value::Str(bytes.into()));
    }
    let mut sources = crate::span::SourceMap::new();
    crate::driver::parse_value(&mut sources, text).ok()
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Val(u32, Option<Name>),
    Word(String),
    Str(String),
    Punct(char),
}

fn tokenize(line: &str) -> Vec<Tok> {
    let chars: Vec<char> = line.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '%' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let n: u32 = chars[start..i].iter().collect::<String>().parse().unwrap_or(u32::MAX);
            let mut name = None;
            if i < chars.len() && chars[i] == '#' {
                let s = i + 1;
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                name = Some(Name::new(chars[s..i].iter().collect::<String>()));
            }
            toks.push(Tok::Val(n, name));
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            toks.push(Tok::Str(chars[start..i.min(chars.len())].iter().collect()));
        } else if c.is_alphanumeric() || c == '_' || c == '-' && chars.get(i + 1) == Some(&'>') {
            if c == '-' {
                toks.push(Tok::Word("->".into()));
                i += 2;
                continue;
            }
            let start = i;
            // Types are one word: `int[3,.]`.
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if i < chars.len() && chars[i] == '[' && (word == "string" || BaseType::from_name(&word).is_some()) {
                while i < chars.len() && chars[i] != ']' {
                    i += 1;
                }
                i += 1;
            }
            toks.push(Tok::Word(chars[start..i.min(chars.len())].iter().collect()));
        } else {
            toks.push(Tok::Punct(c));
            i += 1;
        }
    }
    toks
}

struct Parser<'a> {
    lines: Vec<(usize, &'a str)>,
    pos: usize,
    funcs: HashMap<String, FuncId>,
    span: Span,
    values: Vec<Option<ValueData>>,
}

impl<'a> Parser<'a> {
    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        let line = self.lines.get(self.pos).map_or(0, |l| l.0);
        Err(ParseError { line, message: message.into() })
    }

    fn peek(&self) -> Option<&'a str> {
        self.lines.get(self.pos).map(|l| l.1.trim())
    }

    fn next(&mut self) -> PResult<&'a str> {
        match self.lines.get(self.pos) {
            Some(l) => {
                self.pos += 1;
                Ok(l.1.trim())
            }
            None => self.err("unexpected end of text"),
        }
    }

    fn define(&mut self, id: u32, name: Option<Name>, ty: Ty) -> ValueId {
        let i = id as usize;
        if self.values.len() <= i {
            self.values.resize(i + 1, None);
        }
        self.values[i] = Some(ValueData { ty, name });
        ValueId(id)
    }

    /// `%3#x: int[2]` at `toks[k..]`; returns the value and the index after it.
    fn def_at(&mut self, toks: &[Tok], k: usize) -> PResult<(ValueId, usize)> {
        let (Some(Tok::Val(n, name)), Some(Tok::Punct(':')), Some(Tok::Word(t))) =
            (toks.get(k), toks.get(k + 1), toks.get(k + 2))
        else {
            return self.err("expected `%N: type`");
        };
        let ty = match parse_type(t) {
            Some(ty) => ty,
            None => return self.err(format!("bad type `{t}`")),
        };
        Ok((self.define(*n, name.clone(), ty), k + 3))
    }

    fn vals(&self, toks: &[Tok]) -> Vec<ValueId> {
        toks.iter().filter_map(|t| if let Tok::Val(n, _) = t { Some(ValueId(*n)) } else { None }).collect()
    }

    fn block(&mut self) -> PResult<Block> {
        let mut b = Block::default();
        loop {
            let line = self.peek().ok_or(ParseError { line: 0, message: "unterminated block".into() })?;
            if let Some(rest) = line.strip_prefix("yield") {
                self.pos += 1;
                b.yields = self.vals(&tokenize(rest));
                return Ok(b);
            }
            b.stmts.push(self.stmt()?);
        }
    }

    fn stmt(&mut self) -> PResult<Stmt> {
        let line = self.next()?;
        // Split `defs = op` at the first ` = ` outside strings.
        let (defs_text, op_text) = match line.find(" = ") {
            Some(i) if !line[..i].contains('"') => (&line[..i], &line[i + 3..]),
            _ => ("", line),
        };
        let mut defs = Vec::new();
        let dt = tokenize(defs_text);
        let mut k = 0;
        while k < dt.len() {
            let (v, next) = self.def_at(&dt, k)?;
            defs.push(v);
            k = next;
            if let Some(Tok::Punct(',')) = dt.get(k) {
                k += 1;
            }
        }
        let op = self.op(op_text)?;
        Ok(Stmt::new(defs, op, self.span))
    }

    fn op(&mut self, text: &str) -> PResult<Op> {
        let (head, rest) = text.split_once(' ').unwrap_or((text, ""));
        let toks = tokenize(rest);
        Ok(match head {
            "const" => match parse_const(rest.trim()) {
                Some(v) => Op::Const(v),
                None => return self.err(format!("bad constant `{rest}`")),
            },
            "prim" => {
                let name = rest.split('(').next().unwrap_or("").trim();
                let Some(prim) = prim_from_name(name) else { return self.err(format!("unknown primitive `{name}`")) };
                {
                    let after = rest.rsplit_once(')').map_or("", |x| x.1);
                    let checked = !after.split_whitespace().any(|w| w == "unchecked");
                    let in_place = after.split_whitespace().any(|w| w == "in_place");
                    Op::Prim { prim, args: self.vals(&toks), checked, in_place }
                }
            }
            "call" => {
                let name = rest.split('(').next().unwrap_or("").trim();
                let Some(func) = self.funcs.get(name).copied() else {
                    return self.err(format!("unknown function `{name}`"));
                };
                Op::Call { func, args: self.vals(&toks) }
            }
            "array" => Op::Array(self.vals(&toks)),
            "pattern" => {
                let Some(Tok::Str(quoted)) = toks.first() else {
                    return self.err("expected the function's signature in quotes");
                };
                let function = unquote(quoted);
                let rest = &rest[quoted.len()..];
                // After the vars: ` results` (a result check), then the labels.
                let (rest, results, labels) = match rest.rfind("] vars [").and_then(|i| {
                    let close = rest[i + 8..].find(']')? + i + 9;
                    Some((&rest[..close], &rest[close..]))
                }) {
                    Some((head, tail)) => {
                        let (mut results, mut labels) = (false, Vec::new());
                        for t in tokenize(tail) {
                            match t {
                                Tok::Word(w) if w == "results" && labels.is_empty() => results = true,
                                Tok::Str(q) => labels.push(unquote(&q)),
                                _ => return self.err("expected `results` or quoted labels after a pattern's vars"),
                            }
                        }
                        (head, results, labels)
                    }
                    None => (rest, false, Vec::new()),
                };
                let args_text = rest.split_once('(').and_then(|x| x.1.split_once(')')).map(|x| x.0).unwrap_or("");
                let args = self.vals(&tokenize(args_text));
                let after_args = rest.split_once(')').map(|x| x.1).unwrap_or("");
                let specs_text = after_args
                    .trim()
                    .strip_prefix('[')
                    .and_then(|s| s.rsplit_once("] vars").map(|x| x.0))
                    .unwrap_or("");
                let mut specs = Vec::new();
                for s in specs_text.split("; ").filter(|s| !s.is_empty()) {
                    match parse_shape_spec(s) {
                        Some(spec) => specs.push(spec),
                        None => return self.err(format!("bad pattern `{s}`")),
                    }
                }
                let vars_text = rest.rsplit_once("vars [").map(|x| x.1.trim_end_matches(']')).unwrap_or("");
                let vars = vars_text.split(", ").filter(|v| !v.is_empty()).map(Name::new).collect();
                Op::Pattern { args, specs, vars, function, labels, results }
            }
            "narrow" => match self.vals(&toks).as_slice() {
                [v] => Op::Narrow(*v),
                _ => return self.err("narrow takes one value"),
            },
            "fail" => {
                let (code, msg) = self.code_message(&toks)?;
                Op::Fail { code, message: msg, args: self.vals(&toks) }
            }
            "check" => {
                let kind = rest.split('(').next().unwrap_or("").trim();
                let vs = self.vals(&toks);
                let (code, message) = self.code_message(&toks)?;
                let check = match (kind, vs.as_slice()) {
                    ("same_shape", [a, b]) => Check::SameShape(*a, *b),
                    ("in_bounds", [i, a]) => Check::InBounds { index: *i, shape: *a },
                    ("assert", [v]) => Check::Assert(*v),
                    ("extents", [v]) => Check::Extents(*v),
                    ("reshape", [a, b]) => Check::Reshape { shape: *a, from: *b },
                    ("conforms", [v]) => {
                        let ty = toks
                            .iter()
                            .find_map(|t| if let Tok::Word(w) = t { parse_type(w) } else { None })
                            .ok_or(ParseError { line: 0, message: "conforms needs a type".into() })?;
                        Check::Conforms(*v, ty)
                    }
                    _ => return self.err(format!("bad check `{rest}`")),
                };
                Op::Check(CheckOp { check, code, message })
            }
            "if" => {
                let cond = self.vals(&toks)[0];
                let then_block = self.block()?;
                if self.next()? != "} else {" {
                    return self.err("expected `} else {`");
                }
                let else_block = self.block()?;
                self.close()?;
                Op::If { cond, then_block, else_block }
            }
            "loop" => {
                let test_first = rest.starts_with("while");
                let tiled = rest.split_whitespace().nth(1) == Some("tiled");
                let init_text = rest.split("init(").nth(1).and_then(|s| s.split(')').next()).unwrap_or("");
                let init = self.vals(&tokenize(init_text));
                let params_text =
                    rest.split("params(").nth(1).and_then(|s| s.rsplit_once(')').map(|x| x.0)).unwrap_or("");
                let pt = tokenize(params_text);
                let mut params = Vec::new();
                let mut k = 0;
                while k < pt.len() {
                    let (v, next) = self.def_at(&pt, k)?;
                    params.push(v);
                    k = next + usize::from(matches!(pt.get(next), Some(Tok::Punct(','))));
                }
                let cond = self.block()?;
                if self.next()? != "} body {" {
                    return self.err("expected `} body {`");
                }
                let body = self.block()?;
                self.close()?;
                Op::Loop { init, params, cond, body, test_first, tiled }
            }
            "with" | "with{" => {
                let first_match = rest.contains("first_match");
                let mut parts: Vec<Part> = Vec::new();
                loop {
                    let line = self.next()?;
                    if let Some(ops_text) = line.strip_prefix("} ") {
                        let (ops, cells, reuse) = self.with_ops(ops_text)?;
                        for p in &mut parts {
                            p.result_spans = vec![self.span; ops.len()];
                        }
                        return Ok(Op::With(Box::new(With { parts, ops, first_match, cells, reuse })));
                    }
                    let Some(p) = line.strip_prefix("part ") else { return self.err("expected `part` or `}`") };
                    parts.push(self.part(p)?);
                }
            }
            other => return self.err(format!("unknown operation `{other}`")),
        })
    }

    fn close(&mut self) -> PResult<()> {
        if self.next()? != "}" {
            return self.err("expected `}`");
        }
        Ok(())
    }

    fn code_message(&self, toks: &[Tok]) -> PResult<(crate::diagnostics::Code, String)> {
        let code = toks.iter().find_map(|t| match t {
            Tok::Word(w) => crate::diagnostics::ALL_CODES.iter().find(|c| c.id == w).copied(),
            _ => None,
        });
        let msg = toks.iter().find_map(|t| if let Tok::Str(s) = t { Some(s.clone()) } else { None });
        match (code, msg) {
            (Some(c), Some(m)) => Ok((c, unquote(&m))),
            _ => self.err("expected an error code and a quoted message"),
        }
    }

    fn part(&mut self, text: &str) -> PResult<Part> {
        let toks = tokenize(text.trim_end_matches('{'));
        let mut p = Part {
            lower: ValueId(0),
            upper: ValueId(0),
            step: None,
            width: None,
            index: None,
            scalars: None,
            offset: None,
            body: Block::default(),
            span: self.span,
            result_spans: Vec::new(),
        };
        let mut k = 0;
        while k < toks.len() {
            let Tok::Word(w) = &toks[k] else {
                k += 1;
                continue;
            };
            let value_after = |k: usize| match toks.get(k + 1) {
                Some(Tok::Val(n, _)) => Some(ValueId(*n)),
                _ => None,
            };
            match w.as_str() {
                "lower" => p.lower = value_after(k).unwrap_or(ValueId(0)),
                "upper" => p.upper = value_after(k).unwrap_or(ValueId(0)),
                "step" => p.step = value_after(k),
                "width" => p.width = value_after(k),
                "index" => {
                    let (v, next) = self.def_at(&toks, k + 1)?;
                    p.index = Some(v);
                    k = next;
                    continue;
                }
                "offset" => {
                    let (v, next) = self.def_at(&toks, k + 1)?;
                    p.offset = Some(v);
                    k = next;
                    continue;
                }
                "scalars" => {
                    let mut j = k + 2;
                    let mut ss = Vec::new();
                    while let Some(Tok::Val(..)) = toks.get(j) {
                        let (v, next) = self.def_at(&toks, j)?;
                        ss.push(v);
                        j = next + usize::from(matches!(toks.get(next), Some(Tok::Punct(','))));
                    }
                    p.scalars = Some(ss);
                    k = j;
                    continue;
                }
                _ => {}
            }
            k += 1;
        }
        p.body = self.block()?;
        self.close()?;
        Ok(p)
    }

    #[allow(clippy::type_complexity)]
    fn with_ops(&mut self, text: &str) -> PResult<(Vec<WithOp>, Vec<Option<Ty>>, Vec<Option<ValueId>>)> {
        // Split at top-level commas.
        let mut items = Vec::new();
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in text.char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&text[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&text[start..]);
        let (mut ops, mut cells, mut reuse) = (Vec::new(), Vec::new(), Vec::new());
        for item in items {
            let item = item.trim();
            let (call, tail) = match item.rfind(')') {
                Some(i) => (&item[..=i], &item[i + 1..]),
                None => (item, ""),
            };
            let tail_toks = tokenize(tail);
            let cell = tail_toks.iter().position(|t| *t == Tok::Word("cell".into())).and_then(|k| {
                match tail_toks.get(k + 1) {
                    Some(Tok::Word(w)) => parse_type(w),
                    _ => None,
                }
            });
            let re = tail_toks.iter().position(|t| *t == Tok::Word("reuse".into())).and_then(|k| {
                match tail_toks.get(k + 1) {
                    Some(Tok::Val(n, _)) => Some(ValueId(*n)),
                    _ => None,
                }
            });
            cells.push(cell);
            reuse.push(re);
            let name = call.split('(').next().unwrap_or("").trim();
            let inner = call.split_once('(').map(|x| x.1).and_then(|s| s.strip_suffix(')')).unwrap_or("");
            let vs = self.vals(&tokenize(inner));
            ops.push(match name {
                "genarray" => WithOp::Genarray { shape: vs[0], default: vs.get(1).copied() },
                "modarray" => WithOp::Modarray { array: vs[0] },
                "filter" => WithOp::Filter { shape: vs[0] },
                "fold" | "foldfix" | "scan" => {
                    // A scan's first argument is its shape; the rest reads like a fold.
                    let (shape, inner) = if name == "scan" {
                        let (first, rest) = inner.split_once(',').unwrap_or((inner, ""));
                        (self.vals(&tokenize(first)).first().copied(), rest.trim_start())
                    } else {
                        (None, inner)
                    };
                    let vs = self.vals(&tokenize(inner));
                    // The function, with its partial arguments (whose list has commas).
                    let fun_end = match inner.find("partial(") {
                        Some(at) => inner[at..].find(')').map_or(inner.len(), |e| at + e + 1),
                        None => inner.find(',').unwrap_or(inner.len()),
                    };
                    let fun_text = inner[..fun_end].trim();
                    // `lane K of N call f`: one accumulator of a fold over tuples.
                    let (lane, call_text) = match fun_text.strip_prefix("lane ") {
                        Some(rest) => {
                            let words: Vec<&str> = rest.splitn(4, ' ').collect();
                            match (words.first().and_then(|k| k.parse().ok()), words.get(1), words.get(2)) {
                                (Some(k), Some(&"of"), Some(n)) => match n.parse::<usize>() {
                                    Ok(n) => (Some((k, n)), words.get(3).copied().unwrap_or("")),
                                    Err(_) => return self.err(format!("bad lane count `{n}`")),
                                },
                                _ => return self.err(format!("expected `lane K of N`, found `{fun_text}`")),
                            }
                        }
                        None => (None, fun_text),
                    };
                    let fun_name = call_text.split_whitespace().nth(1).unwrap_or("");
                    let fun = if call_text.starts_with("prim ") && lane.is_none() {
                        match prim_from_name(fun_name) {
                            Some(p) => FoldFn::Prim(p),
                            None => return self.err(format!("unknown primitive `{fun_name}`")),
                        }
                    } else {
                        match (self.funcs.get(fun_name), lane) {
                            (Some(f), None) => FoldFn::Call(*f),
                            (Some(f), Some((lane, lanes))) => FoldFn::Lane { func: *f, lane, lanes },
                            (None, _) => return self.err(format!("unknown function `{fun_name}`")),
                        }
                    };
                    let partial: Vec<ValueId> = match fun_text.split_once("partial(") {
                        Some((_, p)) => self.vals(&tokenize(p)),
                        None => Vec::new(),
                    };
                    let rest: Vec<ValueId> = vs[partial.len()..].to_vec();
                    let Some(&neutral) = rest.first() else { return self.err("missing neutral element") };
                    match (name, shape) {
                        ("scan", Some(shape)) => WithOp::Scan { shape, fun, partial, neutral },
                        ("scan", None) => return self.err("scan needs a shape"),
                        ("foldfix", _) => WithOp::Fold { fun, partial, neutral, fixpoint: rest.get(1).copied() },
                        _ => WithOp::Fold { fun, partial, neutral, fixpoint: None },
                    }
                }
                other => return self.err(format!("unknown with-loop operator `{other}`")),
            });
        }
        Ok((ops, cells, reuse))
    }
}

/// A shape pattern as SaC writes it (`[n,.]`, `[d:shp]`, `[]` for a scalar).
pub fn parse_shape_spec(text: &str) -> Option<crate::syntax::ast::ShapeSpec> {
    let mut d = crate::diagnostics::Diagnostics::new();
    let ty = format!("int{}", if text == "[]" { "" } else { text });
    let mut tokens = crate::syntax::lexer::lex(crate::span::FileId(0), &ty, &mut d);
    let end = Span::new(crate::span::FileId(0), ty.len(), ty.len());
    tokens.push(crate::syntax::token::Token {
        kind: crate::syntax::token::TokenKind::Eof,
        text: Default::default(),
        span: end,
        line_start: true,
        space_before: true,
    });
    let t = crate::syntax::parser::parse_type_expr(&tokens, &mut d)?;
    (!d.has_errors()).then_some(t.shape)
}

/// The text of a string written with `{:?}`.
fn unquote(quoted: &str) -> String {
    let body = quoted.strip_prefix('"').and_then(|m| m.strip_suffix('"')).unwrap_or(quoted);
    let bytes = crate::syntax::lexer::unescape(body).unwrap_or_else(|_| body.as_bytes().to_vec());
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Parses a module's text; every statement gets `span`.
pub fn parse_module(text: &str, span: Span) -> PResult<Module> {
    let lines: Vec<(usize, &str)> =
        text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim().is_empty()).collect();
    let mut funcs = HashMap::default();
    for (_, l) in &lines {
        if let Some(rest) = l.trim().strip_prefix("fn ") {
            let name = rest.split('(').next().unwrap_or("").to_string();
            let id = FuncId(funcs.len() as u32);
            funcs.insert(name, id);
        }
    }
    let mut p = Parser { lines, pos: 0, funcs, span, values: Vec::new() };
    let mut module = Module::default();
    while let Some(line) = p.peek() {
        if let Some(rest) = line.strip_prefix("entry ") {
            p.pos += 1;
            let (name, f) = rest.split_once(" = ").ok_or(ParseError { line: 0, message: "bad entry".into() })?;
            let Some(fid) = p.funcs.get(f.trim()).copied() else { return p.err(format!("unknown function `{f}`")) };
            module.entries.push((Name::new(name.trim()), fid));
            continue;
        }
        if let Some(rest) = line.strip_prefix("variant ") {
            p.pos += 1;
            let Some(fid) = p.funcs.get(rest.trim()).copied() else {
                return p.err(format!("unknown function `{rest}`"));
            };
            module.variants.push(fid);
            continue;
        }
        let Some(rest) = line.strip_prefix("fn ") else { return p.err(format!("expected `fn`, found `{line}`")) };
        p.pos += 1;
        p.values.clear();
        let name = rest.split('(').next().unwrap_or("").to_string();
        let params_text =
            rest.split_once('(').map(|x| x.1).and_then(|s| s.split_once(") ->")).map(|x| x.0).unwrap_or("");
        let pt = tokenize(params_text);
        let mut params = Vec::new();
        let mut k = 0;
        while k < pt.len() {
            let (v, next) = p.def_at(&pt, k)?;
            params.push(v);
            k = next + usize::from(matches!(pt.get(next), Some(Tok::Punct(','))));
        }
        let results_text = rest.split_once("-> (").and_then(|x| x.1.split_once(')')).map(|x| x.0).unwrap_or("");
        let results: Vec<Ty> =
            results_text.split(", ").filter(|s| !s.trim().is_empty()).filter_map(|s| parse_type(s.trim())).collect();
        let attrs = rest.rsplit_once('[').map(|x| x.1.trim_end_matches(']')).unwrap_or("");
        let mut attr_words = attrs.split(", ");
        let head = attr_words.next().unwrap_or("");
        let (kind_text, source_name) = head.split_once(' ').unwrap_or((head, ""));
        let kind = if kind_text == "wrapper" { FunctionKind::Wrapper } else { FunctionKind::Instance };
        let others: Vec<&str> = attr_words.collect();
        if p.next()? != "{" {
            return p.err("expected `{`");
        }
        let mut body = Block::default();
        loop {
            let line = p.peek().ok_or(ParseError { line: 0, message: "unterminated function".into() })?;
            if let Some(rest) = line.strip_prefix("return") {
                p.pos += 1;
                body.yields = p.vals(&tokenize(rest));
                break;
            }
            body.stmts.push(p.stmt()?);
        }
        p.close()?;
        let values: Vec<ValueData> = p
            .values
            .iter()
            .map(|v| {
                v.clone().unwrap_or(ValueData { ty: Ty::new(Elem::Base(BaseType::Int), Shape::AtLeast(0)), name: None })
            })
            .collect();
        module.functions.push(Function {
            name,
            source_name: Name::new(source_name),
            kind,
            params,
            results,
            body,
            values,
            inline: others.contains(&"inline"),
            noinline: others.contains(&"noinline"),
            cold: others.contains(&"cold"),
            library: others.contains(&"library"),
            specialises: others.iter().find_map(|w| w.strip_prefix("specialises ")).map(str::to_string),
            span,
        });
    }
    Ok(module)
}
