//! `chunkscope ctl`

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::Outcome;
use crate::overlay::control::{default_socket, Client, Marked};

/// Talk to a running mount: add a marker to its trace, or read its counters.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope ctl /mnt/cs mark \"phase1 start strategy=lru\"\n  \
    chunkscope ctl /mnt/cs stats\n  \
    chunkscope ctl /mnt/cs drop-caches\n  \
    chunkscope ctl /mnt/cs rules\n  \
    chunkscope ctl /mnt/cs release\n  \
    chunkscope ctl /mnt/cs release all\n\n\
    Each command returns after the mount acknowledged it: a marker is in the trace before\n\
    anything the caller does next.")]
pub struct CtlArgs {
    /// The mountpoint of a running `chunkscope mount`.
    mountpoint: PathBuf,
    /// The control socket, when the mount was started with --control.
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand, Debug)]
enum CtlCommand {
    /// Record a marker (e.g. "phase1 start strategy=lru") in the trace.
    Mark {
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// Print the mount's counters as JSON (trace, model totals, fault rules).
    Stats,
    /// Empty the model's block cache: the pool is cold from the next request on.
    DropCaches,
    /// Print each fault rule with how often it matched and fired, as JSON.
    Rules,
    /// Send every reply the mount holds now (injected delays and stalls, modelled time):
    /// whatever waits on the mount goes on.
    Release {
        /// `all`: and hold none from now on: the mount delays nothing any more (to stop
        /// whatever runs on a slow `--disk` without waiting on it).
        #[arg(value_parser = ["all"])]
        all: Option<String>,
    },
}

pub fn run(args: CtlArgs) -> Result<Outcome> {
    let socket = match args.control {
        Some(p) => p,
        None => default_socket(&args.mountpoint)?,
    };
    let mut client = Client::connect(&socket)?;
    match args.command {
        CtlCommand::Mark { text } => {
            let marked = client.mark(&text.join(" "))?;
            if marked == Marked::Untraced {
                tracing::warn!("the mount has no trace; the marker was not recorded");
            }
            println!("{}", marked.reply());
        }
        CtlCommand::Stats => println!("{}", serde_json::to_string(&client.stats()?)?),
        CtlCommand::DropCaches => {
            client.drop_caches()?;
            println!("ok: the model's cache is empty");
        }
        CtlCommand::Rules => println!("{}", serde_json::to_string(&client.rules()?)?),
        CtlCommand::Release { all } => {
            let all = all.is_some();
            let n = if all {
                client.release_all()?
            } else {
                client.release()?
            };
            println!("ok: released {n} held replies");
            if all {
                println!("ok: no reply is held from now on");
            }
        }
    }
    Ok(Outcome::Ok)
}
