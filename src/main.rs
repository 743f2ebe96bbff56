//! The `sluice` command line.

mod cli;

fn main() -> anyhow::Result<()> {
    cli::main()
}
