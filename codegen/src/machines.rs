//! Target machines kept between compiles.
//!
//! Creating an LLVM target machine parses the target's CPU and feature
//! strings, and its first use per function builds the subtarget (the
//! processor's scheduling model and feature set), which the machine then
//! caches: together about a millisecond, paid per part of every compile
//! while the service compiled with fresh machines. A finished compile
//! hands its machine back here ([`Lease`]'s drop), and the next compile
//! for the same target and optimisation level takes it.

// The one `unsafe`: moving a target machine between threads (see `Idle`).
#![allow(unsafe_code)]

use std::sync::Mutex;

use inkwell::targets::TargetMachine;

use crate::{CodegenError, Options, TargetSpec};

/// A machine no compile is using.
struct Idle(TargetMachine);

// SAFETY: an LLVM `TargetMachine` has no thread affinity; LLVM requires only
// that no two threads use one at once. A machine in the pool is used by no
// one, and a [`Lease`] gives it to one compile, on one thread, at a time.
unsafe impl Send for Idle {}

/// Idle machines by target and LLVM optimisation level.
static POOL: Mutex<Vec<(TargetSpec, u8, Idle)>> = Mutex::new(Vec::new());

/// The most idle machines kept (two per core of a busy service's compile
/// threads, each compile using one per part, is far below this).
const MAX_IDLE: usize = 32;

/// A target machine lent to one compile; it goes back to the pool when
/// dropped.
pub struct Lease {
    machine: Option<TargetMachine>,
    spec: TargetSpec,
    level: u8,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("spec", &self.spec).field("level", &self.level).finish()
    }
}

impl std::ops::Deref for Lease {
    type Target = TargetMachine;

    fn deref(&self) -> &TargetMachine {
        // Present until the lease is dropped.
        self.machine.as_ref().expect("a lease holds its machine until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(machine) = self.machine.take() {
            let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < MAX_IDLE {
                pool.push((self.spec.clone(), self.level, Idle(machine)));
            }
        }
    }
}

/// A target machine for `spec` at `options`' optimisation level: an idle
/// one if there is one, else a new one.
pub fn lease(spec: &TargetSpec, options: &Options) -> Result<Lease, CodegenError> {
    let level = options.opt_level.min(3);
    let idle = {
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        pool.iter().position(|(s, l, _)| s == spec && *l == level).map(|k| pool.swap_remove(k).2)
    };
    let machine = match idle {
        Some(Idle(machine)) => machine,
        None => crate::target_machine(spec, options)?,
    };
    Ok(Lease { machine: Some(machine), spec: spec.clone(), level })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_machine_is_lent_again_for_the_same_target_and_level() {
        // A target no other test compiles for: tests run side by side and
        // share the pool.
        let spec = TargetSpec { cpu: "x86-64-v2".into(), features: String::new(), ..crate::host_spec().clone() };
        let o3 = Options::default();
        let first = lease(&spec, &o3).expect("a machine");
        let raw = first.as_mut_ptr() as usize;
        drop(first);
        let again = lease(&spec, &o3).expect("a machine");
        assert_eq!(again.as_mut_ptr() as usize, raw, "the idle machine is taken");
        // Another level gets another machine while this one is lent.
        let o0 = Options { opt_level: 0, ..Options::default() };
        let other = lease(&spec, &o0).expect("a machine");
        assert_ne!(other.as_mut_ptr() as usize, raw);
    }
}
