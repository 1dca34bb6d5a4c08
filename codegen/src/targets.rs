//! Target names checked before LLVM sees them.
//!
//! LLVM takes any CPU and feature names when it creates a target machine,
//! warns about the ones it does not know on standard error, and goes on; some
//! combinations then end the process when the first function is compiled:
//!
//! ```text
//! --cpu bogus          (x86-64)  LLVM ERROR: 64-bit code requested on a subtarget that doesn't support it!  (abort)
//! --cpu pentium4       (x86-64)  the same (a CPU without 64-bit mode)
//! --features=-sse2     (x86-64)  segmentation fault
//! --features=-64bit    (x86-64)  abort
//! --cpu bogus          (riscv64) LLVM ERROR: RV64 target requires an RV64 CPU  (abort)
//! ```
//!
//! In the compile service that is every request in flight and the service
//! itself, for one bad option. The same holds for whole architectures: LLVM
//! aborts on our code for `amdgcn` and crashes for `bpfel`. So [`check`]
//! refuses GPU and other special-purpose architectures (`special_purpose`,
//! a compiler limitation) and, with a message that says what is known, a CPU
//! or feature name LLVM 19 does not list for the target (the lists below are
//! `llc-19 -mcpu=help` for x86 and AArch64; a test compares them with it), an
//! x86 CPU without 64-bit mode on an x86-64 triple, and the few features
//! x86-64 code cannot be compiled with or without (`-sse2`, `+soft-float`, …:
//! every feature was tried alone, on and off, and only these failed;
//! combinations were not tried; on AArch64 no feature alone ended the
//! process, `+reserve-x1`…`x7` are LLVM errors). For the other architectures
//! LLVM has (RISC-V, Arm, PowerPC, WebAssembly, …) only the CPU `generic` and
//! no feature list are taken: a limitation, said as such.

use crate::{CodegenError, TargetSpec};

/// Whether `spec` is a target whose names we know to be safe to hand to
/// LLVM (see the module documentation); the error says why not.
pub fn check(spec: &TargetSpec) -> Result<(), CodegenError> {
    let arch = spec.triple.split('-').next().unwrap_or_default();
    if special_purpose(arch) {
        // LLVM ends the process on what we emit for them (see `special_purpose`).
        return Err(CodegenError::Unsupported(format!("GPU and other special-purpose targets such as `{arch}`")));
    }
    let family = match arch {
        "x86_64" | "amd64" => Family::X86_64,
        "i386" | "i486" | "i586" | "i686" | "x86" => Family::X86,
        "aarch64" | "arm64" | "aarch64_be" => Family::AArch64,
        _ => Family::Other,
    };
    let x86_cpus = [X86_64_CPUS, X86_32_BIT_CPUS].concat();
    let (cpus, features): (&[&str], &[&str]) = match family {
        Family::X86_64 | Family::X86 => (&x86_cpus, X86_FEATURES),
        Family::AArch64 => (AARCH64_CPUS, AARCH64_FEATURES),
        Family::Other => (&["generic"], &[]),
    };
    let cpu = spec.cpu.as_str();
    if !cpus.contains(&cpu) {
        return Err(CodegenError::Target(match family {
            Family::Other => format!(
                "CPU `{cpu}`: for `{arch}` targets only the CPU `generic` is taken (CPU names are checked \
                 for x86 and AArch64 only)"
            ),
            _ => format!("`{cpu}` is not a CPU LLVM knows for `{arch}`{}", suggestion(cpu, cpus)),
        }));
    }
    if family == Family::X86_64 && X86_32_BIT_CPUS.contains(&cpu) {
        return Err(CodegenError::Target(format!(
            "`{cpu}` has no 64-bit mode: ask for an x86-64 CPU (e.g. `x86-64`, `x86-64-v3`) or an \
             `i686-…` target"
        )));
    }
    for item in spec.features.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let Some(name) = item.strip_prefix('+').or_else(|| item.strip_prefix('-')) else {
            return Err(CodegenError::Target(format!(
                "feature `{item}`: each feature is `+name` (on) or `-name` (off), as in `+avx2,-fma`"
            )));
        };
        if family == Family::Other {
            return Err(CodegenError::Target(format!(
                "feature `{item}`: for `{arch}` targets no feature list is taken (feature names are \
                 checked for x86 and AArch64 only)"
            )));
        }
        if !features.contains(&name) {
            return Err(CodegenError::Target(format!(
                "`{name}` is not a feature LLVM knows for `{arch}`{}",
                suggestion(name, features)
            )));
        }
        if family == Family::X86_64 && X86_64_REFUSED.contains(&item) {
            return Err(CodegenError::Target(format!(
                "feature `{item}`: x86-64 code for withloop cannot be generated {} `{name}`",
                if item.starts_with('-') { "without" } else { "with" }
            )));
        }
    }
    Ok(())
}

/// Architectures (a triple's first part) of LLVM 19 that we do not compile
/// for. Every other architecture LLVM 19 has (x86, AArch64, Arm/Thumb,
/// RISC-V, PowerPC, SystemZ, MIPS, LoongArch, SPARC, WebAssembly, Hexagon,
/// MSP430, Lanai, VE, M68k) compiled all of bench/kernels.sac at `-O3` to an
/// object; these did not: `amdgcn` and `r600` abort ("Cannot select" a
/// store to the stack), `bpfel`/`bpfeb` crash (segmentation fault), `avr`
/// runs out of registers, `nvptx`/`nvptx64` and `xcore` write no object
/// files, and `spirv` is no target of Debian's LLVM 19 (listed in case a
/// build has it). Names LLVM does not have get LLVM's own error.
fn special_purpose(arch: &str) -> bool {
    const REFUSED: &[&str] =
        &["amdgcn", "r600", "bpf", "bpfel", "bpfeb", "avr", "nvptx", "nvptx64", "xcore", "spirv", "spirv32", "spirv64"];
    REFUSED.contains(&arch)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    X86_64,
    X86,
    AArch64,
    Other,
}

/// `; did you mean `x`?` for the known name closest to `name` (by edit
/// distance, at most a third of its length), or nothing.
fn suggestion(name: &str, known: &[&str]) -> String {
    let best = known.iter().map(|k| (edit_distance(name, k), *k)).min();
    match best {
        Some((d, k)) if d > 0 && d <= name.len().div_ceil(3) => format!("; did you mean `{k}`?"),
        _ => String::new(),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// What x86-64 code generation cannot live with: every feature of
/// [`X86_FEATURES`] was turned on and off alone for all of
/// bench/kernels.sac at `-O3` (`opt-19` and `llc-19`), and these failed:
/// `-64bit`, `-64bit-mode` abort, `-sse2` and `+soft-float` crash, `-sse`
/// and `+16bit-mode` are errors (`+32bit-mode` refused with them).
const X86_64_REFUSED: &[&str] =
    &["-64bit", "-64bit-mode", "-sse", "-sse2", "+soft-float", "+16bit-mode", "+32bit-mode"];

/// The x86 CPUs with 64-bit mode (LLVM 19's list less [`X86_32_BIT_CPUS`]).
const X86_64_CPUS: &[&str] = &[
    "alderlake",
    "amdfam10",
    "arrowlake",
    "arrowlake-s",
    "arrowlake_s",
    "athlon-fx",
    "athlon64",
    "athlon64-sse3",
    "atom",
    "atom_sse4_2",
    "atom_sse4_2_movbe",
    "barcelona",
    "bdver1",
    "bdver2",
    "bdver3",
    "bdver4",
    "bonnell",
    "broadwell",
    "btver1",
    "btver2",
    "cannonlake",
    "cascadelake",
    "clearwaterforest",
    "cooperlake",
    "core-avx-i",
    "core-avx2",
    "core2",
    "core_2_duo_sse4_1",
    "core_2_duo_ssse3",
    "core_2nd_gen_avx",
    "core_3rd_gen_avx",
    "core_4th_gen_avx",
    "core_4th_gen_avx_tsx",
    "core_5th_gen_avx",
    "core_5th_gen_avx_tsx",
    "core_aes_pclmulqdq",
    "core_i7_sse4_2",
    "corei7",
    "corei7-avx",
    "emeraldrapids",
    "generic",
    "goldmont",
    "goldmont-plus",
    "goldmont_plus",
    "gracemont",
    "grandridge",
    "graniterapids",
    "graniterapids-d",
    "graniterapids_d",
    "haswell",
    "icelake-client",
    "icelake-server",
    "icelake_client",
    "icelake_server",
    "ivybridge",
    "k8",
    "k8-sse3",
    "knl",
    "knm",
    "lunarlake",
    "meteorlake",
    "mic_avx512",
    "nehalem",
    "nocona",
    "opteron",
    "opteron-sse3",
    "pantherlake",
    "penryn",
    "raptorlake",
    "rocketlake",
    "sandybridge",
    "sapphirerapids",
    "sierraforest",
    "silvermont",
    "skx",
    "skylake",
    "skylake-avx512",
    "skylake_avx512",
    "slm",
    "tigerlake",
    "tremont",
    "westmere",
    "x86-64",
    "x86-64-v2",
    "x86-64-v3",
    "x86-64-v4",
    "znver1",
    "znver2",
    "znver3",
    "znver4",
    "znver5",
];

/// The x86 CPUs without 64-bit mode: on an x86-64 triple LLVM aborts
/// ("64-bit code requested on a subtarget that doesn't support it").
const X86_32_BIT_CPUS: &[&str] = &[
    "athlon",
    "athlon-4",
    "athlon-mp",
    "athlon-tbird",
    "athlon-xp",
    "c3",
    "c3-2",
    "geode",
    "i386",
    "i486",
    "i586",
    "i686",
    "k6",
    "k6-2",
    "k6-3",
    "lakemont",
    "pentium",
    "pentium-m",
    "pentium-mmx",
    "pentium2",
    "pentium3",
    "pentium3m",
    "pentium4",
    "pentium4m",
    "pentium_4",
    "pentium_4_sse3",
    "pentium_ii",
    "pentium_iii",
    "pentium_iii_no_xmm_regs",
    "pentium_m",
    "pentium_mmx",
    "pentium_pro",
    "pentiumpro",
    "prescott",
    "winchip-c6",
    "winchip2",
    "yonah",
];

const X86_FEATURES: &[&str] = &[
    "16bit-mode",
    "32bit-mode",
    "64bit",
    "64bit-mode",
    "adx",
    "aes",
    "allow-light-256-bit",
    "amx-bf16",
    "amx-complex",
    "amx-fp16",
    "amx-int8",
    "amx-tile",
    "avx",
    "avx10.1-256",
    "avx10.1-512",
    "avx2",
    "avx512bf16",
    "avx512bitalg",
    "avx512bw",
    "avx512cd",
    "avx512dq",
    "avx512f",
    "avx512fp16",
    "avx512ifma",
    "avx512vbmi",
    "avx512vbmi2",
    "avx512vl",
    "avx512vnni",
    "avx512vp2intersect",
    "avx512vpopcntdq",
    "avxifma",
    "avxneconvert",
    "avxvnni",
    "avxvnniint16",
    "avxvnniint8",
    "bmi",
    "bmi2",
    "branch-hint",
    "branchfusion",
    "ccmp",
    "cf",
    "cldemote",
    "clflushopt",
    "clwb",
    "clzero",
    "cmov",
    "cmpccxadd",
    "crc32",
    "cx16",
    "cx8",
    "egpr",
    "enqcmd",
    "ermsb",
    "evex512",
    "f16c",
    "false-deps-getmant",
    "false-deps-lzcnt-tzcnt",
    "false-deps-mulc",
    "false-deps-mullq",
    "false-deps-perm",
    "false-deps-popcnt",
    "false-deps-range",
    "fast-11bytenop",
    "fast-15bytenop",
    "fast-7bytenop",
    "fast-bextr",
    "fast-dpwssd",
    "fast-gather",
    "fast-hops",
    "fast-imm16",
    "fast-lzcnt",
    "fast-movbe",
    "fast-scalar-fsqrt",
    "fast-scalar-shift-masks",
    "fast-shld-rotate",
    "fast-variable-crosslane-shuffle",
    "fast-variable-perlane-shuffle",
    "fast-vector-fsqrt",
    "fast-vector-shift-masks",
    "faster-shift-than-shuffle",
    "fma",
    "fma4",
    "fsgsbase",
    "fsrm",
    "fxsr",
    "gfni",
    "harden-sls-ijmp",
    "harden-sls-ret",
    "hreset",
    "idivl-to-divb",
    "idivq-to-divl",
    "inline-asm-use-gpr32",
    "invpcid",
    "kl",
    "lea-sp",
    "lea-uses-ag",
    "lvi-cfi",
    "lvi-load-hardening",
    "lwp",
    "lzcnt",
    "macrofusion",
    "mmx",
    "movbe",
    "movdir64b",
    "movdiri",
    "mwaitx",
    "ndd",
    "nf",
    "no-bypass-delay",
    "no-bypass-delay-blend",
    "no-bypass-delay-mov",
    "no-bypass-delay-shuffle",
    "nopl",
    "pad-short-functions",
    "pclmul",
    "pconfig",
    "pku",
    "popcnt",
    "ppx",
    "prefer-128-bit",
    "prefer-256-bit",
    "prefer-mask-registers",
    "prefer-movmsk-over-vtest",
    "prefer-no-gather",
    "prefer-no-scatter",
    "prefetchi",
    "prfchw",
    "ptwrite",
    "push2pop2",
    "raoint",
    "rdpid",
    "rdpru",
    "rdrnd",
    "rdseed",
    "retpoline",
    "retpoline-external-thunk",
    "retpoline-indirect-branches",
    "retpoline-indirect-calls",
    "rtm",
    "sahf",
    "sbb-dep-breaking",
    "serialize",
    "seses",
    "sgx",
    "sha",
    "sha512",
    "shstk",
    "slow-3ops-lea",
    "slow-incdec",
    "slow-lea",
    "slow-pmaddwd",
    "slow-pmulld",
    "slow-shld",
    "slow-two-mem-ops",
    "slow-unaligned-mem-16",
    "slow-unaligned-mem-32",
    "sm3",
    "sm4",
    "soft-float",
    "sse",
    "sse-unaligned-mem",
    "sse2",
    "sse3",
    "sse4.1",
    "sse4.2",
    "sse4a",
    "ssse3",
    "tagged-globals",
    "tbm",
    "tsxldtrk",
    "tuning-fast-imm-vector-shift",
    "uintr",
    "use-glm-div-sqrt-costs",
    "use-slm-arith-costs",
    "usermsr",
    "vaes",
    "vpclmulqdq",
    "vzeroupper",
    "waitpkg",
    "wbnoinvd",
    "widekl",
    "x87",
    "xop",
    "xsave",
    "xsavec",
    "xsaveopt",
    "xsaves",
    "zu",
];

const AARCH64_CPUS: &[&str] = &[
    "a64fx",
    "ampere1",
    "ampere1a",
    "ampere1b",
    "apple-a10",
    "apple-a11",
    "apple-a12",
    "apple-a13",
    "apple-a14",
    "apple-a15",
    "apple-a16",
    "apple-a17",
    "apple-a7",
    "apple-m4",
    "carmel",
    "cortex-a34",
    "cortex-a35",
    "cortex-a510",
    "cortex-a520",
    "cortex-a520ae",
    "cortex-a53",
    "cortex-a55",
    "cortex-a57",
    "cortex-a65",
    "cortex-a65ae",
    "cortex-a710",
    "cortex-a715",
    "cortex-a72",
    "cortex-a720",
    "cortex-a720ae",
    "cortex-a725",
    "cortex-a73",
    "cortex-a75",
    "cortex-a76",
    "cortex-a76ae",
    "cortex-a77",
    "cortex-a78",
    "cortex-a78ae",
    "cortex-a78c",
    "cortex-r82",
    "cortex-r82ae",
    "cortex-x1",
    "cortex-x1c",
    "cortex-x2",
    "cortex-x3",
    "cortex-x4",
    "cortex-x925",
    "exynos-m3",
    "exynos-m4",
    "exynos-m5",
    "falkor",
    "generic",
    "kryo",
    "neoverse-512tvb",
    "neoverse-e1",
    "neoverse-n1",
    "neoverse-n2",
    "neoverse-n3",
    "neoverse-v1",
    "neoverse-v2",
    "neoverse-v3",
    "neoverse-v3ae",
    "oryon-1",
    "saphira",
    "thunderx",
    "thunderx2t99",
    "thunderx3t110",
    "thunderxt81",
    "thunderxt83",
    "thunderxt88",
    "tsv110",
];

const AARCH64_FEATURES: &[&str] = &[
    "CONTEXTIDREL2",
    "a35",
    "a510",
    "a520",
    "a520ae",
    "a53",
    "a55",
    "a57",
    "a64fx",
    "a65",
    "a710",
    "a715",
    "a72",
    "a720",
    "a720ae",
    "a73",
    "a75",
    "a76",
    "a77",
    "a78",
    "a78ae",
    "a78c",
    "addr-lsl-slow-14",
    "aes",
    "aggressive-fma",
    "all",
    "alternate-sextload-cvt-f32-pattern",
    "altnzcv",
    "alu-lsl-fast",
    "am",
    "ampere1",
    "ampere1a",
    "ampere1b",
    "amvs",
    "apple-a10",
    "apple-a11",
    "apple-a12",
    "apple-a13",
    "apple-a14",
    "apple-a15",
    "apple-a16",
    "apple-a17",
    "apple-a7",
    "apple-a7-sysreg",
    "apple-m4",
    "arith-bcc-fusion",
    "arith-cbz-fusion",
    "ascend-store-address",
    "b16b16",
    "balance-fp-ops",
    "bf16",
    "brbe",
    "bti",
    "call-saved-x10",
    "call-saved-x11",
    "call-saved-x12",
    "call-saved-x13",
    "call-saved-x14",
    "call-saved-x15",
    "call-saved-x18",
    "call-saved-x8",
    "call-saved-x9",
    "carmel",
    "ccdp",
    "ccidx",
    "ccpp",
    "chk",
    "clrbhb",
    "cmp-bcc-fusion",
    "complxnum",
    "cortex-a725",
    "cortex-r82",
    "cortex-r82ae",
    "cortex-x1",
    "cortex-x2",
    "cortex-x3",
    "cortex-x4",
    "cortex-x925",
    "cpa",
    "crc",
    "crypto",
    "cssc",
    "d128",
    "disable-latency-sched-heuristic",
    "disable-ldp",
    "disable-stp",
    "dit",
    "dotprod",
    "ecv",
    "el2vmsa",
    "el3",
    "enable-select-opt",
    "ete",
    "exynos-cheap-as-move",
    "exynosm3",
    "exynosm4",
    "f32mm",
    "f64mm",
    "falkor",
    "faminmax",
    "fgt",
    "fix-cortex-a53-835769",
    "flagm",
    "fmv",
    "force-32bit-jump-tables",
    "fp-armv8",
    "fp16fml",
    "fp8",
    "fp8dot2",
    "fp8dot4",
    "fp8fma",
    "fpac",
    "fptoint",
    "fullfp16",
    "fuse-address",
    "fuse-addsub-2reg-const1",
    "fuse-adrp-add",
    "fuse-aes",
    "fuse-arith-logic",
    "fuse-crypto-eor",
    "fuse-csel",
    "fuse-literals",
    "gcs",
    "harden-sls-blr",
    "harden-sls-nocomdat",
    "harden-sls-retbr",
    "hbc",
    "hcx",
    "i8mm",
    "ite",
    "jsconv",
    "kryo",
    "ldp-aligned-only",
    "lor",
    "ls64",
    "lse",
    "lse128",
    "lse2",
    "lut",
    "mec",
    "mops",
    "mpam",
    "mte",
    "neon",
    "neoverse512tvb",
    "neoversee1",
    "neoversen1",
    "neoversen2",
    "neoversen3",
    "neoversev1",
    "neoversev2",
    "neoversev3",
    "neoversev3AE",
    "nmi",
    "no-bti-at-return-twice",
    "no-neg-immediates",
    "no-sve-fp-ld1r",
    "no-zcz-fp",
    "nv",
    "oryon-1",
    "outline-atomics",
    "pan",
    "pan-rwv",
    "pauth",
    "pauth-lr",
    "perfmon",
    "predictable-select-expensive",
    "predres",
    "prfm-slc-target",
    "rand",
    "ras",
    "rasv2",
    "rcpc",
    "rcpc-immo",
    "rcpc3",
    "rdm",
    "reserve-lr-for-ra",
    "reserve-x1",
    "reserve-x10",
    "reserve-x11",
    "reserve-x12",
    "reserve-x13",
    "reserve-x14",
    "reserve-x15",
    "reserve-x18",
    "reserve-x2",
    "reserve-x20",
    "reserve-x21",
    "reserve-x22",
    "reserve-x23",
    "reserve-x24",
    "reserve-x25",
    "reserve-x26",
    "reserve-x27",
    "reserve-x28",
    "reserve-x3",
    "reserve-x4",
    "reserve-x5",
    "reserve-x6",
    "reserve-x7",
    "reserve-x9",
    "rme",
    "saphira",
    "sb",
    "sel2",
    "sha2",
    "sha3",
    "slow-misaligned-128store",
    "slow-paired-128",
    "slow-strqro-store",
    "sm4",
    "sme",
    "sme-b16b16",
    "sme-f16f16",
    "sme-f64f64",
    "sme-f8f16",
    "sme-f8f32",
    "sme-fa64",
    "sme-i16i64",
    "sme-lutv2",
    "sme2",
    "sme2p1",
    "spe",
    "spe-eef",
    "specres2",
    "specrestrict",
    "ssbs",
    "ssve-fp8dot2",
    "ssve-fp8dot4",
    "ssve-fp8fma",
    "store-pair-suppress",
    "stp-aligned-only",
    "strict-align",
    "sve",
    "sve-b16b16",
    "sve2",
    "sve2-aes",
    "sve2-bitperm",
    "sve2-sha3",
    "sve2-sm4",
    "sve2p1",
    "tagged-globals",
    "the",
    "thunderx",
    "thunderx2t99",
    "thunderx3t110",
    "thunderxt81",
    "thunderxt83",
    "thunderxt88",
    "tlb-rmi",
    "tlbiw",
    "tme",
    "tpidr-el1",
    "tpidr-el2",
    "tpidr-el3",
    "tpidrro-el0",
    "tracev8.4",
    "trbe",
    "tsv110",
    "uaops",
    "use-experimental-zeroing-pseudos",
    "use-fixed-over-scalable-if-equal-cost",
    "use-postra-scheduler",
    "use-reciprocal-square-root",
    "use-scalar-inc-vl",
    "v8.1a",
    "v8.2a",
    "v8.3a",
    "v8.4a",
    "v8.5a",
    "v8.6a",
    "v8.7a",
    "v8.8a",
    "v8.9a",
    "v8a",
    "v8r",
    "v9.1a",
    "v9.2a",
    "v9.3a",
    "v9.4a",
    "v9.5a",
    "v9a",
    "vh",
    "wfxt",
    "xs",
    "zcm",
    "zcz",
    "zcz-fp-workaround",
    "zcz-gp",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(triple: &str, cpu: &str, features: &str) -> TargetSpec {
        TargetSpec { triple: triple.into(), cpu: cpu.into(), features: features.into() }
    }

    fn refusal(triple: &str, cpu: &str, features: &str) -> String {
        match check(&spec(triple, cpu, features)) {
            Err(CodegenError::Target(why)) => why,
            other => panic!("{triple} {cpu} {features}: {other:?}"),
        }
    }

    const X86_64: &str = "x86_64-unknown-linux-gnu";

    #[test]
    fn known_targets_pass() {
        for (triple, cpu, features) in [
            (X86_64, "x86-64", ""),
            (X86_64, "znver3", ""),
            (X86_64, "sapphirerapids", "+avx512f,-avx512bw"),
            (X86_64, "generic", "+avx2,+fma,-x87"),
            ("i686-unknown-linux-gnu", "pentium4", ""),
            ("aarch64-unknown-linux-gnu", "neoverse-v2", "+sve2"),
            ("riscv64-unknown-linux-gnu", "generic", ""),
            ("thumbv7em-none-eabihf", "generic", ""),
            ("wasm32-unknown-unknown", "generic", ""),
        ] {
            assert!(check(&spec(triple, cpu, features)).is_ok(), "{triple} {cpu} {features}");
        }
    }

    #[test]
    fn what_would_end_the_process_is_refused() {
        assert!(refusal(X86_64, "bogus", "").contains("not a CPU LLVM knows for `x86_64`"));
        assert!(refusal(X86_64, "znver33", "").contains("did you mean `znver3`?"));
        assert!(refusal(X86_64, "pentium4", "").contains("no 64-bit mode"));
        assert!(refusal(X86_64, "x86-64", "-sse2").contains("without `sse2`"));
        assert!(refusal(X86_64, "x86-64", "+avx2,-64bit").contains("without `64bit`"));
        assert!(refusal(X86_64, "x86-64", "+soft-float").contains("with `soft-float`"));
        assert!(refusal("riscv64-unknown-linux-gnu", "bogus", "").contains("only the CPU `generic`"));
        for gpu in ["amdgcn-amd-amdhsa", "r600", "bpfel", "nvptx64-nvidia-cuda"] {
            match check(&spec(gpu, "generic", "")) {
                Err(CodegenError::Unsupported(why)) => assert!(why.contains("special-purpose targets"), "{why}"),
                other => panic!("{gpu}: {other:?}"),
            }
        }
    }

    #[test]
    fn feature_lists_are_checked() {
        assert!(refusal(X86_64, "x86-64", "+avx512").contains("did you mean `avx512f`?"));
        assert!(refusal(X86_64, "x86-64", "avx2").contains("`+name` (on) or `-name` (off)"));
        assert!(refusal("aarch64-unknown-linux-gnu", "generic", "+avx2").contains("for `aarch64`"));
        assert!(refusal("riscv64-unknown-linux-gnu", "generic", "+m").contains("no feature list"));
    }

    /// The lists are LLVM 19's: `llc-19 -mcpu=help` prints what it knows
    /// (skipped where llc-19 is not installed; `.ci/setup` installs it with
    /// llvm-19-dev).
    #[test]
    fn the_lists_are_llvm_19s() {
        let mut x86_cpus = [X86_64_CPUS, X86_32_BIT_CPUS].concat();
        x86_cpus.sort_unstable();
        for (triple, cpus, features) in
            [("x86_64", &x86_cpus[..], X86_FEATURES), ("aarch64", AARCH64_CPUS, AARCH64_FEATURES)]
        {
            let Ok(out) =
                std::process::Command::new("llc-19").args([&format!("-mtriple={triple}"), "-mcpu=help"]).output()
            else {
                eprintln!("llc-19 not found: the lists are not compared");
                return;
            };
            let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
            let mut section = 0;
            let (mut llvm_cpus, mut llvm_features) = (Vec::new(), Vec::new());
            for line in text.lines() {
                if line.starts_with("Available CPUs") {
                    section = 1;
                } else if line.starts_with("Available features") {
                    section = 2;
                } else if line.starts_with("Use +feature") {
                    section = 0;
                } else if let Some(name) = line.split_whitespace().next() {
                    match section {
                        1 => llvm_cpus.push(name.to_string()),
                        2 => llvm_features.push(name.to_string()),
                        _ => {}
                    }
                }
            }
            assert_eq!(llvm_cpus, cpus, "{triple} CPUs");
            assert_eq!(llvm_features, features, "{triple} features");
        }
    }
}
