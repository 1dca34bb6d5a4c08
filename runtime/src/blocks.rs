//! A small cache of large freed array blocks.
//!
//! Iterative array code allocates a same-sized array every step and frees the
//! previous one (`a = with { … } : genarray(shape(a), …)` in a loop). Blocks that
//! large come from `mmap` and go back to the system when freed, so every step
//! pays one page fault per 4 KiB of fresh memory — more than the computation for
//! a stencil. Freed blocks of at least [`MIN_BYTES`] are kept here instead (at
//! most [`MAX_BLOCKS`] of them and [`MAX_BYTES`] in all, oldest given back
//! first) and handed out again for an allocation of exactly the same layout.
//! Arrays' elements are uninitialised at allocation anyway, so a reused block
//! behaves like a fresh one.

use std::alloc::{Layout, dealloc};
use std::sync::Mutex;

/// Smallest block worth keeping.
const MIN_BYTES: usize = 1 << 20;
/// Most bytes kept at once.
const MAX_BYTES: usize = 512 << 20;
/// Most blocks kept at once.
const MAX_BLOCKS: usize = 8;

/// Kept blocks (address, layout), oldest first.
static KEPT: Mutex<Vec<(usize, Layout)>> = Mutex::new(Vec::new());

/// A kept block of exactly `layout`, if there is one.
pub fn take(layout: Layout) -> Option<*mut u8> {
    if layout.size() < MIN_BYTES {
        return None;
    }
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let i = kept.iter().rposition(|(_, l)| *l == layout)?;
    Some(kept.remove(i).0 as *mut u8)
}

/// Frees `p` (allocated with `layout`), keeping it for reuse when it is large.
///
/// # Safety
/// `p` was allocated by the global allocator with `layout` and is not used again.
pub unsafe fn give(p: *mut u8, layout: Layout) {
    if layout.size() < MIN_BYTES || layout.size() > MAX_BYTES {
        // SAFETY: the caller's guarantee.
        unsafe { dealloc(p, layout) };
        return;
    }
    let mut evicted = Vec::new();
    {
        let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        kept.push((p as usize, layout));
        let mut total: usize = kept.iter().map(|(_, l)| l.size()).sum();
        while kept.len() > MAX_BLOCKS || total > MAX_BYTES {
            let (q, l) = kept.remove(0);
            total -= l.size();
            evicted.push((q, l));
        }
    }
    for (q, l) in evicted {
        // SAFETY: kept blocks were given with their layouts and are owned here.
        unsafe { dealloc(q as *mut u8, l) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_reused_small_ones_are_not() {
        let big = Layout::from_size_align(3 << 20, 64).unwrap();
        // SAFETY: a fresh allocation with this layout, given once.
        let p = unsafe { std::alloc::alloc(big) };
        assert!(!p.is_null());
        unsafe { give(p, big) };
        let other = Layout::from_size_align(5 << 20, 64).unwrap();
        assert_eq!(take(other), None, "only exactly the same layout");
        assert_eq!(take(big), Some(p));
        assert_eq!(take(big), None, "handed out once");
        unsafe { give(p, big) };
        let small = Layout::from_size_align(4096, 64).unwrap();
        assert_eq!(take(small), None);
    }
}
