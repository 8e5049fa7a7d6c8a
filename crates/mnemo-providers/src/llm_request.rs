//! What an OpenAI-compatible chat request may carry that servers differ on: the JSON mode
//! (`json_schema` strict → `json_object` → prompt only) and the field bounding the answer
//! (`max_tokens` or `max_completion_tokens`). The `llm` extractor starts at the configured ones and
//! steps down when a server refuses.

/// Which request field bounds the answer's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TokenLimit {
    MaxTokens = 0,
    MaxCompletionTokens = 1,
}

impl TokenLimit {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "max_tokens" => Some(Self::MaxTokens),
            "max_completion_tokens" => Some(Self::MaxCompletionTokens),
            _ => None,
        }
    }

    pub(crate) fn field(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum JsonMode {
    JsonSchema = 0,
    JsonObject = 1,
    None = 2,
}

impl JsonMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "json_schema" => Some(Self::JsonSchema),
            "json_object" => Some(Self::JsonObject),
            "none" => Some(Self::None),
            _ => None,
        }
    }

    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::JsonSchema,
            1 => Self::JsonObject,
            _ => Self::None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::JsonSchema => "json_schema (strict)",
            Self::JsonObject => "json_object",
            Self::None => "none (prompt only)",
        }
    }
}

/// A 400 that names `max_completion_tokens` is about the token-limit field either way:
/// "Unsupported parameter: 'max_tokens' … Use 'max_completion_tokens' instead." (OpenAI's
/// reasoning models), or "Unrecognized request argument: max_completion_tokens" (older servers).
pub(crate) fn other_token_limit(current: TokenLimit, body: &str) -> Option<TokenLimit> {
    body.contains("max_completion_tokens").then_some(match current {
        TokenLimit::MaxTokens => TokenLimit::MaxCompletionTokens,
        TokenLimit::MaxCompletionTokens => TokenLimit::MaxTokens,
    })
}
