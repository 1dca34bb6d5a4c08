//! Source text to syntax tree: lexer, C preprocessor, parser.

pub mod ast;
pub mod cpp;
pub mod lexer;
pub mod parser;
pub mod token;
