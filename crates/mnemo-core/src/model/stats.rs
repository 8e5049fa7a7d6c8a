//! Records about the memory as a whole: a user's exported data and what forgetting deleted,
//! store and memory statistics, maintenance runs.

use super::*;

/// Everything stored about one user in one collection (`user/export`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct UserData {
    pub conversations: Vec<ConversationInfo>,
    /// Every message of the user's conversations, extracted or not.
    pub messages: Vec<StoredMessage>,
    pub sessions: Vec<SessionSummary>,
    pub jobs: Vec<Job>,
    pub events: Vec<Event>,
    pub profiles: Vec<Profile>,
}

/// One user of a collection (`user/list`): how much is remembered about them, and when they were
/// last active.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UserSummary {
    pub user_id: String,
    /// Active events about the user.
    pub events: u64,
    /// Conversations whose metadata names the user.
    pub conversations: u64,
    /// The latest write to their conversations or change to their active events (ms).
    pub last_active: Option<Millis>,
}

/// A `LIKE` pattern for "contains `s`": `%`, `_` and `\` taken literally (escape `\`).
pub fn like_contains(s: &str) -> String {
    let escaped: String =
        s.chars().flat_map(|c| if matches!(c, '%' | '_' | '\\') { vec!['\\', c] } else { vec![c] }).collect();
    format!("%{escaped}%")
}

/// Users most recently active first (never active last), then by id; at most `limit`.
pub fn order_users(users: &mut Vec<UserSummary>, limit: u32) {
    users.sort_by(|a, b| b.last_active.cmp(&a.last_active).then_with(|| a.user_id.cmp(&b.user_id)));
    users.truncate(limit as usize);
}

/// What `user/forget` removed, per kind.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct ForgetCounts {
    pub conversations: u64,
    pub messages: u64,
    pub sessions: u64,
    pub jobs: u64,
    pub events: u64,
    pub profiles: u64,
}

impl std::ops::AddAssign for ForgetCounts {
    fn add_assign(&mut self, n: Self) {
        self.conversations += n.conversations;
        self.messages += n.messages;
        self.sessions += n.sessions;
        self.jobs += n.jobs;
        self.events += n.events;
        self.profiles += n.profiles;
    }
}

/// Sizes of a store, for `/metrics`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StoreStats {
    /// Jobs per state (`queued`, `running`, `done`, `failed`).
    pub jobs: Vec<(String, u64)>,
    pub conversations: u64,
    pub messages: u64,
    pub events: u64,
    pub profiles: u64,
    /// Bytes on disk (data file and log), where the store can tell.
    pub bytes: u64,
    /// Searches answered from a kept scope, those that read theirs, and the bytes kept — for a
    /// store that keeps scopes between searches (`store.scope_cache_mib`; PostgreSQL: per replica).
    pub scope_cache: Option<ScopeCacheStats>,
}

/// See [`StoreStats::scope_cache`].
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ScopeCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub bytes: u64,
}

/// `stats` (seed 002 §6.2): what is remembered and what is used, per day.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemoryStats {
    /// (day `YYYY-MM-DD`, events created), newest first.
    pub new_memories_per_day: Vec<(String, u64)>,
    /// (day, hits counted by search and get_context), newest first.
    pub hits_per_day: Vec<(String, u64)>,
    /// The most-hit events: (event id, summary, hit count).
    pub top_hit: Vec<(String, String, u64)>,
    pub never_hit: u64,
    pub total_events: u64,
    /// (day, jobs created, done, failed, prompt tokens, completion tokens), newest first.
    pub jobs_per_day: Vec<(String, u64, u64, u64, u64, u64)>,
}

/// One maintenance run over a collection.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MaintenanceRun {
    pub collection_name: String,
    pub trigger: String,
    pub started_at: Millis,
    /// Expired events that were never hit, deleted.
    pub expired: u64,
    /// Events not hit for the archive period, archived (kept, not searched by default).
    pub archived: u64,
    /// `process` events folded into summaries (the originals are replaced).
    #[serde(default)]
    pub folded: u64,
    /// Daily digests written.
    #[serde(default)]
    pub digests: u64,
}

impl MaintenanceRun {
    /// Adds another part's counts (a shard's run of the same start) to these.
    pub fn add_counts(&mut self, other: &MaintenanceRun) {
        self.expired += other.expired;
        self.archived += other.archived;
        self.folded += other.folded;
        self.digests += other.digests;
    }
}
