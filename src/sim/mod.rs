//! The SGLang-compatible simulator.

/// Entry point of `servebench sim ARGS...`; returns the process exit code.
pub fn main(_args: Vec<String>) -> i32 {
    eprintln!("servebench sim: not built yet");
    1
}
