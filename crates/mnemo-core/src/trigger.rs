//! When pending messages close into a session (seed 000): any one of `token_count`,
//! `message_count` fires after an append; a single new message larger than `token_count` fires at
//! once; `wait_timeout` (idle seconds) is enforced by the scheduler through a persisted deadline.
//!
//! Stores call [`ExtractTrigger::evaluate`] inside the transaction that appends the messages, so
//! the decision and the close are atomic on every store.

use crate::error::CoreError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractTrigger {
    pub token_count: u64,
    pub message_count: u64,
    /// Idle seconds after the last message before the conversation closes on its own.
    pub wait_timeout: u64,
}

impl Default for ExtractTrigger {
    fn default() -> Self {
        Self { token_count: 1000, message_count: 20, wait_timeout: 604_800 }
    }
}

pub const TOKEN_COUNT_RANGE: (u64, u64) = (1, 10_000_000);
pub const MESSAGE_COUNT_RANGE: (u64, u64) = (1, 100_000);
pub const WAIT_TIMEOUT_RANGE: (u64, u64) = (1, 2_592_000);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerReason {
    TokenCount,
    MessageCount,
    WaitTimeout,
    Flush,
    SessionAdd,
}

impl TriggerReason {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerReason::TokenCount => "token_count",
            TriggerReason::MessageCount => "message_count",
            TriggerReason::WaitTimeout => "wait_timeout",
            TriggerReason::Flush => "flush",
            TriggerReason::SessionAdd => "session_add",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "token_count" => TriggerReason::TokenCount,
            "message_count" => TriggerReason::MessageCount,
            "wait_timeout" => TriggerReason::WaitTimeout,
            "flush" => TriggerReason::Flush,
            "session_add" => TriggerReason::SessionAdd,
            _ => return None,
        })
    }
}

impl ExtractTrigger {
    /// Builds a trigger from optional request values, checking each against its range.
    pub fn from_parts(
        token_count: Option<i64>,
        message_count: Option<i64>,
        wait_timeout: Option<i64>,
        defaults: ExtractTrigger,
    ) -> Result<Self, CoreError> {
        fn check(field: &str, v: Option<i64>, (lo, hi): (u64, u64), default: u64) -> Result<u64, CoreError> {
            match v {
                None => Ok(default),
                Some(v) if v >= lo as i64 && v <= hi as i64 => Ok(v as u64),
                Some(v) => Err(CoreError::invalid(
                    format!("extract_trigger.{field}"),
                    format!("must be an integer in {lo}..={hi}, got {v}"),
                )),
            }
        }
        Ok(Self {
            token_count: check("token_count", token_count, TOKEN_COUNT_RANGE, defaults.token_count)?,
            message_count: check("message_count", message_count, MESSAGE_COUNT_RANGE, defaults.message_count)?,
            wait_timeout: check("wait_timeout", wait_timeout, WAIT_TIMEOUT_RANGE, defaults.wait_timeout)?,
        })
    }

    /// Decides, after an append, whether the pending messages close now.
    ///
    /// `pending_tokens` / `pending_messages` include the messages just appended;
    /// `largest_new_message_tokens` is the biggest single message of this append.
    pub fn evaluate(
        &self,
        pending_tokens: u64,
        pending_messages: u64,
        largest_new_message_tokens: u64,
    ) -> Option<TriggerReason> {
        if pending_messages == 0 {
            return None;
        }
        if largest_new_message_tokens >= self.token_count || pending_tokens >= self.token_count {
            return Some(TriggerReason::TokenCount);
        }
        if pending_messages >= self.message_count {
            return Some(TriggerReason::MessageCount);
        }
        None
    }

    pub fn wait_timeout_ms(&self) -> i64 {
        (self.wait_timeout as i64).saturating_mul(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(t: (u64, u64), pending: (u64, u64, u64), expected: Option<TriggerReason>) {
        let trig = ExtractTrigger { token_count: t.0, message_count: t.1, wait_timeout: 10 };
        assert_eq!(trig.evaluate(pending.0, pending.1, pending.2), expected, "trigger {t:?} pending {pending:?}");
    }

    #[test]
    fn evaluates_each_condition() {
        check((1000, 20), (999, 19, 50), None);
        check((1000, 20), (1000, 3, 50), Some(TriggerReason::TokenCount));
        check((1000, 20), (10, 20, 1), Some(TriggerReason::MessageCount));
        // Both reached: tokens are reported (the recommended primary trigger).
        check((100, 2), (100, 2, 60), Some(TriggerReason::TokenCount));
        // A single message larger than the budget fires at once.
        check((100, 20), (150, 1, 150), Some(TriggerReason::TokenCount));
        check((100, 20), (0, 0, 0), None);
    }

    #[test]
    fn rejects_out_of_range_values_naming_the_field() {
        let d = ExtractTrigger::default();
        assert_eq!(ExtractTrigger::from_parts(None, None, None, d).unwrap(), d);
        for (tc, mc, wt, field) in [
            (Some(0), None, None, "extract_trigger.token_count"),
            (Some(10_000_001), None, None, "extract_trigger.token_count"),
            (None, Some(-1), None, "extract_trigger.message_count"),
            (None, None, Some(2_592_001), "extract_trigger.wait_timeout"),
        ] {
            match ExtractTrigger::from_parts(tc, mc, wt, d) {
                Err(CoreError::Invalid { field: f, message }) => {
                    assert_eq!(f, field);
                    assert!(message.contains("..="), "{message}");
                }
                other => panic!("expected invalid, got {other:?}"),
            }
        }
    }
}
