//! The simulator's behaviour tests (`cargo test -p servebench-sim`): one binary, one module
//! per area. `in_process` serves from this process (`sim::serve`); `engines`, `pd` and `tool_calls` launch
//! the crate's own `servebench-sim` binary, the way an engine adapter launches a server.
mod common;
mod engines;
mod in_process;

use testkit::http;
mod pd;
mod tool_calls;
