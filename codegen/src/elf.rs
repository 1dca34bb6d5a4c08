//! One relocatable ELF object from several: what `ld -r` does for the parts
//! of a module compiled on threads of their own, done in process (spawning
//! the linker, with its temporary files, took longer than a small part's
//! code generation).
//!
//! Every input section is kept whole, as a section of its own (ELF allows
//! several sections of one name; the final link gathers them as it gathers
//! the sections of several objects), so offsets and relocation addends stay
//! as they are. Only symbols are merged: local symbols are copied per input,
//! global ones are unified by name (a hidden function defined by one part
//! and called from another becomes one defined symbol), and relocations are
//! renumbered to the merged symbol table.
//!
//! ```text
//! part0.o: .text .rela.text .rodata  symbols: wl.f.p12 (hidden, defined), wl_g (undefined)
//! part1.o: .text .rela.text          symbols: wl.f.p12 (hidden, undefined), wl_g (defined)
//!   → .text .rela.text .rodata .text .rela.text  symbols: wl.f.p12 (hidden, defined), wl_g (defined)
//! ```
//!
//! Limits: 64-bit little-endian `ET_REL` objects of one machine, as LLVM
//! writes them for x86-64 and AArch64 Linux: `RELA` relocations, no section
//! groups (COMDAT), no common symbols, no extended section numbering. Any
//! other input is refused with the reason, and the caller falls back to the
//! system linker.

use std::collections::HashMap;

const EHDR_SIZE: usize = 64;
const SHDR_SIZE: usize = 64;
const SYM_SIZE: usize = 24;
const RELA_SIZE: usize = 24;

const ET_REL: u16 = 1;
const SHT_NULL: u32 = 0;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_RELA: u32 = 4;
const SHT_NOBITS: u32 = 8;
const SHT_REL: u32 = 9;
const SHT_GROUP: u32 = 17;
const SHT_SYMTAB_SHNDX: u32 = 18;
/// Address-significance tables index the symbol table; a merged object
/// without one only loses identical-code folding in the final link.
const SHT_LLVM_ADDRSIG: u32 = 0x6fff_4c03;
const SHF_INFO_LINK: u64 = 0x40;
const SHF_LINK_ORDER: u64 = 0x80;
const SHF_GROUP: u64 = 0x200;

const SHN_UNDEF: u16 = 0;
const SHN_LORESERVE: u16 = 0xff00;
const SHN_COMMON: u16 = 0xfff2;
const SHN_XINDEX: u16 = 0xffff;

const STB_LOCAL: u8 = 0;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;

/// The merged object, or why these inputs cannot be merged here.
pub fn merge(objects: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let inputs: Vec<Input> = objects
        .iter()
        .enumerate()
        .map(|(k, o)| Input::parse(o).map_err(|e| format!("part {k}: {e}")))
        .collect::<Result<_, _>>()?;
    let first = inputs.first().ok_or("no objects to merge")?;
    if let Some(k) = inputs.iter().position(|i| i.machine != first.machine || i.flags != first.flags) {
        return Err(format!("part {k} is for another machine than part 0"));
    }

    let mut out = Output::default();
    // Sections, kept whole; one `.note.GNU-stack` (it says the stack need
    // not be executable, the same in every part).
    let mut section_map: Vec<Vec<Option<u32>>> = Vec::with_capacity(inputs.len());
    let mut stack_note: Option<u32> = None;
    for input in &inputs {
        let mut map = vec![None; input.sections.len()];
        for (k, s) in input.sections.iter().enumerate() {
            if matches!(s.kind, SHT_NULL | SHT_SYMTAB | SHT_STRTAB | SHT_RELA | SHT_LLVM_ADDRSIG) {
                continue;
            }
            if matches!(s.kind, SHT_REL | SHT_GROUP | SHT_SYMTAB_SHNDX) || s.flags & SHF_GROUP != 0 {
                return Err(format!("section `{}` (type {:#x}) is not supported", s.name, s.kind));
            }
            if s.link != 0 && s.flags & SHF_LINK_ORDER == 0 {
                return Err(format!("section `{}` links to another section", s.name));
            }
            if s.name == ".note.GNU-stack"
                && let Some(kept) = stack_note
            {
                map[k] = Some(kept);
                continue;
            }
            let index = out.sections.len() as u32 + 1;
            out.sections.push(OutSection {
                name: s.name.clone(),
                kind: s.kind,
                flags: s.flags,
                link: 0,
                info: s.info,
                align: s.align,
                entsize: s.entsize,
                data: if s.kind == SHT_NOBITS {
                    Data::Zeroes(s.size)
                } else {
                    Data::Bytes(input.section_bytes(s)?.to_vec())
                },
            });
            if s.name == ".note.GNU-stack" {
                stack_note = Some(index);
            }
            map[k] = Some(index);
        }
        section_map.push(map);
    }
    // Link-order sections name their section in the merged numbering.
    for (input, map) in inputs.iter().zip(&section_map) {
        for (k, s) in input.sections.iter().enumerate() {
            if let (Some(index), true) = (map[k], s.flags & SHF_LINK_ORDER != 0) {
                let target = map
                    .get(s.link as usize)
                    .copied()
                    .flatten()
                    .ok_or_else(|| format!("section `{}` links to a dropped section", s.name))?;
                out.sections[index as usize - 1].link = target;
            }
        }
    }

    // Symbols: locals per input, in order; globals unified by name.
    let mut locals: Vec<Symbol> = Vec::new();
    let mut globals: Vec<Symbol> = Vec::new();
    let mut global_index: HashMap<&str, usize> = HashMap::new();
    // Per input, per symbol: its merged index (locals first, so global
    // indices are fixed up after all locals are known).
    let mut symbol_map: Vec<Vec<Option<SymbolRef>>> = Vec::with_capacity(inputs.len());
    for (input, map) in inputs.iter().zip(&section_map) {
        let mut syms = vec![None; input.symbols.len()];
        for (k, sym) in input.symbols.iter().enumerate().skip(1) {
            let shndx = match sym.shndx {
                SHN_UNDEF => SHN_UNDEF,
                SHN_COMMON => return Err(format!("common symbol `{}`", sym.name)),
                SHN_XINDEX => return Err("extended section indices".to_string()),
                s if s >= SHN_LORESERVE => s,
                s => match map.get(s as usize).copied().flatten() {
                    // Below `SHN_LORESERVE`, as checked once the count is known.
                    Some(index) => index as u16,
                    // A symbol in a dropped section (an address-significance
                    // table has none): relocations must not name it.
                    None => continue,
                },
            };
            let merged = Symbol {
                name: sym.name.clone(),
                info: sym.info,
                other: sym.other,
                shndx,
                value: sym.value,
                size: sym.size,
            };
            if sym.info >> 4 == STB_LOCAL {
                locals.push(merged);
                syms[k] = Some(SymbolRef::Local(locals.len()));
                continue;
            }
            let index = match global_index.get(sym.name.as_str()) {
                Some(&g) => {
                    unify(&mut globals[g], &merged)?;
                    g
                }
                None => {
                    globals.push(merged);
                    global_index.insert(sym.name.as_str(), globals.len() - 1);
                    globals.len() - 1
                }
            };
            syms[k] = Some(SymbolRef::Global(index));
        }
        symbol_map.push(syms);
    }
    // Relocations, renumbered; one section per relocated section. They
    // link to the symbol table, which follows them.
    struct Relocations {
        name: String,
        flags: u64,
        target: u32,
        entries: Vec<(u64, Option<SymbolRef>, u64, [u8; 8])>,
    }
    let mut relocations = Vec::new();
    for ((input, map), syms) in inputs.iter().zip(&section_map).zip(&symbol_map) {
        for s in input.sections.iter().filter(|s| s.kind == SHT_RELA) {
            let Some(target) = map.get(s.info as usize).copied().flatten() else { continue };
            if s.entsize as usize != RELA_SIZE {
                return Err(format!("relocation section `{}` has entries of {} bytes", s.name, s.entsize));
            }
            let mut entries = Vec::new();
            for entry in input.section_bytes(s)?.chunks_exact(RELA_SIZE) {
                let info = u64_at(entry, 8);
                let (symbol, kind) = ((info >> 32) as usize, info & 0xffff_ffff);
                let merged =
                    if symbol == 0 {
                        None
                    } else {
                        Some(syms.get(symbol).copied().flatten().ok_or_else(|| {
                            format!("a relocation in `{}` names a symbol of a dropped section", s.name)
                        })?)
                    };
                entries.push((u64_at(entry, 0), merged, kind, entry[16..24].try_into().expect("8 bytes")));
            }
            relocations.push(Relocations { name: s.name.clone(), flags: s.flags, target, entries });
        }
    }
    // Undefined globals nothing refers to are left out, as `ld -r` leaves
    // them: a part declares every function another part defines, and a
    // declaration of an internal function of another part (one the optimiser
    // would have deleted, kept in an unoptimised part) must not reach the
    // final link, which refuses an undefined hidden symbol.
    let mut referenced = vec![false; globals.len()];
    for r in &relocations {
        for (_, sym, _, _) in &r.entries {
            if let Some(SymbolRef::Global(g)) = sym {
                referenced[*g] = true;
            }
        }
    }
    let mut global_number = vec![0u32; globals.len()];
    let mut kept_globals = Vec::with_capacity(globals.len());
    for (g, sym) in globals.iter().enumerate() {
        if sym.shndx != SHN_UNDEF || referenced[g] {
            global_number[g] = (locals.len() + 1 + kept_globals.len()) as u32;
            kept_globals.push(sym);
        }
    }
    let first_global = locals.len() + 1;
    let symtab_index = (out.sections.len() + relocations.len() + 1) as u32;
    // Section indices from `SHN_LORESERVE` up mean something else, and the
    // header counts sections in 16 bits (symbol table, its strings and the
    // section names follow the relocations).
    if symtab_index as usize + 3 > SHN_LORESERVE as usize {
        return Err(format!("{} sections are too many without extended numbering", symtab_index + 3));
    }
    for r in relocations {
        let mut data = Vec::with_capacity(r.entries.len() * RELA_SIZE);
        for (offset, sym, kind, addend) in r.entries {
            let number = match sym {
                None => 0,
                Some(SymbolRef::Local(k)) => k as u32,
                Some(SymbolRef::Global(g)) => global_number[g],
            };
            data.extend_from_slice(&offset.to_le_bytes());
            data.extend_from_slice(&((u64::from(number) << 32) | kind).to_le_bytes());
            data.extend_from_slice(&addend);
        }
        out.sections.push(OutSection {
            name: r.name,
            kind: SHT_RELA,
            flags: r.flags | SHF_INFO_LINK,
            link: symtab_index,
            info: r.target,
            align: 8,
            entsize: RELA_SIZE as u64,
            data: Data::Bytes(data),
        });
    }

    // The symbol table and its strings.
    let mut strings = StringTable::default();
    let mut symtab = vec![0u8; SYM_SIZE];
    for sym in locals.iter().chain(kept_globals) {
        let name = strings.add(&sym.name);
        symtab.extend_from_slice(&name.to_le_bytes());
        symtab.push(sym.info);
        symtab.push(sym.other);
        symtab.extend_from_slice(&sym.shndx.to_le_bytes());
        symtab.extend_from_slice(&sym.value.to_le_bytes());
        symtab.extend_from_slice(&sym.size.to_le_bytes());
    }
    out.sections.push(OutSection {
        name: ".symtab".into(),
        kind: SHT_SYMTAB,
        flags: 0,
        link: symtab_index + 1,
        info: first_global as u32,
        align: 8,
        entsize: SYM_SIZE as u64,
        data: Data::Bytes(symtab),
    });
    out.sections.push(OutSection::strings(".strtab", strings.bytes));
    Ok(out.write(first))
}

/// A global symbol met again in another part: one definition, the most
/// constraining visibility, and a strong binding over a weak one.
fn unify(kept: &mut Symbol, other: &Symbol) -> Result<(), String> {
    let binding = |s: &Symbol| s.info >> 4;
    let defined = |s: &Symbol| s.shndx != SHN_UNDEF;
    let visibility = match (kept.other & 3, other.other & 3) {
        (0, v) | (v, 0) => v,
        (a, b) => a.min(b),
    };
    match (defined(kept), defined(other)) {
        (true, true) if binding(kept) == STB_GLOBAL && binding(other) == STB_GLOBAL => {
            return Err(format!("`{}` is defined in two parts", kept.name));
        }
        (true, true) if binding(kept) == STB_WEAK && binding(other) == STB_GLOBAL => *kept = other.clone(),
        (false, true) => *kept = other.clone(),
        (false, false) if binding(other) == STB_GLOBAL => kept.info = (STB_GLOBAL << 4) | (kept.info & 0xf),
        _ => {}
    }
    kept.other = (kept.other & !3) | visibility;
    Ok(())
}

#[derive(Clone, Copy)]
enum SymbolRef {
    /// Index in the merged table (locals start at 1).
    Local(usize),
    /// Index among the globals.
    Global(usize),
}

#[derive(Clone)]
struct Symbol {
    name: String,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

struct Section {
    name: String,
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    align: u64,
    entsize: u64,
}

/// One input object, read.
struct Input<'a> {
    bytes: &'a [u8],
    machine: u16,
    flags: u32,
    ident: [u8; 16],
    sections: Vec<Section>,
    symbols: Vec<Symbol>,
}

impl<'a> Input<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Input<'a>, String> {
        if bytes.len() < EHDR_SIZE || &bytes[..4] != b"\x7fELF" {
            return Err("not an ELF object".into());
        }
        if bytes[4] != 2 || bytes[5] != 1 {
            return Err("not a 64-bit little-endian object".into());
        }
        if u16_at(bytes, 16) != ET_REL {
            return Err("not a relocatable object".into());
        }
        let machine = u16_at(bytes, 18);
        let flags = u32_at(bytes, 48);
        let shoff = u64_at(bytes, 40) as usize;
        let shentsize = u16_at(bytes, 58) as usize;
        let shnum = u16_at(bytes, 60) as usize;
        let shstrndx = u16_at(bytes, 62) as usize;
        if shentsize != SHDR_SIZE || shnum == 0 || shstrndx == SHN_XINDEX as usize || shstrndx >= shnum {
            return Err("unsupported section header table".into());
        }
        let table = shoff
            .checked_add(shnum * SHDR_SIZE)
            .and_then(|end| bytes.get(shoff..end))
            .ok_or("section headers out of bounds")?;
        let mut sections: Vec<Section> = table
            .chunks_exact(SHDR_SIZE)
            .map(|h| Section {
                name: String::new(),
                kind: u32_at(h, 4),
                flags: u64_at(h, 8),
                offset: u64_at(h, 24),
                size: u64_at(h, 32),
                link: u32_at(h, 40),
                info: u32_at(h, 44),
                align: u64_at(h, 48),
                entsize: u64_at(h, 56),
            })
            .collect();
        let name_offsets: Vec<u32> = table.chunks_exact(SHDR_SIZE).map(|h| u32_at(h, 0)).collect();
        let mut input = Input {
            bytes,
            machine,
            flags,
            ident: bytes[..16].try_into().expect("16 bytes"),
            sections: Vec::new(),
            symbols: Vec::new(),
        };
        let names = input.section_bytes(&sections[shstrndx])?.to_vec();
        for (s, offset) in sections.iter_mut().zip(name_offsets) {
            s.name = c_string(&names, offset as usize)?;
        }
        let symtabs: Vec<usize> = (0..sections.len()).filter(|k| sections[*k].kind == SHT_SYMTAB).collect();
        if let [k] = symtabs[..] {
            let symtab = &sections[k];
            let strings =
                input.section_bytes(sections.get(symtab.link as usize).ok_or("symbol table without strings")?)?;
            let entries = input.section_bytes(symtab)?;
            input.symbols = entries
                .chunks_exact(SYM_SIZE)
                .map(|e| {
                    Ok(Symbol {
                        name: c_string(strings, u32_at(e, 0) as usize)?,
                        info: e[4],
                        other: e[5],
                        shndx: u16_at(e, 6),
                        value: u64_at(e, 8),
                        size: u64_at(e, 16),
                    })
                })
                .collect::<Result<_, String>>()?;
        } else if symtabs.len() > 1 {
            return Err("several symbol tables".into());
        }
        input.sections = sections;
        Ok(input)
    }

    fn section_bytes(&self, s: &Section) -> Result<&'a [u8], String> {
        if s.kind == SHT_NOBITS {
            return Ok(&[]);
        }
        let start = s.offset as usize;
        start
            .checked_add(s.size as usize)
            .and_then(|end| self.bytes.get(start..end))
            .ok_or_else(|| format!("section `{}` out of bounds", s.name))
    }
}

enum Data {
    Bytes(Vec<u8>),
    /// `SHT_NOBITS`: this many zero bytes at load time, none in the file.
    Zeroes(u64),
}

struct OutSection {
    name: String,
    kind: u32,
    flags: u64,
    link: u32,
    info: u32,
    align: u64,
    entsize: u64,
    data: Data,
}

impl OutSection {
    /// A string table named `name`.
    fn strings(name: &str, bytes: Vec<u8>) -> OutSection {
        OutSection {
            name: name.into(),
            kind: SHT_STRTAB,
            flags: 0,
            link: 0,
            info: 0,
            align: 1,
            entsize: 0,
            data: Data::Bytes(bytes),
        }
    }
}

#[derive(Default)]
struct Output {
    /// Sections after the null section (index 1 on).
    sections: Vec<OutSection>,
}

impl Output {
    /// The object: header, section contents, section names, headers.
    fn write(mut self, first: &Input) -> Vec<u8> {
        let mut names = StringTable::default();
        let name_offsets: Vec<u32> = self.sections.iter().map(|s| names.add(&s.name)).collect();
        let shstrtab_name = names.add(".shstrtab");
        let shstrtab_index = self.sections.len() as u32 + 1;
        let shstrtab_data = std::mem::take(&mut names.bytes);
        self.sections.push(OutSection::strings(".shstrtab", shstrtab_data));
        let mut file = vec![0u8; EHDR_SIZE];
        let mut placed = Vec::with_capacity(self.sections.len());
        for s in &self.sections {
            let align = s.align.max(1) as usize;
            let offset = file.len().div_ceil(align) * align;
            file.resize(offset, 0);
            let size = match &s.data {
                Data::Bytes(b) => {
                    file.extend_from_slice(b);
                    b.len() as u64
                }
                Data::Zeroes(n) => *n,
            };
            placed.push((offset as u64, size));
        }
        let shoff = file.len().div_ceil(8) * 8;
        file.resize(shoff, 0);
        file.extend_from_slice(&[0u8; SHDR_SIZE]);
        for (k, (s, (offset, size))) in self.sections.iter().zip(placed).enumerate() {
            let name = if k + 1 == shstrtab_index as usize { shstrtab_name } else { name_offsets[k] };
            file.extend_from_slice(&name.to_le_bytes());
            file.extend_from_slice(&s.kind.to_le_bytes());
            file.extend_from_slice(&s.flags.to_le_bytes());
            file.extend_from_slice(&0u64.to_le_bytes());
            file.extend_from_slice(&offset.to_le_bytes());
            file.extend_from_slice(&size.to_le_bytes());
            file.extend_from_slice(&s.link.to_le_bytes());
            file.extend_from_slice(&s.info.to_le_bytes());
            file.extend_from_slice(&s.align.to_le_bytes());
            file.extend_from_slice(&s.entsize.to_le_bytes());
        }
        let shnum = self.sections.len() as u16 + 1;
        let header = &mut file[..EHDR_SIZE];
        header[..16].copy_from_slice(&first.ident);
        header[16..18].copy_from_slice(&ET_REL.to_le_bytes());
        header[18..20].copy_from_slice(&first.machine.to_le_bytes());
        header[20..24].copy_from_slice(&1u32.to_le_bytes());
        header[40..48].copy_from_slice(&(shoff as u64).to_le_bytes());
        header[48..52].copy_from_slice(&first.flags.to_le_bytes());
        header[52..54].copy_from_slice(&(EHDR_SIZE as u16).to_le_bytes());
        header[58..60].copy_from_slice(&(SHDR_SIZE as u16).to_le_bytes());
        header[60..62].copy_from_slice(&shnum.to_le_bytes());
        header[62..64].copy_from_slice(&(shstrtab_index as u16).to_le_bytes());
        file
    }
}

/// An ELF string table: NUL-terminated names, each stored once.
struct StringTable {
    bytes: Vec<u8>,
    offsets: HashMap<String, u32>,
}

impl Default for StringTable {
    fn default() -> Self {
        StringTable { bytes: vec![0], offsets: HashMap::new() }
    }
}

impl StringTable {
    fn add(&mut self, name: &str) -> u32 {
        if name.is_empty() {
            return 0;
        }
        if let Some(&k) = self.offsets.get(name) {
            return k;
        }
        let k = self.bytes.len() as u32;
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.offsets.insert(name.to_string(), k);
        k
    }
}

fn c_string(table: &[u8], offset: usize) -> Result<String, String> {
    let rest = table.get(offset..).ok_or("a name out of its string table")?;
    let end = rest.iter().position(|b| *b == 0).ok_or("an unterminated name")?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use inkwell::GlobalVisibility;
    use inkwell::context::Context;
    use inkwell::module::{Linkage, Module};
    use inkwell::targets::FileType;

    use super::*;

    /// The object LLVM writes for the module `build` fills in.
    fn object(build: impl for<'c> FnOnce(&'c Context, &Module<'c>)) -> Vec<u8> {
        let ctx = Context::create();
        let module = ctx.create_module("part");
        build(&ctx, &module);
        let options = crate::Options { opt_level: 0, ..Default::default() };
        let tm = crate::target_machine(crate::host_spec(), &options).expect("a target machine for the host");
        tm.write_to_memory_buffer(&module, FileType::Object).expect("an object").as_slice().to_vec()
    }

    /// Part 0 defines hidden `twice`; part 1 calls it from exported `quad`
    /// and declares hidden `unused`, which nothing calls (as an unoptimised
    /// part declares functions of other parts).
    fn parts() -> Vec<Vec<u8>> {
        let part0 = object(|ctx, m| {
            let i64t = ctx.i64_type();
            let f = m.add_function("twice", i64t.fn_type(&[i64t.into()], false), Some(Linkage::External));
            f.as_global_value().set_visibility(GlobalVisibility::Hidden);
            let b = ctx.create_builder();
            b.position_at_end(ctx.append_basic_block(f, "entry"));
            let x = f.get_nth_param(0).expect("a parameter").into_int_value();
            b.build_return(Some(&b.build_int_add(x, x, "y").expect("add"))).expect("ret");
        });
        let part1 = object(|ctx, m| {
            let i64t = ctx.i64_type();
            let ty = i64t.fn_type(&[i64t.into()], false);
            let twice = m.add_function("twice", ty, Some(Linkage::External));
            twice.as_global_value().set_visibility(GlobalVisibility::Hidden);
            let unused = m.add_function("unused", ty, Some(Linkage::External));
            unused.as_global_value().set_visibility(GlobalVisibility::Hidden);
            let quad = m.add_function("quad", ty, Some(Linkage::External));
            let b = ctx.create_builder();
            b.position_at_end(ctx.append_basic_block(quad, "entry"));
            let x = quad.get_nth_param(0).expect("a parameter");
            let y = b.build_call(twice, &[x.into()], "y").expect("call").try_as_basic_value().basic().expect("a value");
            let z = b.build_call(twice, &[y.into()], "z").expect("call").try_as_basic_value().basic().expect("a value");
            b.build_return(Some(&z)).expect("ret");
        });
        vec![part0, part1]
    }

    fn symbol<'s>(object: &'s Input, name: &str) -> Vec<&'s Symbol> {
        object.symbols.iter().filter(|s| s.name == name).collect()
    }

    #[test]
    fn globals_are_unified_and_unreferenced_declarations_left_out() {
        let parts = parts();
        let part1 = Input::parse(&parts[1]).expect("part 1 reads");
        assert_eq!(symbol(&part1, "unused").len(), 1, "LLVM writes the hidden declaration as an undefined symbol");
        let merged = merge(&parts).expect("the parts merge");
        let read = Input::parse(&merged).expect("the merged object reads back");
        let twice = symbol(&read, "twice");
        assert_eq!(twice.len(), 1, "one `twice`");
        assert_ne!(twice[0].shndx, SHN_UNDEF, "`twice` is defined");
        assert_eq!((twice[0].info >> 4, twice[0].other & 3), (STB_GLOBAL, 2), "global and hidden");
        assert_eq!(symbol(&read, "quad").len(), 1);
        assert!(symbol(&read, "unused").is_empty(), "an unreferenced declaration is left out");
        // Locals come first, and the symbol table says where globals start.
        let symtab = read.sections.iter().find(|s| s.kind == SHT_SYMTAB).expect("a symbol table");
        let first_global = read.symbols.iter().position(|s| s.info >> 4 != STB_LOCAL).expect("globals");
        assert_eq!(symtab.info as usize, first_global);
        // Every relocation names a symbol of the table, and `quad`'s calls name `twice`.
        let twice_index = read.symbols.iter().position(|s| s.name == "twice").expect("twice") as u64;
        let mut calls_twice = 0;
        for s in read.sections.iter().filter(|s| s.kind == SHT_RELA) {
            assert_eq!(read.sections[s.link as usize].kind, SHT_SYMTAB);
            for entry in read.section_bytes(s).expect("relocations").chunks_exact(RELA_SIZE) {
                let sym = u64_at(entry, 8) >> 32;
                assert!((sym as usize) < read.symbols.len());
                calls_twice += usize::from(sym == twice_index);
            }
        }
        assert_eq!(calls_twice, 2, "both calls in `quad` relocate against the merged `twice`");
        assert_eq!(merge(&self::parts()).expect("the parts merge"), merged, "the same parts, the same bytes");
    }

    #[test]
    fn the_merged_object_links_and_runs() {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let dir = std::env::temp_dir().join(format!("withloop-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        std::fs::write(dir.join("parts.o"), merge(&parts()).expect("the parts merge")).expect("write");
        std::fs::write(dir.join("main.c"), "long quad(long);\nint main(void) { return (int)quad(5); }\n")
            .expect("write");
        let built = std::process::Command::new(&cc)
            .arg("-o")
            .arg(dir.join("main"))
            .arg(dir.join("main.c"))
            .arg(dir.join("parts.o"))
            .output()
            .expect("the C compiler runs");
        assert!(built.status.success(), "linking failed: {}", String::from_utf8_lossy(&built.stderr));
        let ran = std::process::Command::new(dir.join("main")).status().expect("the program runs");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ran.code(), Some(20), "quad(5) through the merged object");
    }

    #[test]
    fn what_cannot_be_merged_is_refused_with_the_reason() {
        let mut parts = parts();
        assert_eq!(merge(&[b"not an object".to_vec()]).unwrap_err(), "part 0: not an ELF object");
        assert!(merge(&[]).is_err());
        let truncated = parts[0][..100].to_vec();
        assert_eq!(merge(&[truncated]).unwrap_err(), "part 0: section headers out of bounds");
        // The same definition in two parts.
        parts[1] = parts[0].clone();
        assert_eq!(merge(&parts).unwrap_err(), "`twice` is defined in two parts");
        // Another machine (the header's e_machine).
        let mut other = parts[0].clone();
        other[18] ^= 1;
        assert_eq!(merge(&[parts[0].clone(), other]).unwrap_err(), "part 1 is for another machine than part 0");
    }
}
