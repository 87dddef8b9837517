//! The name of a run: its directory under `checkpoint_root_dir` and `log_dir`.

use std::path::Path;

use crate::checkpoint;
use crate::config::Config;

use super::Result;

/// The run's name: the resumed run's directory name, else `other.run_name`, else the
/// environment name and the current Unix time.
pub fn planned_run_name(config: &Config, resume: Option<&Path>) -> Result<String> {
    if let Some(path) = resume {
        let dir = checkpoint::resolve(path)?;
        let run = dir
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().to_string());
        return Ok(run.unwrap_or_else(|| run_name(config)));
    }
    Ok(run_name(config))
}

pub(super) fn run_name(config: &Config) -> String {
    if !config.other.run_name.is_empty() {
        return config.other.run_name.clone();
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{}-{secs}", config.environment.env_name)
}
