//! Derived indexes beside the database. Each follows the change log and can be rebuilt from SQLite.

pub mod flat;
pub mod graph_file;
pub mod text;
pub mod tokenize;
pub mod vector;
