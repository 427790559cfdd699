//! `kith`: see `kith_agent::cli`.

fn main() -> std::process::ExitCode {
    kith_agent::cli::main()
}
