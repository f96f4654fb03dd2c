//! The command line (docs/operations.md#commands).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// A reverse proxy that gates replayed Open Responses items per target provider.
#[derive(Debug, Parser)]
#[command(name = "replaygate", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy.
    Serve(ServeArgs),
    /// Gate request bodies offline (no network) and print one verdict per body.
    Check(CheckArgs),
    /// Work with the configuration without serving.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Make client keys for teams.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print a built-in item profile, or validate an item profile file.
    #[command(subcommand)]
    Profile(ProfileCommand),
}

/// `replaygate profile ...`.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Print a built-in item profile's JSON (the starting point for a profile of your own).
    Show(ProfileShowArgs),
    /// Validate an item profile file as `item_profile = { file = ... }` would read it; print a
    /// one-line summary (exit 0), or the error with its line and column (exit 2).
    Check(ProfileCheckArgs),
}

/// `replaygate profile show`.
#[derive(Debug, Args)]
pub struct ProfileShowArgs {
    /// The built-in profile, e.g. `openai`.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
}

/// `replaygate profile check`.
#[derive(Debug, Args)]
pub struct ProfileCheckArgs {
    /// The profile file to validate.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
}

/// `replaygate config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Load and validate the configuration and the files it names; print a one-line summary
    /// (exit 0), or the error with its line and column (exit 2).
    Check(ConfigCheckArgs),
}

/// `replaygate config check`.
#[derive(Debug, Args)]
pub struct ConfigCheckArgs {
    /// The configuration file [default: $REPLAYGATE_CONFIG, then ./proxy.toml, then the built-in default].
    #[arg(long, env = "REPLAYGATE_CONFIG", value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
}

/// `replaygate keys ...`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Print a new client key (shown once) and the `keys` line to add to `[teams.NAME]`.
    New(KeysNewArgs),
}

/// `replaygate keys new`.
#[derive(Debug, Args)]
pub struct KeysNewArgs {
    /// The team the key is for: ASCII letters, digits, `_` and `-`, not starting with `-`.
    #[arg(long, value_name = "NAME")]
    pub(crate) team: String,
    /// A name for the key in the logs: 1 to 64 ASCII letters, digits, `_`, `-` and `.`
    /// (prints the table form of the `keys` entry).
    #[arg(long, value_name = "ID")]
    pub(crate) id: Option<String>,
    /// When the key stops working, RFC 3339 (e.g. 2027-03-01T00:00:00Z); prints the table
    /// form of the `keys` entry.
    #[arg(long, value_name = "DATE")]
    pub(crate) expires: Option<String>,
}

/// `replaygate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file [default: $REPLAYGATE_CONFIG, then ./proxy.toml, then the built-in default].
    #[arg(long, env = "REPLAYGATE_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The address to listen on, overriding `[server] listen`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
}

/// `replaygate check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The configuration whose provider profiles to use; without it, NAME accepts only its own namespace.
    #[arg(long, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// The provider to judge the bodies for.
    #[arg(long, value_name = "NAME")]
    pub(crate) provider: String,
    /// Judge under this team's policy (its rules, mode, tools and pinned schemas); needs --config.
    #[arg(long, value_name = "NAME", requires = "config")]
    pub(crate) team: Option<String>,
    /// Apply this item profile (docs/item-profiles.md), e.g. `openai`, instead of the provider's own.
    #[arg(long, value_name = "NAME")]
    pub(crate) item_profile: Option<String>,
    /// Print each body as it would be forwarded (repaired members and stripped items cut out)
    /// instead of its verdict; a refused body's verdict goes to standard error.
    #[arg(long)]
    pub(crate) repaired: bool,
    /// Read one body per line (JSON Lines) instead of one body.
    #[arg(long)]
    pub(crate) jsonl: bool,
    /// The file to read, or `-` for standard input.
    #[arg(value_name = "FILE|-", default_value = "-")]
    pub(crate) input: String,
}
