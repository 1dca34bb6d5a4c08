//! Linking objects into shared libraries and executables with the system `cc`.
