//! The `sluice` command line.

#![forbid(unsafe_code)]

mod cli;

fn main() -> anyhow::Result<()> {
    cli::main()
}
