//! Who is calling and which projects they may use — decided by a front end's authentication,
//! checked the same way by every front end (HTTP routes, MCP tools).

use std::sync::Arc;

/// Who is calling: anyone (loopback without keys), or the holder of a key.
#[derive(Clone, Debug)]
pub enum Principal {
    Open,
    Key { projects: Arc<Vec<String>> },
}

impl Principal {
    pub fn check_project(&self, project: &str) -> Result<(), String> {
        match self {
            Principal::Open => Ok(()),
            Principal::Key { projects } if projects.iter().any(|p| p == "*" || p == project) => Ok(()),
            Principal::Key { projects } => Err(format!(
                "project_name: this API key may not use project \"{project}\" (allowed: {})",
                projects.join(", ")
            )),
        }
    }
}
