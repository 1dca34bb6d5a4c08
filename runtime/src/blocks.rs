//! Caches of freed array blocks: large ones process-wide, small ones per thread.
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
//!
//! Recursive array code allocates many small arrays (Kreye's determinant builds
//! a minor per call), and the system allocator's aligned allocations are slow
//! (glibc's `memalign` path). Blocks of at most [`SMALL_MAX`] bytes are
//! rounded up to a multiple of [`SMALL_CLASS`] bytes and recycled through
//! per-thread free lists (at most [`SMALL_PER_CLASS`] per size; a block freed
//! on another thread joins that thread's lists, the allocator does not care).
//!
//! Fresh blocks of at least 4 MiB are marked for transparent huge pages
//! ([`fresh`]), as NumPy marks its large arrays: a negation of a 4000x4000
//! array into such a block ran 15% faster (Zen 4: fewer TLB misses, and the
//! prefetchers run on across 4 KiB boundaries).

use std::alloc::{Layout, alloc, dealloc};
use std::cell::RefCell;
use std::sync::Mutex;

/// Largest block the per-thread lists recycle.
const SMALL_MAX: usize = 8192;
/// Small blocks are rounded up to multiples of this (also their alignment).
const SMALL_CLASS: usize = 64;
/// Most blocks kept per size and thread.
const SMALL_PER_CLASS: usize = 16;

/// Per size class (`(k + 1) * SMALL_CLASS` bytes), free blocks.
struct SmallLists(Vec<Vec<usize>>);

impl Drop for SmallLists {
    fn drop(&mut self) {
        for (k, list) in self.0.iter().enumerate() {
            for &p in list {
                // SAFETY: every kept block was allocated with its class's layout.
                unsafe { dealloc(p as *mut u8, class_layout(k)) };
            }
        }
    }
}

thread_local! {
    static SMALL: RefCell<SmallLists> = RefCell::new(SmallLists(vec![Vec::new(); SMALL_MAX / SMALL_CLASS]));
}

/// The class of a small layout, if it is one.
fn small_class(layout: Layout) -> Option<usize> {
    (layout.size() <= SMALL_MAX && layout.align() <= SMALL_CLASS)
        .then(|| layout.size().max(1).div_ceil(SMALL_CLASS) - 1)
}

fn class_layout(k: usize) -> Layout {
    Layout::from_size_align((k + 1) * SMALL_CLASS, SMALL_CLASS).expect("a valid small layout")
}

/// Smallest fresh block whose memory is offered transparent huge pages.
const HUGE_MIN_BYTES: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// A fresh block of `layout` from the global allocator (null when it fails).
/// A large one's memory is marked for transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`, where the system leaves that to programs):
/// streaming through 4 KiB pages costs a TLB miss per page and stops the
/// hardware prefetchers at every page boundary, and a fresh block of them
/// faults once per 4 KiB where huge pages fault once per 2 MiB.
pub fn fresh(layout: Layout) -> *mut u8 {
    // SAFETY: callers pass non-zero layouts.
    let p = unsafe { alloc(layout) };
    if !p.is_null() && layout.size() >= HUGE_MIN_BYTES {
        advise_huge(p, layout.size());
    }
    p
}

#[cfg(target_os = "linux")]
fn advise_huge(p: *mut u8, len: usize) {
    unsafe extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const MADV_HUGEPAGE: i32 = 14;
    // The whole huge pages inside the block (madvise wants aligned ranges).
    let start = (p as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
    let end = (p as usize + len) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: the range lies inside the block just allocated; the advice
        // changes how its pages are backed, never their contents. A refusal
        // (no THP in this kernel) leaves ordinary pages.
        unsafe { madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_: *mut u8, _: usize) {}

/// Smallest block worth keeping: glibc's `malloc` maps blocks from this size
/// on (its default `M_MMAP_THRESHOLD`) and unmaps them when freed. At 1 MiB,
/// a loop of stencil steps over a 256x256 `double` array (512 KiB) spent
/// three quarters of its time in page faults: 0.22 -> 0.05 s for 2000 steps.
const MIN_BYTES: usize = 128 << 10;
/// Most bytes kept at once.
const MAX_BYTES: usize = 512 << 20;
/// Most blocks kept at once (the arrays of a few loops, large and mid-sized).
const MAX_BLOCKS: usize = 16;

/// Kept blocks (address, layout), oldest first.
static KEPT: Mutex<Vec<(usize, Layout)>> = Mutex::new(Vec::new());

/// A kept block of exactly `layout`, if there is one; for a small layout
/// always a block (a recycled one or a new one of its class; null when the
/// allocator fails).
pub fn take(layout: Layout) -> Option<*mut u8> {
    if let Some(k) = small_class(layout) {
        let kept = SMALL.try_with(|s| s.borrow_mut().0[k].pop()).ok().flatten();
        // SAFETY: a non-zero layout.
        return Some(kept.map_or_else(|| unsafe { alloc(class_layout(k)) }, |p| p as *mut u8));
    }
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
    if let Some(k) = small_class(layout) {
        let kept = SMALL
            .try_with(|s| {
                let list = &mut s.borrow_mut().0[k];
                let room = list.len() < SMALL_PER_CLASS;
                if room {
                    list.push(p as usize);
                }
                room
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: small blocks are allocated with their class's layout (`take`).
            unsafe { dealloc(p, class_layout(k)) };
        }
        return;
    }
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
        // What `malloc` would map and unmap again: a 256x256 `double` array.
        let mid = Layout::from_size_align(512 << 10, 64).unwrap();
        let q = unsafe { std::alloc::alloc(mid) };
        assert!(!q.is_null());
        unsafe { give(q, mid) };
        assert_eq!(take(mid), Some(q));
        unsafe { give(q, mid) };
    }

    /// The `VmFlags` of the mapping holding `addr` (Linux's /proc/self/smaps).
    #[cfg(target_os = "linux")]
    fn vm_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
            if let Some((lo, hi)) = range
                .and_then(|(lo, hi)| Some((usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?)))
            {
                inside = lo <= addr && addr < hi;
            } else if inside && line.starts_with("VmFlags:") {
                return Some(line.to_string());
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn large_fresh_blocks_are_offered_huge_pages() {
        let big = Layout::from_size_align(16 << 20, 64).unwrap();
        let p = fresh(big);
        assert!(!p.is_null());
        // A huge page inside the block carries the advice (`hg`), where the
        // kernel has transparent huge pages at all.
        let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists();
        let inside = (p as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let flags = vm_flags(inside).expect("the block is mapped");
        assert!(!thp || flags.split_whitespace().any(|f| f == "hg"), "{flags}");
        // SAFETY: allocated with `big` just above.
        unsafe { std::ptr::write_bytes(p, 1, big.size()) };
        unsafe { dealloc(p, big) };
        let small = Layout::from_size_align(64 << 10, 64).unwrap();
        let q = fresh(small);
        assert!(!q.is_null());
        unsafe { dealloc(q, small) };
    }

    #[test]
    fn small_blocks_are_recycled_per_size_class() {
        let a = Layout::from_size_align(100, 64).unwrap();
        let p = take(a).expect("small layouts always get a block");
        assert!(!p.is_null());
        // SAFETY: the block has at least `a.size()` bytes.
        unsafe { std::ptr::write_bytes(p, 7, a.size()) };
        unsafe { give(p, a) };
        // 128 bytes is the same class as 100.
        let b = Layout::from_size_align(128, 64).unwrap();
        assert_eq!(take(b), Some(p));
        unsafe { give(p, b) };
        let other = Layout::from_size_align(4096, 64).unwrap();
        let q = take(other).unwrap();
        assert_ne!(q, p, "another size class");
        unsafe { give(q, other) };
    }
}
