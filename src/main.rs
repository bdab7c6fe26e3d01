//! The `replicron` binary: parses arguments and hands over to [`replicron::cli`].

fn main() {
    replicron::cli::exit(replicron::cli::main())
}
