//! The command line: the target relay's arguments (global) and one subcommand per benchmark.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "hearth-bench",
    version,
    about = "Benchmarks a hearth-relay over its WebSocket protocol; one JSON line per measurement"
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Args, Clone)]
pub(crate) struct TargetArgs {
    /// WebSocket URL of a running relay (`ws://127.0.0.1:PORT/v1/ws`).
    #[arg(long, global = true, env = "HEARTH_BENCH_URL")]
    pub(crate) url: Option<String>,
    /// Start `hearth-relay serve` on a fresh temporary data directory, and stop it after.
    #[arg(long, global = true)]
    pub(crate) spawn: bool,
    /// The relay binary `--spawn` runs (default: `hearth-relay` next to this binary).
    #[arg(long, global = true)]
    pub(crate) relay_bin: Option<PathBuf>,
    /// Pid of the relay behind `--url`, to report its CPU use (known with `--spawn`).
    #[arg(long, global = true)]
    pub(crate) relay_pid: Option<u32>,
    /// Database the benchmark uses.
    #[arg(long, global = true, default_value = "bench")]
    pub(crate) database: String,
    /// More arguments for the relay `--spawn` starts (repeat it: `--relay-arg=--rules
    /// --relay-arg=rules/bench.rules`).
    #[arg(long, global = true, allow_hyphen_values = true)]
    pub(crate) relay_arg: Vec<String>,
    /// Auth token sent in `Hello` (a relay without keys ignores it).
    #[arg(long, global = true, env = "HEARTH_BENCH_TOKEN", default_value = "")]
    pub(crate) token: String,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Workload {
    /// 50% reads, 50% updates.
    A,
    /// 95% reads, 5% updates.
    B,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// YCSB workload A or B: load N 900-byte documents, then run open-loop at each target QPS.
    Ycsb(YcsbArgs),
    /// N listening connections on one document, one write per interval; notification latency.
    Fanout(FanoutArgs),
    /// Sequential commit latency vs document size and vs field count.
    Commit(CommitArgs),
    /// C clients incrementing one counter document as fast as acknowledgements allow.
    Hot(HotArgs),
    /// Inserts with monotonically increasing ids and indexed timestamp (random as baseline).
    Sequential(InsertArgs),
    /// Inserts with random auto ids and random indexed values.
    Random(InsertArgs),
    /// Security rules decisions in this process (no relay): per write and per list proof.
    Rules(RulesArgs),
    /// Relays over one PostgreSQL database (or one relay on its embedded store):
    /// cross-relay notification latency and committed batches per second.
    Scale(ScaleArgs),
}

#[derive(Args)]
pub(crate) struct ScaleArgs {
    /// The PostgreSQL database the relays share; without it, one relay on its embedded
    /// store (the baseline).
    #[arg(long)]
    pub(crate) postgres: Option<String>,
    /// Relays started over the PostgreSQL database.
    #[arg(long, default_value_t = 2)]
    pub(crate) relays: usize,
    /// Writes timed for the notification latency, one per interval.
    #[arg(long, default_value_t = 500)]
    pub(crate) writes: usize,
    /// Interval between those writes, in milliseconds.
    #[arg(long, default_value_t = 10)]
    pub(crate) interval_ms: u64,
    /// Closed-loop writers for the throughput measurement, spread over the relays.
    #[arg(long, default_value_t = 32)]
    pub(crate) writers: usize,
    /// Seconds of the throughput measurement.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) seconds: f64,
}

#[derive(Args)]
pub(crate) struct RulesArgs {
    /// Decisions timed per rule set and kind.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) iterations: usize,
}

#[derive(Args)]
pub(crate) struct YcsbArgs {
    #[arg(long, value_enum)]
    pub(crate) workload: Workload,
    /// Records loaded before the run (uniform key choice over them).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) records: usize,
    /// Target operation rates, one measurement step each.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) target_qps: Vec<f64>,
    /// Measured seconds per step.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) seconds: f64,
    /// Unmeasured seconds at the start of each step (the paper drops the first half).
    #[arg(long, default_value_t = 2.0)]
    pub(crate) warmup: f64,
    /// Connections the operations are spread over.
    #[arg(long, default_value_t = 16)]
    pub(crate) clients: usize,
    /// Bytes of the single field of each record.
    #[arg(long, default_value_t = 900)]
    pub(crate) value_bytes: usize,
    /// Most operations outstanding; past it the generator waits (and the lateness counts).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) max_inflight: usize,
    /// Override the workload's read fraction (0..1), e.g. 1.0 for a read-only control run.
    #[arg(long)]
    pub(crate) read_proportion: Option<f64>,
    /// Relays spawned, the connections spread over them (more than one needs them to share
    /// a store: `--relay-arg=--postgres=URL`); CPU and metrics are those of the first.
    #[arg(long, default_value_t = 1)]
    pub(crate) relays: usize,
}

#[derive(Args)]
pub(crate) struct FanoutArgs {
    /// Listening connections, one measurement per value.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) listeners: Vec<usize>,
    /// Writes to the listened document, one per interval.
    #[arg(long, default_value_t = 10)]
    pub(crate) writes: u64,
    /// Interval between writes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub(crate) interval_ms: u64,
    /// Connections opened concurrently while setting up.
    #[arg(long, default_value_t = 200)]
    pub(crate) connect_concurrency: usize,
    /// How long to wait for the last notifications after the last write, in seconds.
    #[arg(long, default_value_t = 10)]
    pub(crate) drain_seconds: u64,
    /// How the listening connections receive: `lean` (one minimal WebSocket reader per
    /// connection that decodes every frame with the protocol codec) or `client` (the full
    /// native `Client`, with its reader task, per-target buffering and snapshot copies).
    #[arg(long, value_enum, default_value_t = ListenerKind::Lean)]
    pub(crate) listener: ListenerKind,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
pub(crate) enum ListenerKind {
    Lean,
    Client,
}

#[derive(Args)]
pub(crate) struct CommitArgs {
    /// Sizes of the single string field, in bytes (clamped to fit the 1 MiB document limit).
    #[arg(long, value_delimiter = ',')]
    pub(crate) doc_bytes: Vec<usize>,
    /// Numbers of integer fields (each one an index entry).
    #[arg(long, value_delimiter = ',')]
    pub(crate) fields: Vec<usize>,
    /// Measured commits per point.
    #[arg(long, default_value_t = 50)]
    pub(crate) count: usize,
    /// Unmeasured commits before each point.
    #[arg(long, default_value_t = 3)]
    pub(crate) warmup: usize,
}

#[derive(Args)]
pub(crate) struct HotArgs {
    #[arg(long, default_value_t = 32)]
    pub(crate) clients: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) seconds: f64,
    /// Increments each client keeps outstanding.
    #[arg(long, default_value_t = 1)]
    pub(crate) inflight: usize,
    /// Skip the baseline (the same clients each incrementing its own document).
    #[arg(long)]
    pub(crate) no_baseline: bool,
}

#[derive(Args, Clone)]
pub(crate) struct InsertArgs {
    /// Documents inserted (one per write batch).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) docs: u64,
    #[arg(long, default_value_t = 32)]
    pub(crate) clients: usize,
    /// Inserts each client keeps outstanding.
    #[arg(long, default_value_t = 1)]
    pub(crate) inflight: usize,
    /// (`sequential` only) skip the `random` baseline run.
    #[arg(long)]
    pub(crate) no_baseline: bool,
}
