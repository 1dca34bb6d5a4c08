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
//! The runtime's own symbols ([`RUNTIME_SYMBOLS`]) are not for exports: a
//! function named like one (`inc`, `copy`, `ctx_free`) is exported with `_`
//! appended (`wl_inc_`), and so on until the name is free.

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

/// The C symbols the runtime (`withloop-rt`) defines: every object and
/// shared library links them, so an export may not take one (the runtime's
/// test `exports_avoid_every_runtime_symbol` keeps this list whole).
pub const RUNTIME_SYMBOLS: &[&str] = &[
    "wl_abi_array_in",
    "wl_abi_array_out",
    "wl_alloc",
    "wl_alloc_frame",
    "wl_array_release",
    "wl_box",
    "wl_check_reshape",
    "wl_copy",
    "wl_copy_outside",
    "wl_ctx_clear",
    "wl_ctx_free",
    "wl_ctx_new",
    "wl_ctx_set_parallel_min",
    "wl_ctx_set_stream_min",
    "wl_ctx_set_threads",
    "wl_dec",
    "wl_error_code",
    "wl_error_location",
    "wl_error_message",
    "wl_fail",
    "wl_fail_depth",
    "wl_fail_index",
    "wl_fail_ints",
    "wl_fail_shapes",
    "wl_fail_stack",
    "wl_fail_type",
    "wl_fail_args",
    "wl_fail_vectors",
    "wl_fill",
    "wl_fill_uncovered",
    "wl_gemm_f64",
    "wl_identical",
    "wl_inc",
    "wl_math_f32",
    "wl_math_f64",
    "wl_parallel_chunks",
    "wl_parallel_for",
    "wl_pattern",
    "wl_prim",
    "wl_refcount",
    "wl_report",
    "wl_reshape",
    "wl_reusable",
    "wl_shape_vector",
    "wl_shapes_differ",
    "wl_stack",
    "wl_stack_frame",
    "wl_take_cells",
    "wl_time_tiled",
    "wl_unique",
    "wl_unwrap",
    "wl_wrap",
    "wl_write_cell",
];

/// The C symbol for IR function link name `link_name`: `wl_` and the name with
/// characters C does not allow replaced by `_`.
pub fn c_symbol(link_name: &str) -> String {
    let s: String = link_name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("wl_{s}")
}

/// Every function compiled code exports, entries first, in module order.
pub fn exports(module: &Module) -> Vec<Export> {
    let entry_symbol = |name: &str, f: FuncId| {
        let link = &module.function(f).name;
        let unique = module.entries.iter().filter(|(n, _)| n == name).count() == 1;
        if unique { c_symbol(link.split("__wrapper").next().unwrap_or(link)) } else { c_symbol(link) }
    };
    let natural: Vec<(String, FuncId, ExportKind)> = module
        .entries
        .iter()
        .map(|(name, f)| (entry_symbol(name, *f), *f, ExportKind::Entry))
        .chain(module.variants.iter().map(|f| (c_symbol(&module.function(*f).name), *f, ExportKind::Variant)))
        .collect();
    // A renamed export avoids every other export's own name too.
    let wanted: HashSet<&str> = natural.iter().map(|(s, _, _)| s.as_str()).collect();
    let mut out = Vec::new();
    let mut taken = HashSet::default();
    for (symbol, func, kind) in &natural {
        let mut symbol = symbol.clone();
        if RUNTIME_SYMBOLS.contains(&symbol.as_str()) {
            while RUNTIME_SYMBOLS.contains(&symbol.as_str())
                || wanted.contains(symbol.as_str())
                || taken.contains(&symbol)
            {
                symbol.push('_');
            }
        }
        if taken.insert(symbol.clone()) {
            out.push(Export { symbol, func: *func, kind: *kind });
        }
    }
    out
}
