//! Vector math: LLVM's vectoriser turns a loop calling `exp` into one calling
//! `llvm.exp.v8f64`, and the x86 back end then splits that call into eight
//! calls of the scalar `exp`, so a loop dominated by `exp`/`log` (Black–Scholes)
//! gains nothing from vectorising. glibc's libmvec has the vector versions
//! (`_ZGVeN8v_exp`: eight doubles in a zmm register, x86's vector function
//! ABI), and this step, run after LLVM's pipeline, points each vector
//! intrinsic call at them:
//!
//! ```text
//! %y = call <8 x double> @llvm.exp.v8f64(<8 x double> %x)
//!   ⇒ %y = call <8 x double> @_ZGVeN8v_exp(<8 x double> %x)
//! ```
//!
//! Only for x86-64 GNU/Linux targets, for widths the target's features carry
//! (128 bits: SSE2; 256: AVX2; 512: AVX-512F; the ABI passes the vector in one
//! register of that width), and for the functions glibc has had since libmvec
//! began (2.22): `exp`, `log`, `sin`, `cos`, `pow`, in `double` and `float`.
//! libmvec's results are within 4 ulp of the correctly rounded ones (the
//! scalar functions: 1 ulp), so [`Options::vector_math`](crate::Options) turns
//! the step off for bit-identical results. Programs linked by us get `-lmvec`
//! ([`crate::link`]); in-process runs load libmvec first ([`available`]).
//!
//! On AVX-512 targets a function that calls one of those functions is also
//! marked for 512-bit vectors before LLVM's pipeline runs ([`widen_math`]):
//! LLVM's x86 CPUs from Skylake-AVX512 on prefer 256-bit vectors, so its
//! vectoriser made `llvm.exp.v4f64` (libmvec's AVX2 `_ZGVdN4v_exp`), while
//! libmvec's AVX-512 version does eight lanes a call for little more than
//! the cost of four.

use inkwell::attributes::AttributeLoc;
use inkwell::module::{Linkage, Module};
use inkwell::values::CallSiteValue;

use crate::TargetSpec;

/// Whether libmvec can be loaded into this process (for in-process runs,
/// whose calls are resolved against the process's libraries). Tried once.
pub(crate) fn available() -> bool {
    static LOADED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LOADED.get_or_init(|| {
        cfg!(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))
            && inkwell::support::load_library_permanently(std::path::Path::new("libmvec.so.1")).is_ok()
    })
}

/// The libmvec name of an LLVM vector math intrinsic, when the target
/// (`has`: whether it has an x86 feature) has it: `llvm.exp.v8f64` →
/// `_ZGVeN8v_exp`.
fn libmvec_name(intrinsic: &str, has: impl Fn(&str) -> bool) -> Option<String> {
    let rest = intrinsic.strip_prefix("llvm.")?;
    let (op, ty) = rest.split_once('.')?;
    let args = match op {
        "exp" | "log" | "sin" | "cos" => "v",
        "pow" => "vv",
        _ => return None,
    };
    let ty = ty.strip_prefix('v')?;
    let (lanes, suffix, bits) = if let Some(n) = ty.strip_suffix("f64") {
        (n.parse::<u32>().ok()?, "", 64)
    } else if let Some(n) = ty.strip_suffix("f32") {
        (n.parse::<u32>().ok()?, "f", 32)
    } else {
        return None;
    };
    let isa = match lanes * bits {
        128 => 'b',
        256 if has("avx2") => 'd',
        512 if has("avx512f") => 'e',
        _ => return None,
    };
    Some(format!("_ZGV{isa}N{lanes}{args}_{op}{suffix}"))
}

/// Points every vector math intrinsic of `module` that libmvec has at it
/// (see the module documentation), for the target `spec` (its features as
/// [`TargetSpec::has`] reads them: a CPU given by name, `--cpu
/// sapphirerapids`, has an empty feature list and its vector math was left
/// scalar, Black–Scholes at half speed). Returns how many intrinsics were
/// replaced.
pub(crate) fn use_libmvec(module: &Module<'_>, spec: &TargetSpec) -> usize {
    let triple = &spec.triple;
    if !(triple.starts_with("x86_64") && triple.contains("linux") && triple.contains("gnu")) {
        return 0;
    }
    let intrinsics: Vec<_> = module.get_functions().filter(|f| f.count_basic_blocks() == 0).collect();
    let mut replaced = 0;
    for f in intrinsics {
        let Some(name) = f.get_name().to_str().ok().and_then(|n| libmvec_name(n, |f| spec.has(f))) else { continue };
        let target = module
            .get_function(&name)
            .unwrap_or_else(|| module.add_function(&name, f.get_type(), Some(Linkage::External)));
        f.replace_all_uses_with(target);
        replaced += 1;
    }
    replaced
}

/// Whether `name` is a scalar LLVM intrinsic libmvec has a vector version of
/// (`llvm.exp.f64`, `llvm.pow.f32`; see [`libmvec_name`]).
fn is_libmvec_scalar(name: &str) -> bool {
    let Some((op, ty)) = name.strip_prefix("llvm.").and_then(|rest| rest.split_once('.')) else { return false };
    matches!(op, "exp" | "log" | "sin" | "cos" | "pow") && matches!(ty, "f64" | "f32")
}

/// Marks every function of `module` that calls a function libmvec has
/// (scalar `llvm.exp.f64` and the like, as emitted: before vectorisation)
/// to prefer 512-bit vectors (`"prefer-vector-width"="512"`), on x86-64
/// GNU/Linux targets with AVX-512F; returns how many functions were marked.
/// Run before LLVM's pipeline, so that its loop vectoriser picks eight
/// doubles per vector and [`use_libmvec`] then calls libmvec's AVX-512
/// versions. Only such functions: for the bench's streaming loops the
/// preferred 256 bits were as fast or faster (a dot product of 20M elements
/// 11% slower in 512-bit vectors on one AVX-512 Xeon, relax 2-6%), and
/// Black–Scholes, the kernel these calls dominate, ran 0.73-0.88 of its
/// time with them (Sapphire Rapids, one and two threads; 0.84-0.85 on a
/// Xeon whose CPUID says Rocket Lake). Not measured: Zen 4 (which runs a
/// 512-bit operation as two halves) and Skylake-X (whose clock drops under
/// heavy 512-bit code).
pub(crate) fn widen_math(module: &Module<'_>, spec: &TargetSpec) -> usize {
    let triple = &spec.triple;
    if !(triple.starts_with("x86_64") && triple.contains("linux") && triple.contains("gnu") && spec.has("avx512f")) {
        return 0;
    }
    let wide = module.get_context().create_string_attribute("prefer-vector-width", "512");
    let mut marked = 0;
    for func in module.get_functions().filter(|f| f.count_basic_blocks() > 0) {
        let calls_math = crate::emit::instructions(func).any(|inst| {
            CallSiteValue::try_from(inst)
                .ok()
                .and_then(|call| call.get_called_fn_value())
                .is_some_and(|callee| callee.get_name().to_str().is_ok_and(is_libmvec_scalar))
        });
        if calls_math {
            func.add_attribute(AttributeLoc::Function, wide);
            marked += 1;
        }
    }
    marked
}

#[cfg(test)]
mod tests {
    use super::libmvec_name;
    use crate::TargetSpec;

    fn spec(cpu: &str, features: &str) -> TargetSpec {
        TargetSpec { triple: "x86_64-unknown-linux-gnu".into(), cpu: cpu.into(), features: features.into() }
    }

    #[test]
    fn names_follow_the_vector_function_abi() {
        let avx512 = spec("generic", "+sse2,+avx2,+avx512f");
        let name = |intrinsic: &str, target: &TargetSpec| libmvec_name(intrinsic, |f| target.has(f));
        assert_eq!(name("llvm.exp.v8f64", &avx512).as_deref(), Some("_ZGVeN8v_exp"));
        assert_eq!(name("llvm.log.v4f64", &avx512).as_deref(), Some("_ZGVdN4v_log"));
        assert_eq!(name("llvm.pow.v2f64", &avx512).as_deref(), Some("_ZGVbN2vv_pow"));
        assert_eq!(name("llvm.sin.v16f32", &avx512).as_deref(), Some("_ZGVeN16v_sinf"));
        // Without AVX-512 the 512-bit variant's register does not exist.
        assert_eq!(name("llvm.exp.v8f64", &spec("generic", "+sse2,+avx2")), None);
        assert_eq!(name("llvm.exp.v4f64", &spec("generic", "+sse2,-avx2")), None);
        // Functions libmvec lacks, scalars, and odd widths stay.
        assert_eq!(name("llvm.sqrt.v4f64", &avx512), None);
        assert_eq!(name("llvm.exp.f64", &avx512), None);
        assert_eq!(name("llvm.exp.v3f64", &avx512), None);
    }

    #[test]
    fn scalar_math_libmvec_has_is_told_from_the_rest() {
        use super::is_libmvec_scalar;
        assert!(is_libmvec_scalar("llvm.exp.f64"));
        assert!(is_libmvec_scalar("llvm.pow.f32"));
        assert!(!is_libmvec_scalar("llvm.sqrt.f64"));
        assert!(!is_libmvec_scalar("llvm.exp.v4f64"));
        assert!(!is_libmvec_scalar("exp"));
    }

    #[test]
    fn a_cpu_given_by_name_brings_its_features() {
        // `--cpu sapphirerapids` alone: an empty feature list, the CPU's features.
        let name = |intrinsic: &str, target: &TargetSpec| libmvec_name(intrinsic, |f| target.has(f));
        assert_eq!(name("llvm.exp.v8f64", &spec("sapphirerapids", "")).as_deref(), Some("_ZGVeN8v_exp"));
        assert_eq!(name("llvm.log.v4f64", &spec("znver3", "")).as_deref(), Some("_ZGVdN4v_log"));
        assert_eq!(name("llvm.exp.v8f64", &spec("znver3", "")), None);
        // The list can take a feature of the CPU away.
        assert_eq!(name("llvm.exp.v8f64", &spec("sapphirerapids", "-avx512f")), None);
    }
}
