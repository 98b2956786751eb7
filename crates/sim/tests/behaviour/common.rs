//! Shared helpers for the simulator's behaviour tests.

pub use testkit::process::{exclusive, free_port, show, spawn_kept, tail, wait_healthy};

/// The crate's `servebench-sim` binary: `servebench sim` without the rest of servebench.
pub fn servebench_sim() -> assert_cmd::Command {
    assert_cmd::Command::new(env!("CARGO_BIN_EXE_servebench-sim"))
}
