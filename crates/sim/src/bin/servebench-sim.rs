//! The simulator as a process of its own, as `servebench sim` runs it: the same arguments
//! (`[--api NAME]`, then that engine's launch flags plus `--profile`), the same exit codes.
//! The crate's behaviour tests launch it, so they need not build the whole of servebench.

fn main() {
    std::process::exit(sim::main(std::env::args().skip(1).collect()));
}
