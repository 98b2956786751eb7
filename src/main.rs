fn main() {
    std::process::exit(servebench::main_with_args(std::env::args_os()));
}
