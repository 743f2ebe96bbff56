//! Subcommands of the `sluice` binary.

mod generate;
mod serve;

use clap::{Parser, Subcommand};

/// sluice: an OpenAI-compatible LLM inference server.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI-compatible API.
    Serve(Box<sluice::config::ServeArgs>),
    /// Print a continuation of a prompt or a chat message.
    Generate(generate::Args),
    /// Print the OpenAPI description of the HTTP API (JSON).
    Openapi,
}

/// Parses the command line and runs the subcommand.
pub fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(c) => serve::run(*c),
        Command::Generate(a) => generate::run(a),
        Command::Openapi => {
            println!("{}", sluice::http::openapi::json());
            Ok(())
        }
    }
}
