//! The command line's standard output: lines written as `println!` writes them, and a
//! reader that closed the pipe (`| head`) ends the process quietly with the status a
//! SIGPIPE death reports in a shell (141), never a panic.

use std::io::Write;

/// Exit status of a command whose standard output was closed by its reader: what a
/// shell reports for a process ended by SIGPIPE (128 + 13).
pub const CLOSED_PIPE_STATUS: i32 = 141;

/// Writes `args` and a newline to standard output. A closed pipe ends the process with
/// [`CLOSED_PIPE_STATUS`]; any other failure to write is reported on standard error
/// and the line dropped (the command's work is not undone by a full disk).
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(CLOSED_PIPE_STATUS);
        }
        eprintln!("kfs-iceberg: cannot write to standard output: {e}");
    }
}
