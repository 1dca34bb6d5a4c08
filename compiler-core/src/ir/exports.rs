//! The symbols compiled code exports through its C ABI, and how they are named.
//!
//! Every entry (one dispatch wrapper per source name and element-type
//! signature) and every specialised instance of a user function
//! ([`Module::variants`]) becomes one C function:
//!
//! | IR function                          | C symbol                 |
//! |--------------------------------------|--------------------------|
//! | entry wrapper `scale__wrapper_double_double` (the only entry `scale`) | `wl_scale` |
//! | entry wrappers of `f` for `int` and for `double` | `wl_f__wrapper_int`, `wl_f__wrapper_double` |
//! | instance `scale__d_3_3__d`           | `wl_scale__d_3_3__d`     |
//!
//! An instance's link name spells its signature: per parameter the element
//! type's letter (`d` double, `f` float, `i` int, `b` bool, `c` char, …) and the
//! shape, extents for known ones, `X` for `.`, `S` for `*` and `P` for `+`.
//! A variant whose symbol would equal an entry's (a function without
//! parameters: its entry calls exactly it) is exported only as the entry.

use crate::HashSet;

use super::{FuncId, Module};

/// Whether an export is a dispatch wrapper or one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportKind {
    /// Takes any argument its source type admits and picks the instance.
    Entry,
    /// One specialised (or generic) instance; takes only its own types.
    Variant,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    pub symbol: String,
    pub func: FuncId,
    pub kind: ExportKind,
}

/// The C symbol for IR function link name `link_name`: `wl_` and the name with
/// characters C does not allow replaced by `_`.
pub fn c_symbol(link_name: &str) -> String {
    let s: String = link_name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("wl_{s}")
}

/// Every function compiled code exports, entries first, in module order.
pub fn exports(module: &Module) -> Vec<Export> {
    let mut out = Vec::new();
    let mut taken = HashSet::default();
    for (name, f) in &module.entries {
        let link = &module.function(*f).name;
        let unique = module.entries.iter().filter(|(n, _)| n == name).count() == 1;
        let symbol = if unique { c_symbol(link.split("__wrapper").next().unwrap_or(link)) } else { c_symbol(link) };
        if taken.insert(symbol.clone()) {
            out.push(Export { symbol, func: *f, kind: ExportKind::Entry });
        }
    }
    for f in &module.variants {
        let symbol = c_symbol(&module.function(*f).name);
        if taken.insert(symbol.clone()) {
            out.push(Export { symbol, func: *f, kind: ExportKind::Variant });
        }
    }
    out
}
