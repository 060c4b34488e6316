//! The syntaxes in which models write tool calls, each read back token by token.

pub mod hermes;
