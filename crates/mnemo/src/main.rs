//! `mnemo`: the one binary. A thin command-line layer over the library crates: it parses flags,
//! loads the layered config and hands over to the composition root (`app`).

mod app;
mod bench;
mod cli;
mod config;
mod demo;
mod selftest;

use anyhow::Result;
use clap::{Parser, Subcommand};
use config::Config;
use std::path::PathBuf;

/// mimalloc instead of glibc's malloc: a request allocates and frees many small buffers on
/// several threads, and glibc's malloc/free/consolidate were ~9% of the server's CPU on the write
/// path (docs/history/benchmarks.md, "Write path").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An HTTP client builder for the benchmarks and the self-test (they talk to loopback servers
/// they start; the TLS recipe is the one every client uses).
fn http_client() -> Result<reqwest::ClientBuilder> {
    mnemo_providers::http::client_builder(&Default::default()).map_err(anyhow::Error::msg)
}

#[derive(Parser)]
#[command(name = "mnemo", version, about = "mnemo — a memory service for LLM applications")]
struct Cli {
    /// YAML config file (every key optional; see mnemo.example.yaml).
    #[arg(long, global = true, env = "MNEMO_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server.
    Serve {
        /// Address to listen on (default 127.0.0.1:8600). Non-loopback addresses require API keys.
        #[arg(long)]
        bind: Option<String>,
        /// Data directory (default ./mnemo-data).
        #[arg(long)]
        data: Option<PathBuf>,
    },
    /// The whole loop on a temporary embedded store: write, extract, print get_context.
    Demo,
    /// Print the OpenAPI 3 document of the HTTP API (committed as docs/openapi.json).
    Openapi,
    /// Re-embed every collection indexed with another embedding model than the configured one
    /// (e.g. after an upgrade changed the default), with progress; resumable. Stop the server
    /// first when the store is SQLite.
    Reindex {
        /// Data directory (default: store.path of the config).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Re-embed every collection, those of the configured model too (e.g. vectors made with
        /// embedding.fast_int8 on a CPU without VNNI, or before exact int8 was the default).
        #[arg(long)]
        all: bool,
    },
    /// An MCP server on stdio over the same store (for Claude Code, Cursor, Codex…).
    Mcp {
        /// Data directory (default ./mnemo-data).
        #[arg(long)]
        data: Option<PathBuf>,
        /// The user the tools act for (default: config `mcp.user_id`).
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        collection: Option<String>,
    },
    /// Write one message into a conversation of a running server (`session/streaming_write`).
    Write {
        #[command(flatten)]
        remote: cli::Remote,
        #[arg(long)]
        conversation: String,
        #[arg(long)]
        user: Option<String>,
        #[arg(long, default_value = "user")]
        role: String,
        /// Close the conversation's open messages into a session right after (extraction starts).
        #[arg(long)]
        flush: bool,
        text: String,
    },
    /// Print what `get_context` returns for a conversation.
    Context {
        #[command(flatten)]
        remote: cli::Remote,
        #[arg(long)]
        conversation: String,
        #[arg(long)]
        query: Option<String>,
        #[arg(long)]
        max_tokens: Option<u32>,
    },
    /// Search events: semantic with a query, newest first without.
    Search {
        #[command(flatten)]
        remote: cli::Remote,
        query: Option<String>,
        #[arg(long)]
        user: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: u32,
    },
    /// Everything stored about a user, as JSON lines (`user/export`).
    Export {
        #[command(flatten)]
        remote: cli::Remote,
        #[arg(long)]
        user: String,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Delete everything stored about a user (`user/forget`); needs --yes.
    Forget {
        #[command(flatten)]
        remote: cli::Remote,
        #[arg(long)]
        user: String,
        #[arg(long)]
        yes: bool,
    },
    /// Put failed extraction jobs back in the queue (`job/retry`): one by --job, else every failed
    /// job of the collection.
    Retry {
        #[command(flatten)]
        remote: cli::Remote,
        #[arg(long)]
        job: Option<String>,
    },
    /// Import conversations — the benchmark JSONL format, exported records, or a ChatGPT or Claude
    /// data export (`conversations.json`) — resumably and idempotently, with progress.
    Import {
        #[command(flatten)]
        remote: cli::Remote,
        file: PathBuf,
        /// The file's format.
        #[arg(long = "from", value_enum, default_value = "jsonl")]
        format: cli::ImportFormat,
        /// The user every conversation belongs to (required for chatgpt and claude exports).
        #[arg(long)]
        user: Option<String>,
        /// Store the turns as short-term memory without extracting them (until session/flush).
        #[arg(long)]
        skip_extraction: bool,
        /// Ignore FILE.progress and start from the first item.
        #[arg(long)]
        restart: bool,
        /// A large load into PostgreSQL: drop the HNSW indexes (of the store in this machine's
        /// config) for the import and build them once after — many times faster than keeping
        /// them up to date row by row. Searches over large scopes run exact meanwhile.
        #[arg(long)]
        bulk: bool,
    },
    /// Self-tests against a running server.
    Selftest {
        #[command(subcommand)]
        which: SelftestCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
enum SelftestCommand {
    /// Tenant isolation: two keys for two projects; every read path tried with the other's key and ids.
    Isolation {
        #[arg(long, default_value = "http://127.0.0.1:8600")]
        url: String,
        #[arg(long)]
        key_a: String,
        #[arg(long, default_value = "default")]
        project_a: String,
        #[arg(long)]
        key_b: String,
        #[arg(long)]
        project_b: String,
        /// Optional: a key of project A with only the `read` scope; every write and admin call
        /// made with it must be refused.
        #[arg(long)]
        read_key_a: Option<String>,
        /// Optional: an end-user token of project A (a key with `user_id`); nothing of the other
        /// users may reach it.
        #[arg(long)]
        user_token_a: Option<String>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Crash harness: SIGKILL the server under concurrent writes, restart, repeat; then verify
    /// nothing acknowledged was lost, every session was extracted once, deadlines still fire.
    Crash {
        #[arg(long, default_value_t = 20)]
        cycles: usize,
        #[arg(long, default_value_t = 16)]
        writers: usize,
        /// Each cycle kills the server after a random 0..this many milliseconds.
        #[arg(long, default_value_t = 2000)]
        max_cycle_ms: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Search latency against the number of events in one user's scope (exact scan vs an in-memory floor).
    Scope {
        #[arg(long, value_delimiter = ',', default_values_t = vec![1000usize, 10000, 50000])]
        sizes: Vec<usize>,
    },
    /// Retrieval quality and latency on LoCoMo (shared/bench/locomo/dev): BM25 and vector baselines vs hybrid.
    Locomo {
        /// The folder with conversations.jsonl and questions.jsonl.
        #[arg(default_value = "../shared/bench/locomo/dev")]
        dir: PathBuf,
        /// Also run the end-to-end figure (streaming_write → rules extraction → get_context).
        #[arg(long)]
        e2e: bool,
        /// Only the end-to-end figure (implies --e2e).
        #[arg(long)]
        e2e_only: bool,
        /// Distractors: every conversation also holds the sessions of this set's conversations,
        /// spoken by its own user and interleaved in time (e.g. bench/en-life with
        /// ../shared/bench/locomo/dev): a long-lived user's memory, where the small sets saturate.
        #[arg(long)]
        haystack: Option<PathBuf>,
        #[command(flatten)]
        qa: bench::locomo_qa::QaArgs,
    },
    /// Extraction quality on a labelled zh + en set: the rules baseline, and a real model with --llm-url.
    Extraction {
        /// An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8081/v1 (see scripts/setup-llm).
        #[arg(long, env = "MNEMO_TEST_LLM_URL")]
        llm_url: Option<String>,
        #[arg(long, default_value = "local")]
        model: String,
        /// Seconds per LLM request at most.
        #[arg(long, default_value_t = 300)]
        timeout_secs: u64,
        /// Print every extraction.
        #[arg(long)]
        verbose: bool,
    },
    /// Search, get_context, cold start, RSS and disk at large sizes (events spread over users).
    Scale {
        #[arg(long, value_delimiter = ',', default_values_t = vec![100_000usize, 1_000_000])]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 1000)]
        users: usize,
        /// Events per insert while filling: 1 = a transaction per event (the write path of
        /// `event/add`); more = `insert_events` batches inside a bulk load (PostgreSQL builds its
        /// HNSW index after the load, and the rate includes that build).
        #[arg(long, default_value_t = 1)]
        batch: usize,
        /// What the events look like: `extracted` (a summary, four turns and their vectors, as
        /// the rules extractor writes them) or `summary` (ten words, the shape of earlier figures).
        #[arg(long, value_enum, default_value = "extracted")]
        events: bench::EventShape,
        #[command(flatten)]
        stores: bench::Stores,
    },
    /// The embedding model's floor on this machine: single-text latency by length (query and
    /// stored text) and throughput by batch size and concurrent callers.
    Embed {
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Webhooks: what the outbox costs an event insert (no endpoint vs one, alternating rounds)
    /// and how fast it is delivered to a local receiver.
    Webhooks {
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        #[command(flatten)]
        stores: bench::Stores,
    },
    /// Load / soak: a mix of writes, get_context and searches from many clients; throughput,
    /// p50/p99 per endpoint, errors, RSS over time.
    Load {
        /// A running server; default: an in-process server on a temporary data directory.
        #[arg(long)]
        url: Option<String>,
        #[arg(long, env = "MNEMO_API_KEY")]
        key: Option<String>,
        /// With --url: the server's process id, to sample its RSS.
        #[arg(long)]
        pid: Option<u32>,
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value_t = 200)]
        users: usize,
        #[arg(long, default_value_t = 60)]
        write_pct: u32,
        #[arg(long, default_value_t = 20)]
        context_pct: u32,
        /// Every query a new text (each one embedded) instead of a few repeated topics.
        #[arg(long)]
        fresh_queries: bool,
        /// After the run, wait up to this many seconds for the extraction backlog to drain.
        #[arg(long, default_value_t = 0)]
        drain_seconds: u64,
    },
    /// Concurrent streaming_write clients: messages/s and ack latency, against GET /healthz as baseline.
    Write {
        /// A running server; default: an in-process server on a temporary data directory.
        #[arg(long)]
        url: Option<String>,
        #[arg(long, env = "MNEMO_API_KEY")]
        key: Option<String>,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Seconds per measured run.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Messages per session (the trigger). 20 = the default, so extraction runs alongside;
        /// use a huge value to measure the write path alone.
        #[arg(long, default_value_t = 20)]
        message_count: u64,
        #[command(flatten)]
        stores: bench::Stores,
    },
}

/// A failed command prints its error and the chain of causes, and exits 1. Not anyhow's `Debug`
/// form, which appends a backtrace whenever `RUST_BACKTRACE` is set: a bad flag or an unreachable
/// server is not a crash (a panic still prints its backtrace).
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn error_chain(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    let causes: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
    if !causes.is_empty() {
        out.push_str("\n\nCaused by:");
        for (i, c) in causes.iter().enumerate() {
            match causes.len() {
                1 => out.push_str(&format!("\n    {c}")),
                _ => out.push_str(&format!("\n    {i}: {c}")),
            }
        }
    }
    out
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    let mut cfg = Config::load(cli.config.as_deref(), std::env::vars())?;
    // The server logs its work; one-shot commands only warnings, so their output stays readable.
    // rmcp's per-session INFO lines are noise in a server log (mnemo logs the client at DEBUG).
    let default_level = if matches!(cli.command, Command::Serve { .. }) { "info,rmcp=warn" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MNEMO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // A server logs a line per request: one thread writes them, so a request's worker never makes
    // a write(2) of its own or waits for a slow reader of stderr. Lines are dropped (not waited
    // for) only past 128k unwritten ones; the guard writes what is left when main returns.
    let (stderr, _flush_on_exit) = tracing_appender::non_blocking(std::io::stderr());
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(stderr);
    match cfg.log.format.as_str() {
        "json" => log.json().init(),
        "text" => log.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        other => anyhow::bail!("log.format: must be text or json, got {other:?}"),
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match cli.command {
        Command::Serve { bind, data } => {
            if let Some(b) = bind {
                cfg.server.bind = b;
            }
            if let Some(d) = data {
                cfg.store.path = d;
            }
            rt.block_on(app::serve(cfg))
        }
        Command::Demo => rt.block_on(demo::run(cfg)),
        Command::Reindex { data, all } => {
            if let Some(d) = data {
                cfg.store.path = d;
            }
            rt.block_on(app::reindex(cfg, all))
        }
        Command::Openapi => {
            println!("{}", serde_json::to_string_pretty(&mnemo_http::openapi::document())?);
            Ok(())
        }
        Command::Mcp { data, user, project, collection } => {
            if let Some(d) = data {
                cfg.store.path = d;
            }
            if let Some(u) = user {
                cfg.mcp.user_id = u;
            }
            if let Some(p) = project {
                cfg.mcp.project = p;
            }
            if let Some(c) = collection {
                cfg.mcp.collection = c;
            }
            rt.block_on(app::mcp_stdio(cfg))
        }
        Command::Write { remote, conversation, user, role, flush, text } => {
            rt.block_on(cli::write(&remote, conversation, user, role, text, flush))
        }
        Command::Context { remote, conversation, query, max_tokens } => {
            rt.block_on(cli::context(&remote, conversation, query, max_tokens))
        }
        Command::Search { remote, query, user, limit } => rt.block_on(cli::search(&remote, query, user, limit)),
        Command::Export { remote, user, output } => rt.block_on(cli::export(&remote, user, output)),
        Command::Forget { remote, user, yes } => rt.block_on(cli::forget(&remote, user, yes)),
        Command::Retry { remote, job } => rt.block_on(cli::retry(&remote, job)),
        Command::Import { remote, file, format, user, skip_extraction, restart, bulk } => rt.block_on(async {
            let opts = cli::ImportOptions { format, restart, user, skip_extraction };
            if !bulk {
                return cli::import(&remote, file, opts).await;
            }
            if cfg.store.engine != "postgres" {
                eprintln!("--bulk: the {} store keeps no index to defer; importing as usual", cfg.store.engine);
                return cli::import(&remote, file, opts).await;
            }
            let store = app::open_store(&cfg).await?;
            store.begin_bulk_load().await?;
            let imported = cli::import(&remote, file, opts).await;
            let t = std::time::Instant::now();
            eprintln!("building the vector indexes…");
            store.end_bulk_load().await?;
            eprintln!("vector indexes built in {:.1} s", t.elapsed().as_secs_f64());
            imported
        }),
        Command::Selftest {
            which: SelftestCommand::Isolation { url, key_a, project_a, key_b, project_b, read_key_a, user_token_a },
        } => rt.block_on(selftest::run(selftest::Isolation {
            url,
            key_a,
            project_a,
            key_b,
            project_b,
            read_key_a,
            user_token_a,
        })),
        Command::Bench { which: BenchCommand::Crash { cycles, writers, max_cycle_ms, seed } } => {
            rt.block_on(bench::crash::run(bench::crash::CrashBench {
                cycles: cycles.max(1),
                writers: writers.max(1),
                max_cycle_ms,
                seed,
            }))
        }
        Command::Bench { which: BenchCommand::Extraction { llm_url, model, timeout_secs, verbose } } => {
            rt.block_on(bench::extraction::run(llm_url, model, timeout_secs, verbose))
        }
        Command::Bench {
            which:
                BenchCommand::Load {
                    url,
                    key,
                    pid,
                    clients,
                    seconds,
                    users,
                    write_pct,
                    context_pct,
                    fresh_queries,
                    drain_seconds,
                },
        } => {
            if write_pct + context_pct > 100 {
                anyhow::bail!("--write-pct + --context-pct: must be at most 100, got {}", write_pct + context_pct);
            }
            rt.block_on(bench::load::run(
                bench::load::LoadBench {
                    url,
                    key,
                    pid,
                    clients: clients.max(1),
                    seconds: seconds.max(1),
                    users,
                    write_pct,
                    context_pct,
                    fresh_queries,
                    drain_seconds,
                },
                cfg,
            ))
        }
        Command::Bench { which: BenchCommand::Scale { sizes, users, batch, events, stores } } => {
            rt.block_on(bench::scale::run(&sizes, users.max(1), batch.clamp(1, 10_000), events, stores, cfg))
        }
        Command::Bench { which: BenchCommand::Scope { sizes } } => rt.block_on(bench::scope::run(&sizes)),
        Command::Bench { which: BenchCommand::Embed { runs } } => rt.block_on(bench::embed::run(cfg, runs.max(5))),
        Command::Bench { which: BenchCommand::Webhooks { events, stores } } => {
            rt.block_on(bench::webhooks::run(events.max(1), stores, cfg))
        }
        Command::Bench { which: BenchCommand::Locomo { dir, e2e, e2e_only, haystack, qa } } => {
            let e2e = e2e || e2e_only;
            rt.block_on(bench::locomo::run(&dir, e2e, e2e_only, haystack.as_deref(), qa.requested(), cfg))
        }
        Command::Bench {
            which: BenchCommand::Write { url, key, concurrency, seconds, runs, message_count, stores },
        } => rt.block_on(bench::run(
            bench::WriteBench {
                url,
                key,
                concurrency: concurrency.max(1),
                seconds: seconds.max(1),
                runs: runs.max(1),
                message_count: message_count.clamp(1, 100_000),
            },
            stores,
            cfg,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::error_chain;
    use anyhow::Context;

    #[test]
    fn an_error_prints_its_causes_and_no_backtrace() {
        let one: anyhow::Result<()> = Err(std::io::Error::other("refused")).context("connecting to the server");
        assert_eq!(error_chain(&one.unwrap_err()), "connecting to the server\n\nCaused by:\n    refused");
        let two: anyhow::Result<()> =
            Err(std::io::Error::other("refused")).context("connecting").context("mnemo write: the server");
        assert_eq!(
            error_chain(&two.unwrap_err()),
            "mnemo write: the server\n\nCaused by:\n    0: connecting\n    1: refused"
        );
        assert_eq!(error_chain(&anyhow::anyhow!("--limit: must be at least 1")), "--limit: must be at least 1");
    }
}
