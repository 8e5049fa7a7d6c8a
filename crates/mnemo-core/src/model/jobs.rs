//! Extraction jobs: their states, the claim a worker holds (its lease), listing filters.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub job_id: String,
    pub kind: String,
    pub state: JobState,
    pub conversation_id: Option<String>,
    pub session_id: Option<String>,
    pub attempts: u32,
    pub max_attempts: u32,
    pub last_error: Option<String>,
    pub run_after: Millis,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// When the latest attempt started (claimed by a worker).
    pub started_at: Option<Millis>,
    /// When the job ended (`done`, or `failed` for good); `None` while it may still run.
    pub finished_at: Option<Millis>,
    /// How often a failed job was put back in the queue automatically (bounded).
    pub requeues: u32,
}

impl Job {
    /// How long the latest attempt took, once the job has ended.
    pub fn duration_ms(&self) -> Option<Millis> {
        Some(self.finished_at? - self.started_at?)
    }

    /// Whether the job failed for a reason worth trying again later (the extractor said
    /// `transient`: timeouts, 429, 5xx, a provider outage) rather than for its input.
    pub fn failed_transiently(&self) -> bool {
        self.state == JobState::Failed && self.last_error.as_deref().is_some_and(|e| e.starts_with(TRANSIENT_PREFIX))
    }
}

/// How a transient extraction error starts (`ExtractError::Transient`'s message).
pub const TRANSIENT_PREFIX: &str = "transient: ";

#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub conversation_id: Option<String>,
    pub session_id: Option<String>,
    pub limit: u32,
}

/// A job handed to a worker, with everything extraction needs.
/// One claim of a job: the fencing token a worker presents when it reports the outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLease {
    pub job_id: String,
    /// The job's `attempts` after the claim; a later claim of the same job has a higher one.
    pub attempt: u32,
}

impl Job {
    /// `Conflict` unless the job is running under this lease.
    pub fn check_lease(&self, lease: &JobLease) -> Result<(), crate::StoreError> {
        if self.state != JobState::Running || self.attempts != lease.attempt {
            return Err(crate::StoreError::Conflict(format!(
                "job {} lost its lease (attempt {} claimed it; it is now {} at attempt {})",
                self.job_id,
                lease.attempt,
                self.state.as_str(),
                self.attempts
            )));
        }
        Ok(())
    }
}

impl ClaimedJob {
    pub fn lease(&self) -> JobLease {
        JobLease { job_id: self.job.job_id.clone(), attempt: self.job.attempts }
    }
}

#[derive(Clone, Debug)]
pub struct ClaimedJob {
    pub job: Job,
    pub collection: Collection,
    pub session: SessionSummary,
    pub meta: ConversationMeta,
    pub messages: Vec<StoredMessage>,
    /// The user's current profiles (every profile type), so changes can be relative to them.
    pub profiles: Vec<Profile>,
}
