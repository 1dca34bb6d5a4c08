//! The C ABI of compiled code (filled in with shared libraries and headers).
