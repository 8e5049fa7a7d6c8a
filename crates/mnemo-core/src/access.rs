//! Who is calling and what they may do — decided by a front end's authentication, checked the
//! same way by every front end (HTTP routes, MCP tools).

use std::sync::Arc;

/// What a call does, from least to most dangerous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Search, context, listings, export.
    Read,
    /// Writes: messages, events, profiles, flush, job retry, collection creation.
    Write,
    /// Irreversible or operator calls: delete a collection, forget a user, maintenance, metrics.
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

/// Who is calling: anyone (loopback without keys), or the holder of a key.
#[derive(Clone, Debug)]
pub enum Principal {
    Open,
    Key {
        projects: Arc<Vec<String>>,
        /// What the key may do (each scope is granted on its own).
        scopes: Arc<Vec<Scope>>,
        /// An end-user token: every call is confined to this user, whatever the body says.
        user: Option<Arc<str>>,
    },
}

impl Principal {
    pub fn check_project(&self, project: &str) -> Result<(), String> {
        match self {
            Principal::Open => Ok(()),
            Principal::Key { projects, .. } if projects.iter().any(|p| p == "*" || p == project) => Ok(()),
            Principal::Key { projects, .. } => Err(format!(
                "project_name: this API key may not use project \"{project}\" (allowed: {})",
                projects.join(", ")
            )),
        }
    }

    /// `Err` naming what is missing unless the caller may make a call of scope `need`.
    pub fn check_scope(&self, need: Scope) -> Result<(), String> {
        match self {
            Principal::Open => Ok(()),
            Principal::Key { scopes, .. } if scopes.contains(&need) => Ok(()),
            Principal::Key { scopes, .. } => Err(format!(
                "Authorization: this API key lacks the {} scope (it has: {})",
                need.as_str(),
                scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// The user an end-user token is confined to.
    pub fn user(&self) -> Option<&str> {
        match self {
            Principal::Key { user: Some(u), .. } => Some(u),
            _ => None,
        }
    }

    /// Whether the caller may see every project's figures (`/metrics`): open, or an admin key
    /// for every project.
    pub fn sees_every_tenant(&self) -> bool {
        match self {
            Principal::Open => true,
            Principal::Key { projects, scopes, user } => {
                user.is_none() && scopes.contains(&Scope::Admin) && projects.iter().any(|p| p == "*")
            }
        }
    }
}
