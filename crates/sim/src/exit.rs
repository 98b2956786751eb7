//! The simulator's exit codes: a server process's, as the engines' own launchers end (argparse exits 2 on a bad flag, a crash exits 1). servebench's own codes happen to agree.

/// A clean shutdown.
pub const OK: i32 = 0;
/// A simulated crash or start-up failure.
pub const FAILED: i32 = 1;
/// Bad arguments.
pub const BAD_INPUT: i32 = 2;
