//! The only module that knows MCP.
