//! `kith-central`: see `kith_central::cli`.

fn main() -> std::process::ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fix_malloc_threshold();
    kith_central::cli::run()
}

/// glibc's malloc raises its mmap threshold (up to 32 MB) each time it frees
/// a large block; smaller blocks then come from its heaps, and freed there
/// they stay resident. Central frees multi-MB buffers all the time (a run's
/// blob read for indexing, tantivy's indexing and merging buffers, the saved
/// ANN index): at 10k and 100k chunks it held 238 and 314 MB of anonymous
/// memory, against 145 and 200 MB with the threshold fixed at 1 MB
/// (BENCHMARKS.md, "Memory"). glibc takes a fixed threshold only from the
/// environment, at start, so central starts itself again with it set (same
/// process id, arguments and file descriptors). A threshold the caller set
/// is kept.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn fix_malloc_threshold() {
    use std::os::unix::process::CommandExt;
    const VAR: &str = "MALLOC_MMAP_THRESHOLD_";
    if std::env::var_os(VAR).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    let error = command.args(args).env(VAR, "1048576").exec();
    eprintln!(
        "kith-central: cannot restart with a fixed malloc threshold ({error}); going on without"
    );
}
