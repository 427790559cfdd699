//! `kith-central`: see `kith_central::cli`.

fn main() -> std::process::ExitCode {
    kith_central::cli::run()
}
