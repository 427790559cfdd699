//! `kith`: the program is the `kith_agent` library's (`cli` parses the
//! command line and dispatches).

fn main() -> std::process::ExitCode {
    kith_agent::main()
}
