//! The `mnemograph` binary: parses arguments and hands over to the CLI.

fn main() -> std::process::ExitCode {
    mnemograph::cli::main()
}
