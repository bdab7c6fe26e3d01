//! The `replicron` binary: parses arguments and hands over to [`replicron::cli`].

fn main() -> std::process::ExitCode {
    replicron::cli::main()
}
