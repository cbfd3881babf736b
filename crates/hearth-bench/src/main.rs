//! `hearth-bench`: load generator for a running `hearth-relay` (or one it spawns itself).
//!
//! Every measurement prints ONE JSON line on stdout; progress and diagnostics go to stderr.
//! Each subcommand is bounded in operation count and time and stops by itself.
//!
//! ```text
//! hearth-bench --spawn ycsb --workload b --records 10000 --target-qps 5000,10000 --seconds 8 --clients 16
//! hearth-bench --spawn fanout --listeners 1000 --writes 10
//! hearth-bench --spawn commit --doc-bytes 10000,100000,1000000 --fields 1,100,500
//! hearth-bench --spawn hot --clients 32 --seconds 10
//! hearth-bench --spawn sequential --docs 20000 --clients 32     (runs `random` as its baseline)
//! hearth-bench --url ws://127.0.0.1:8787/v1/ws random --docs 20000 --clients 32
//! hearth-bench rules --iterations 200000        (in this process: rules decisions)
//! hearth-bench --spawn scale --postgres postgres://... --relays 2   (scripts/bench-scale)
//! hearth-bench --spawn --relay-arg=--rules --relay-arg=rules/bench.rules ycsb ...
//! ```
//!
//! Latencies are measured on the client (this process), which shares the machine's cores with
//! the relay when both run on one host: every figure includes the load generator's own
//! scheduling delays. Each line also carries the CPU time the relay and this process used
//! during the measurement (`cpu`, percent of one core) and, when the relay's `/metrics`
//! endpoint answers, its group-commit and fan-out counters over the same interval.
//!
//! One module per benchmark (`ycsb`, `fanout`, `commit`, `hot`, `inserts`, `rules`) over shared ones:
//! `cli` (the arguments), `measure` (clock, random numbers, statistics, output, CPU and
//! metrics probes) and `relay_proc` (the relay under test and connections to it).

mod cli;
mod commit;
mod fanout;
mod hot;
mod inserts;
mod measure;
mod relay_proc;
mod rules;
mod scale;
mod ycsb;

use std::time::Duration;

use anyhow::Result;
use clap::Parser;

use crate::cli::{Cli, Cmd};
use crate::inserts::InsertMode;
use crate::measure::{base, machine};

fn main() -> Result<()> {
    base();
    let cli = Cli::parse();
    machine();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let t = cli.target.clone();
    let res = runtime.block_on(async move {
        match cli.command {
            Cmd::Ycsb(a) => ycsb::ycsb(&t, a).await,
            Cmd::Fanout(a) => fanout::fanout(&t, a).await,
            Cmd::Commit(a) => commit::commit(&t, a).await,
            Cmd::Hot(a) => hot::hot(&t, a).await,
            Cmd::Sequential(a) => inserts::inserts(&t, a, InsertMode::Sequential).await,
            Cmd::Random(a) => inserts::inserts(&t, a, InsertMode::Random).await,
            Cmd::Rules(a) => rules::rules(a),
            Cmd::Scale(a) => scale::scale(&t, a).await,
        }
    });
    // Connections still open are dropped with the runtime; do not wait for their tasks.
    runtime.shutdown_timeout(Duration::from_secs(2));
    res
}
