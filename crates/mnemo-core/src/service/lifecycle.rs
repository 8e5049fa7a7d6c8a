//! Forgetting (seed 002 §4.2): expiry, archiving, folding `process` events, daily digests.

use super::*;
use crate::embed::EmbedKind;
use crate::error::CoreResult;
use serde_json::{Map, Value};
use std::time::Duration;

/// Forgetting (seed 002 §4.2): temporary memories expire, unused ones are archived.
#[derive(Clone, Debug)]
pub struct LifecycleConfig {
    /// TTL of a `temporary` event unless the write gives one.
    pub temporary_ttl: Duration,
    /// Events not hit for this long are archived (kept, not searched by default).
    pub archive_after: Duration,
    /// How often scheduled maintenance runs.
    pub maintenance_interval: Duration,
    /// `process` events older than this are folded, per user and day, into one summary event.
    pub fold_process_after: Duration,
    /// Write a `daily_digest` per user for each finished day (last 7 days) that has events.
    pub daily_digest: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            temporary_ttl: Duration::from_secs(7 * 86_400),
            archive_after: Duration::from_secs(90 * 86_400),
            maintenance_interval: Duration::from_secs(86_400),
            fold_process_after: Duration::from_secs(86_400),
            daily_digest: true,
        }
    }
}

impl Service {
    /// One maintenance pass over the given collections (all when `None`): deletes expired events
    /// that were never hit, archives events not hit for `archive_after`. Each run is recorded.
    pub async fn maintain(&self, project: Option<&str>, trigger: &str) -> CoreResult<Vec<MaintenanceRun>> {
        let now = self.now();
        let archive_before = now - self.config.lifecycle.archive_after.as_millis() as i64;
        let collections = match project {
            Some(p) => self.store.list_collections(p).await?,
            None => self.store.all_collections().await?,
        };
        let mut runs = Vec::new();
        for c in collections {
            let mut run = self.store.run_maintenance(c.id, now, archive_before, trigger).await?;
            let (folded, digests) = self.fold_and_digest(&c, now).await?;
            if folded + digests > 0 {
                self.store.note_maintenance(c.id, folded, digests).await?;
                run.folded = folded;
                run.digests = digests;
            }
            if run.expired + run.archived > 0 {
                tracing::info!(collection = %c.collection_name, expired = run.expired, archived = run.archived, "maintenance");
            }
            runs.push(run);
        }
        Ok(runs)
    }

    /// Folds old `process` events per user and day into one summary, and writes the daily digest
    /// of each user for each finished day of the last week that has none yet. Extractive and
    /// deterministic (the LLM extractor can do better later). Returns (events folded, digests).
    pub(super) async fn fold_and_digest(&self, c: &Collection, now: Millis) -> CoreResult<(u64, u64)> {
        const DAY: i64 = 86_400_000;
        let today = now.div_euclid(DAY) * DAY;
        let filter = EventFilter { start_time: Some(today - 7 * DAY), end_time: Some(now), ..Default::default() };
        let events = self.store.list_events(c.id, filter, 5000).await?;
        let user_key = |e: &Event| e.user_id.first().cloned().unwrap_or_default();
        let join = |texts: Vec<String>, max: usize| -> (String, bool) {
            let zh = crate::text::looks_chinese(&texts.concat());
            let s = texts.join(if zh { "；" } else { "; " });
            let cut: String = s.chars().take(max).collect();
            (if cut.len() < s.len() { format!("{cut}…") } else { s }, zh)
        };
        let day_name = |t: Millis| crate::context::format_time(t)[..10].to_string();

        // Fold: process notes of one user and day become one summary.
        let fold_before = now - self.config.lifecycle.fold_process_after.as_millis() as i64;
        let mut groups: std::collections::BTreeMap<(String, i64), Vec<&Event>> = Default::default();
        for e in events.iter().filter(|e| e.class == "process" && e.status == "active" && e.time < fold_before) {
            groups.entry((user_key(e), e.time.div_euclid(DAY))).or_default().push(e);
        }
        let mut folded = 0;
        for ((_, day), mut group) in groups.into_iter().filter(|(_, g)| g.len() >= 2) {
            group.sort_by_key(|e| e.time);
            let (text, zh) = join(group.iter().map(|e| e.text()).collect(), 400);
            let summary =
                format!("{} {}: {text}", day_name(day * DAY), if zh { "过程记录汇总" } else { "process notes" });
            let mut info = Map::new();
            info.insert("summary".into(), Value::String(summary.clone()));
            let union = |f: fn(&Event) -> &Vec<String>| {
                let mut v: Vec<String> = group.iter().flat_map(|e| f(e).iter().cloned()).collect();
                v.sort();
                v.dedup();
                v
            };
            let new = NewEvent {
                collection_id: c.id,
                memory_type: EVENT_V1.into(),
                user_id: union(|e| &e.user_id),
                assistant_id: union(|e| &e.assistant_id),
                group_id: group[0].group_id.clone(),
                session_id: None,
                conversation_id: None,
                scope: group[0].scope.clone(),
                class: "conclusion".into(),
                time: group.iter().map(|e| e.time).min().unwrap_or(now),
                memory_info: info,
                source_message_ids: group.iter().flat_map(|e| e.source_message_ids.iter().copied()).collect(),
                embedding: Some(self.embed_one(&summary, EmbedKind::Document).await?),
                turn_vectors: None,
                expires_at: None,
                valid_from: group.iter().map(|e| e.valid_from).min(),
                now,
            };
            folded += group.len() as u64;
            self.store.replace_events(c.id, group.iter().map(|e| e.id.clone()).collect(), new).await?;
        }

        // Digest: one per user and finished day.
        if !self.config.lifecycle.daily_digest {
            return Ok((folded, 0));
        }
        let have: std::collections::HashSet<(String, i64)> = events
            .iter()
            .filter(|e| e.memory_type == DAILY_DIGEST)
            .map(|e| (user_key(e), e.time.div_euclid(DAY)))
            .collect();
        let mut days: std::collections::BTreeMap<(String, i64), Vec<&Event>> = Default::default();
        for e in events.iter().filter(|e| e.memory_type != DAILY_DIGEST && e.time < today && !e.user_id.is_empty()) {
            days.entry((user_key(e), e.time.div_euclid(DAY))).or_default().push(e);
        }
        let mut digests = 0;
        for ((user, day), mut evs) in days {
            if have.contains(&(user.clone(), day)) {
                continue;
            }
            evs.sort_by_key(|e| e.time);
            let (text, zh) = join(evs.iter().map(|e| e.text()).collect(), 300);
            let summary = format!("{} {}: {text}", day_name(day * DAY), if zh { "小结" } else { "recap" });
            let mut info = Map::new();
            info.insert("summary".into(), Value::String(summary.clone()));
            self.store
                .insert_event(NewEvent {
                    embedding: Some(self.embed_one(&summary, EmbedKind::Document).await?),
                    now,
                    ..NewEvent::of_user(c.id, DAILY_DIGEST, user, info, day * DAY + DAY - 1)
                })
                .await?;
            digests += 1;
        }
        Ok((folded, digests))
    }

    pub async fn maintenance_runs(&self, t: &Target, limit: u32) -> CoreResult<Vec<MaintenanceRun>> {
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_maintenance_runs(c.id, limit).await?)
    }
}
