//! Program output: to the context's writer, or standard output.

use std::io::Write;

use crate::error::WlCtx;

/// Writes program output.
///
/// # Safety
/// `ctx` is valid or null.
pub unsafe fn write_out(ctx: *mut WlCtx, bytes: &[u8]) {
    if !ctx.is_null() {
        // SAFETY: valid context.
        let c = unsafe { &*ctx };
        if let Some(w) = c.write {
            unsafe { w(c.write_user, bytes.as_ptr(), bytes.len()) };
            return;
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}
