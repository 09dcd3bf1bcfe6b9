//! mnemograph: a graph-memory MCP server. Memories and their relations live in one SQLite file;
//! a tantivy index beside it answers recall; MCP tools over stdio expose it to agents.

pub mod cli;
pub mod config;
pub mod embed;
pub mod engine;
pub mod error;
mod fnv;
pub mod formats;
pub mod graph;
mod huge_pages;
pub mod index;
mod lock;
pub mod mcp;
pub mod model;
mod open_files;
mod priority;
pub mod store;
pub mod tasks;

pub use config::Config;
pub use engine::Engine;
pub use error::{Error, Result};
