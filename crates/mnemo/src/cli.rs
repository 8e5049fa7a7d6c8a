//! Client verbs against a running server (README "Command line"): `write`, `context`, `search`, `export`,
//! `forget`, `import`. Human-readable output by default, `--json` prints the API's `data`.

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod import;

/// Where the server is and which collection to use.
#[derive(Args, Clone, Debug)]
pub struct Remote {
    #[arg(long, env = "MNEMO_URL", default_value = "http://127.0.0.1:8600")]
    pub url: String,
    #[arg(long, env = "MNEMO_API_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// A PEM bundle of extra trusted certificates, for a server behind a private CA (public and
    /// system roots are always trusted).
    #[arg(long, env = "MNEMO_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    #[arg(long, default_value = "default")]
    pub project: String,
    /// The collection (default: `default`; for export and forget: every collection of the project).
    #[arg(long)]
    pub collection: Option<String>,
    /// Print the API's JSON answer instead of a human-readable summary.
    #[arg(long)]
    pub json: bool,
}

impl Remote {
    fn client(&self) -> Result<Client> {
        let tls = mnemo_providers::http::TlsOptions { ca_file: self.ca_file.clone() };
        let http = mnemo_providers::http::client_builder(&tls).map_err(anyhow::Error::msg)?.build()?;
        Ok(Client { http, url: self.url.trim_end_matches('/').to_string(), key: self.key.clone() })
    }

    fn body(&self, mut v: Value) -> Value {
        v["project_name"] = json!(self.project);
        if v.get("collection_name").is_none() {
            v["collection_name"] = json!(self.collection.as_deref().unwrap_or("default"));
        }
        v
    }
}

struct Client {
    http: reqwest::Client,
    url: String,
    key: Option<String>,
}

impl Client {
    /// POSTs to `/api/memory/<path>`; returns the raw body text, or an error with the server's message.
    async fn post_raw(&self, path: &str, body: &Value) -> Result<String> {
        let mut req = self.http.post(format!("{}/api/memory/{path}", self.url)).json(body);
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if mnemo_providers::http::is_transient(&e) => {
                return Err(anyhow::Error::new(e).context(format!("{}: is `mnemo serve` running?", self.url)));
            }
            // A certificate problem: the message says what to configure (here --ca-file).
            Err(e) => bail!(
                "{}",
                mnemo_providers::http::describe(&self.url, &e)
                    .replace("tls.ca_file (env MNEMO_TLS__CA_FILE)", "--ca-file (env MNEMO_CA_FILE)")
            ),
        };
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            let msg = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or(text);
            bail!("{path}: HTTP {status}: {msg}");
        }
        Ok(text)
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let v: Value = serde_json::from_str(&self.post_raw(path, body).await?)?;
        Ok(v["data"].clone())
    }
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).expect("JSON"));
}

fn day(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default()
}

/// `mnemo write`: one message into a conversation.
pub async fn write(
    r: &Remote,
    conversation: String,
    user: Option<String>,
    role: String,
    text: String,
    flush: bool,
) -> Result<()> {
    let c = r.client()?;
    let mut meta = json!({});
    if let Some(u) = user {
        meta["user_id"] = json!(u);
    }
    let body = r.body(
        json!({"conversation_id": conversation, "messages": [{"role": role, "content": text}], "metadata": meta}),
    );
    let mut d = c.post("session/streaming_write", &body).await?;
    if flush {
        d["flush"] = c.post("session/flush", &r.body(json!({"conversation_id": conversation}))).await?;
    }
    if r.json {
        print_json(&d);
    } else {
        println!(
            "stored {} message(s) in {conversation}; {} pending ({} tokens){}",
            d["accepted"],
            d["pending_messages"],
            d["pending_tokens"],
            match (d["extraction"]["triggered"].as_bool(), d["flush"]["extraction"]["job_id"].as_str()) {
                (Some(true), _) =>
                    format!("; extraction queued ({})", d["extraction"]["reason"].as_str().unwrap_or("")),
                (_, Some(job)) => format!("; flushed, extraction queued ({job})"),
                _ => String::new(),
            }
        );
    }
    Ok(())
}

/// `mnemo context`: what `get_context` returns for the conversation.
pub async fn context(r: &Remote, conversation: String, query: Option<String>, max_tokens: Option<u32>) -> Result<()> {
    let mut body = json!({"conversation_id": conversation});
    if let Some(q) = query {
        body["query"] = json!(q);
    }
    if let Some(m) = max_tokens {
        body["max_tokens"] = json!(m);
    }
    let d = r.client()?.post("get_context", &r.body(body)).await?;
    if r.json {
        print_json(&d);
    } else if d["context_str"].as_str().unwrap_or("").is_empty() {
        println!("(nothing remembered for this conversation yet)");
    } else {
        println!("{}", d["context_str"].as_str().unwrap_or(""));
        eprintln!("({} tokens)", d["token_count"]);
    }
    Ok(())
}

/// `mnemo search`: event search, semantic with a query, newest first without.
pub async fn search(r: &Remote, query: Option<String>, user: Option<String>, limit: u32) -> Result<()> {
    let mut filter = json!({});
    if let Some(u) = user {
        filter["user_id"] = json!(u);
    }
    let mut body = json!({"filter": filter, "limit": limit});
    if let Some(q) = query {
        body["query"] = json!(q);
    }
    let d = r.client()?.post("event/search", &r.body(body)).await?;
    if r.json {
        print_json(&d);
        return Ok(());
    }
    let list = d["result_list"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no events");
    }
    for e in list {
        let text =
            e["memory_info"]["summary"].as_str().map(str::to_string).unwrap_or_else(|| e["memory_info"].to_string());
        let score = e["score"].as_f64().map(|s| format!("{s:.3}  ")).unwrap_or_default();
        println!("{score}{}  {}  {text}", day(e["time"].as_i64().unwrap_or(0)), e["id"].as_str().unwrap_or(""));
    }
    Ok(())
}

/// `mnemo forget`: deletes everything stored about a user.
pub async fn forget(r: &Remote, user: String, yes: bool) -> Result<()> {
    if !yes {
        bail!("forget deletes everything stored about {user} for good; add --yes to confirm");
    }
    let mut body = json!({"project_name": r.project, "user_id": user});
    if let Some(c) = &r.collection {
        body["collection_name"] = json!(c);
    }
    let d = r.client()?.post("user/forget", &body).await?;
    if r.json {
        print_json(&d);
    } else {
        let n = &d["deleted"];
        println!(
            "forgot {user}: {} events, {} profiles, {} messages, {} sessions, {} conversations",
            n["events"], n["profiles"], n["messages"], n["sessions"], n["conversations"]
        );
    }
    Ok(())
}

/// `mnemo retry`: failed jobs back in the queue.
pub async fn retry(r: &Remote, job: Option<String>) -> Result<()> {
    let body = r.body(match job {
        Some(id) => json!({"job_id": id}),
        None => json!({}),
    });
    let d = r.client()?.post("job/retry", &body).await?;
    if r.json {
        print_json(&d);
    } else {
        let ids: Vec<&str> = d["retried"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        match ids.len() {
            0 => println!("no failed job to retry"),
            1 => println!("queued again: {}", ids[0]),
            n => println!("queued again: {n} jobs ({})", ids.join(", ")),
        }
    }
    Ok(())
}

/// `mnemo export`: the JSON lines of `user/export`, to a file or standard output.
pub async fn export(r: &Remote, user: String, output: Option<PathBuf>) -> Result<()> {
    let mut body = json!({"project_name": r.project, "user_id": user});
    if let Some(c) = &r.collection {
        body["collection_name"] = json!(c);
    }
    let text = r.client()?.post_raw("user/export", &body).await?;
    let records = text.lines().count().saturating_sub(1);
    match output {
        Some(path) => {
            std::fs::write(&path, &text)?;
            eprintln!("exported {records} records to {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

// ------------------------------------------------------------------ import

/// Where an import stopped: lines of the file already done (next to the file, `<file>.progress`).
fn progress_path(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".progress");
    PathBuf::from(p)
}

/// `mnemo import FILE.jsonl`: conversations in the benchmark format (`{conversation_id, user_id,
/// sessions: [{session_id, time, messages: [{role, content, speaker?}]}]}`, one per line) or the
/// records of `mnemo export` (`{kind, record}` lines: messages, events, profiles). Resumable:
/// progress is kept in `FILE.jsonl.progress`, and messages carry idempotency keys, so a re-run
/// after an interruption stores nothing twice.
/// Where a file to import comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ImportFormat {
    /// One JSON object per line: the benchmark's conversations or `mnemo export` records.
    Jsonl,
    /// ChatGPT's data export: `conversations.json` (the `mapping` tree of each conversation).
    Chatgpt,
    /// Claude's data export: `conversations.json` (`chat_messages` of each conversation).
    Claude,
}

/// How chat histories are written.
pub struct ImportOptions {
    pub format: ImportFormat,
    pub restart: bool,
    /// Every conversation of a chat export is this user's.
    pub user: Option<String>,
    /// Keep the turns as short-term memory (no session is closed, nothing is extracted) until
    /// `session/flush` — or 30 days without a new turn.
    pub skip_extraction: bool,
}

pub async fn import(r: &Remote, file: PathBuf, opts: ImportOptions) -> Result<()> {
    let c = r.client()?;
    let text = std::fs::read_to_string(&file).with_context(|| format!("opening {}", file.display()))?;
    // One item per line (JSONL), or per conversation of a chat export.
    let lines: Vec<String> = match opts.format {
        ImportFormat::Jsonl => text.lines().map(str::to_string).collect(),
        ImportFormat::Chatgpt | ImportFormat::Claude => {
            let user =
                opts.user.as_deref().context("--user: a chat export is one person's; name the user it belongs to")?;
            let v: Value =
                serde_json::from_str(&text).context("conversations.json: not JSON (unzip the export first)")?;
            let convs = match opts.format {
                ImportFormat::Chatgpt => import::chatgpt(&v)?,
                _ => import::claude(&v)?,
            };
            convs.into_iter().map(|conv| conv.into_line(user).to_string()).collect()
        }
    };
    let restart = opts.restart;
    let progress = progress_path(&file);
    let done: usize = if restart {
        0
    } else {
        std::fs::read_to_string(&progress).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    };
    if done > 0 {
        eprintln!("resuming after line {done} (delete {} or pass --restart to start over)", progress.display());
    }
    let bar = ProgressBar::new(lines.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} lines  {per_sec}  eta {eta}  {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_position(done as u64);
    let start = Instant::now();
    let (mut messages, mut records, mut errors) = (0u64, 0u64, 0u64);
    // Exported events go in batches (`event/batch_add`): runs of event lines of one collection.
    let mut batch = EventBatch::default();
    for (i, line) in lines.iter().enumerate().skip(done) {
        if line.trim().is_empty() {
            continue;
        }
        let event = serde_json::from_str::<Value>(line).ok().filter(|v| v["kind"] == "event");
        if let Some(v) = &event {
            let collection = exported_collection(r, v);
            if batch.collection != collection || batch.items.len() == mnemo_core::service::MAX_BATCH_EVENTS {
                let (stored, failed) = batch.flush(r, &c, &bar, &progress).await?;
                (records, errors) = (records + stored, errors + failed);
                batch.collection = collection;
            }
            batch.items.push((i + 1, event_item(&v["record"])));
            bar.set_position(i as u64 + 1);
            continue;
        }
        let (stored, failed) = batch.flush(r, &c, &bar, &progress).await?;
        (records, errors) = (records + stored, errors + failed);
        match import_line(r, &c, line, &opts).await {
            Ok((m, n)) => {
                messages += m;
                records += n;
            }
            Err(e) => {
                errors += 1;
                bar.suspend(|| eprintln!("line {}: {e:#}", i + 1));
            }
        }
        std::fs::write(&progress, (i + 1).to_string())?;
        bar.set_position(i as u64 + 1);
        bar.set_message(format!("{messages} messages, {records} records, {errors} errors"));
    }
    let (stored, failed) = batch.flush(r, &c, &bar, &progress).await?;
    (records, errors) = (records + stored, errors + failed);
    bar.finish();
    let secs = start.elapsed().as_secs_f64().max(1e-3);
    let summary = json!({"lines": lines.len() - done, "messages": messages, "records": records, "errors": errors,
        "seconds": (secs * 100.0).round() / 100.0, "messages_per_second": (messages as f64 / secs).round()});
    if r.json {
        print_json(&summary);
    } else {
        println!(
            "imported {} lines: {messages} messages, {records} events/profiles in {secs:.1} s ({:.0} messages/s), {errors} errors",
            lines.len() - done,
            messages as f64 / secs
        );
    }
    std::io::stdout().flush()?;
    if errors > 0 {
        bail!("{errors} lines failed (see above); fix them and re-run with --restart, or import them separately");
    }
    Ok(())
}

fn parse_time(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").map(|t| t.and_utc().timestamp_millis())
        })
        .ok()
}

/// Consecutive exported events of one collection, with their line numbers, not sent yet.
#[derive(Default)]
struct EventBatch {
    collection: String,
    items: Vec<(usize, Value)>,
}

impl EventBatch {
    /// Sends the events in one `event/batch_add` and records the progress; returns (stored,
    /// failed). A batch is stored whole or not at all, so a refused one is sent again event by
    /// event: only its bad lines fail, each reported with its own error.
    async fn flush(&mut self, r: &Remote, c: &Client, bar: &ProgressBar, progress: &Path) -> Result<(u64, u64)> {
        let Some(&(last, _)) = self.items.last() else { return Ok((0, 0)) };
        let items = std::mem::take(&mut self.items);
        let events: Vec<&Value> = items.iter().map(|(_, v)| v).collect();
        let body = r.body(json!({"collection_name": self.collection, "events": events}));
        let (mut stored, mut failed) = (0, 0);
        if c.post("event/batch_add", &body).await.is_ok() {
            stored = items.len() as u64;
        } else {
            for (line, mut item) in items {
                item["collection_name"] = json!(self.collection);
                match c.post("event/add", &r.body(item)).await {
                    Ok(_) => stored += 1,
                    Err(e) => {
                        failed += 1;
                        bar.suspend(|| eprintln!("line {line}: {e:#}"));
                    }
                }
            }
        }
        std::fs::write(progress, last.to_string())?;
        Ok((stored, failed))
    }
}

/// --collection wins; otherwise an exported record goes back to the collection it came from.
fn exported_collection(r: &Remote, v: &Value) -> String {
    r.collection.as_deref().or(v["collection_name"].as_str()).unwrap_or("default").to_string()
}

/// An exported event as `event/add` (and each item of `event/batch_add`) takes it.
fn event_item(rec: &Value) -> Value {
    let mut item = json!({"event_type": rec["memory_type"], "user_id": rec["user_id"], "assistant_id": rec["assistant_id"],
        "memory_info": rec["memory_info"], "time": rec["time"], "class": rec["class"]});
    for k in ["group_id", "session_id", "conversation_id", "scope"] {
        if rec[k].is_string() {
            item[k] = rec[k].clone();
        }
    }
    item
}

/// Imports one line; returns (messages, other records).
async fn import_line(r: &Remote, c: &Client, line: &str, opts: &ImportOptions) -> Result<(u64, u64)> {
    let v: Value = serde_json::from_str(line).context("not JSON")?;
    if let Some(sessions) = v["sessions"].as_array() {
        let conv = v["conversation_id"].as_str().context("conversation_id: missing")?;
        let mut meta = v.get("metadata").cloned().unwrap_or_else(|| json!({}));
        if let Some(u) = opts.user.as_deref().or(v["user_id"].as_str()) {
            meta["user_id"] = json!(u);
        }
        // Held as short-term memory: no trigger fires (only a flush, or 30 days of silence).
        let trigger = opts
            .skip_extraction
            .then(|| json!({"token_count": 10_000_000, "message_count": 100_000, "wait_timeout": 2_592_000}));
        let mut n = 0;
        for s in sessions {
            let sid = s["session_id"].as_str().unwrap_or("session");
            let t0 = s["time"].as_str().and_then(parse_time);
            let msgs: Vec<Value> = s["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, m)| {
                    let key = m["key"].as_str().map_or_else(|| format!("import:{conv}:{sid}:{i}"), str::to_string);
                    let mut out = json!({"role": m["role"], "content": m["content"], "idempotency_key": key});
                    if let Some(name) = m["speaker"].as_str().or(m["name"].as_str()) {
                        out["name"] = json!(name);
                    }
                    match (m["time"].as_i64(), t0) {
                        (Some(t), _) => out["time"] = json!(t),
                        (None, Some(t)) => out["time"] = json!(t + i as i64 * 1000),
                        (None, None) => {}
                    }
                    out
                })
                .collect();
            n += msgs.len() as u64;
            for chunk in msgs.chunks(100) {
                let mut body = json!({"conversation_id": conv, "messages": chunk, "metadata": meta});
                if let Some(t) = &trigger {
                    body["extract_trigger"] = t.clone();
                }
                c.post("session/streaming_write", &r.body(body)).await?;
            }
            if !opts.skip_extraction {
                c.post("session/flush", &r.body(json!({"conversation_id": conv}))).await?;
            }
        }
        return Ok((n, 0));
    }
    let rec = &v["record"];
    let collection = exported_collection(r, &v);
    match v["kind"].as_str() {
        Some("export" | "conversation" | "session" | "job") => Ok((0, 0)),
        Some("message") => {
            let conv = rec["conversation_id"].as_str().context("record.conversation_id: missing")?;
            let msg = json!({"role": rec["role"], "content": rec["content"], "time": rec["time"],
                "idempotency_key": format!("import:{conv}:{}", rec["message_id"])});
            let body = r.body(json!({"collection_name": collection, "conversation_id": conv, "messages": [msg]}));
            c.post("session/streaming_write", &body).await?;
            Ok((1, 0))
        }
        Some("event") => {
            let mut body = event_item(rec);
            body["collection_name"] = json!(collection);
            c.post("event/add", &r.body(body)).await?;
            Ok((0, 1))
        }
        Some("profile") => {
            let body = json!({"collection_name": collection, "profile_type": rec["profile_type"], "user_id": rec["user_id"],
                "content": rec["content"], "attributes": rec["attributes"]});
            c.post("profile/add", &r.body(body)).await?;
            Ok((0, 1))
        }
        other => bail!("unknown line: neither a conversation with sessions nor an exported record (kind {other:?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_the_benchmark_format_parse() {
        assert_eq!(parse_time("2023-05-08T13:56:00"), Some(1_683_554_160_000));
        assert_eq!(parse_time("2023-05-08T13:56:00+08:00"), Some(1_683_525_360_000));
        assert_eq!(parse_time("8 May"), None);
    }
}
