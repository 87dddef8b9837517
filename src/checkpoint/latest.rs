//! Which step directory a run directory names: the one `latest` points at, or, when `latest`
//! is missing, unreadable or points at a directory without metadata, the newest complete one.

use std::path::{Path, PathBuf};

use super::{read_metadata, CheckpointError, LATEST, METADATA};

/// The step directory `path` names: itself if it holds metadata.json, else the one its
/// `latest` file points at, else (when `latest` is missing, unreadable or points at an
/// incomplete directory) the newest complete step directory of the run.
pub fn resolve(path: &Path) -> Result<PathBuf, CheckpointError> {
    if path.join(METADATA).is_file() {
        return Ok(path.to_path_buf());
    }
    match latest_target(path) {
        Ok(dir) => Ok(dir),
        Err(problem) => newest_complete_step(path).ok_or(match problem {
            LatestProblem::Missing => CheckpointError::NotFound {
                path: path.display().to_string(),
            },
            LatestProblem::Unreadable(reason) | LatestProblem::Incomplete(reason) => {
                CheckpointError::Corrupt {
                    path: path.join(LATEST).display().to_string(),
                    reason: format!("{reason}, and no complete step directory is left"),
                }
            }
        }),
    }
}

/// Why a run directory's `latest` is not used, when [`resolve`] falls back to the newest
/// complete step directory: a line to warn with. `None` when `latest` is fine, or when `path`
/// is a step directory or holds no checkpoint at all.
pub fn latest_problem(path: &Path) -> Option<String> {
    if path.join(METADATA).is_file() {
        return None;
    }
    let problem = latest_target(path).err()?;
    let fallback = newest_complete_step(path)?;
    let what = match problem {
        LatestProblem::Missing => format!("{} is missing", path.join(LATEST).display()),
        LatestProblem::Unreadable(reason) | LatestProblem::Incomplete(reason) => reason,
    };
    Some(format!(
        "{what}; using the newest complete checkpoint, {}",
        fallback.display()
    ))
}

enum LatestProblem {
    Missing,
    Unreadable(String),
    Incomplete(String),
}

/// The complete step directory `latest` names.
fn latest_target(run_dir: &Path) -> Result<PathBuf, LatestProblem> {
    let latest = run_dir.join(LATEST);
    if !latest.exists() {
        return Err(LatestProblem::Missing);
    }
    let name = std::fs::read_to_string(&latest).map_err(|e| {
        LatestProblem::Unreadable(format!("{} is unreadable: {e}", latest.display()))
    })?;
    let name = name.trim();
    let valid = name.starts_with("step-") && !name.contains(['/', '\\']);
    let dir = run_dir.join(name);
    if !valid {
        return Err(LatestProblem::Unreadable(format!(
            "{} does not name a step directory (it holds {:?})",
            latest.display(),
            name.chars().take(40).collect::<String>()
        )));
    }
    // A damaged file inside the directory is reported when it is loaded (naming the file); a
    // directory without its metadata was never completed here.
    if !dir.join(METADATA).is_file() {
        return Err(LatestProblem::Incomplete(format!(
            "{} points at {}, which is not a complete checkpoint",
            latest.display(),
            dir.display()
        )));
    }
    Ok(dir)
}

/// A step directory whose metadata parses and whose recorded files are all present with their
/// recorded sizes (contents are checked against their CRC-32 when loaded).
fn is_complete(dir: &Path) -> bool {
    let Ok((_, meta)) = read_metadata(dir) else {
        return false;
    };
    meta.files.iter().all(|(file, digest)| {
        std::fs::metadata(dir.join(file)).is_ok_and(|m| m.len() == digest.bytes)
    })
}

/// The newest complete `step-*` directory of `run_dir`.
fn newest_complete_step(run_dir: &Path) -> Option<PathBuf> {
    let mut steps: Vec<PathBuf> = std::fs::read_dir(run_dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("step-"))
        })
        .collect();
    steps.sort();
    steps.into_iter().rev().find(|dir| is_complete(dir))
}
