//! withloop's workers. Today: [`build`], one compile job from source text (plus
//! in-memory include files, hints and options) to the artifacts the service
//! caches. It is synchronous and does no IO but the system linker's temporary
//! files; callers run it on a blocking thread.

pub mod build;

pub use build::{ArtifactKind, BuildError, BuildOutput, BuildRequest, Language, Phase, build};
