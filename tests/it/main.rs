//! Integration tests: each spawns the real `mnemograph serve` binary on files in a temp folder and
//! talks MCP to it over stdio (or Streamable HTTP), in both protocol eras (2025-11-25 `initialize`, 2026-07-28
//! `server/discover`).

mod access;
mod background;
mod bad_input;
mod browser;
mod budget;
mod cli;
mod concurrency;
mod curation;
mod durability;
mod faults;
mod fuzz;
mod http;
mod identity;
mod jobs;
mod migrate;
mod oauth;
mod pg;
#[cfg(feature = "tls")]
mod pg_tls;
mod protocol;
mod queries;
mod roots;
mod shared_pg;
mod store_suite;
mod support;
mod tasks;
mod tidy;
mod tools;
mod transfer;
mod ui;
mod wire;
