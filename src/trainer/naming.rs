//! The name of a run: its directory under `checkpoint_root_dir` and `log_dir`.

use std::io::ErrorKind;
use std::path::Path;

use crate::checkpoint;
use crate::config::Config;

use super::{Result, TrainError};

/// The run's name: the resumed run's directory name, else `other.run_name`, else the
/// environment name and the current Unix time, claimed by creating its (empty) checkpoint
/// directory: a run started in the same second as another one in the same directories (a
/// script launching seeds in parallel) gets the first free `-2`, `-3`, ... suffix instead of
/// writing into the other run's checkpoints and logs.
pub fn planned_run_name(config: &Config, resume: Option<&Path>) -> Result<String> {
    if let Some(path) = resume {
        let dir = checkpoint::resolve(path)?;
        let run = dir
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().to_string());
        return Ok(run.unwrap_or_else(|| run_name(config)));
    }
    if !config.other.run_name.is_empty() {
        return Ok(config.other.run_name.clone());
    }
    claim_name(
        Path::new(&config.training.checkpoint_root_dir),
        Path::new(&config.other.log_dir),
        &run_name(config),
    )
}

pub(super) fn run_name(config: &Config) -> String {
    if !config.other.run_name.is_empty() {
        return config.other.run_name.clone();
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Environment names may hold a namespace (`MinAtar/Breakout-v1`): one directory level.
    let env: String = config
        .environment
        .env_name
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    format!("{env}-{secs}")
}

/// The first of `base`, `base-2`, `base-3`, ... with no directory under `log_root` whose
/// directory under `checkpoint_root` this call could create (`create_dir` is atomic, so two
/// processes never get the same name).
fn claim_name(checkpoint_root: &Path, log_root: &Path, base: &str) -> Result<String> {
    std::fs::create_dir_all(checkpoint_root).map_err(|source| TrainError::RunDirectory {
        path: checkpoint_root.to_path_buf(),
        source,
    })?;
    for n in 1u32.. {
        let name = if n == 1 {
            base.to_string()
        } else {
            format!("{base}-{n}")
        };
        if log_root.join(&name).exists() {
            continue;
        }
        let dir = checkpoint_root.join(&name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(name),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(TrainError::RunDirectory { path: dir, source }),
        }
    }
    unreachable!("some suffix is free")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_name_gets_the_first_free_suffix() {
        let scratch = tempfile::tempdir().unwrap();
        let (checkpoints, logs) = (scratch.path().join("ckpt"), scratch.path().join("runs"));
        assert_eq!(claim_name(&checkpoints, &logs, "Run-7").unwrap(), "Run-7");
        assert!(checkpoints.join("Run-7").is_dir());
        // Taken by the first claim, then by another run's logs.
        std::fs::create_dir_all(logs.join("Run-7-2")).unwrap();
        assert_eq!(claim_name(&checkpoints, &logs, "Run-7").unwrap(), "Run-7-3");
        assert_eq!(claim_name(&checkpoints, &logs, "Run-7").unwrap(), "Run-7-4");
    }

    #[test]
    fn a_namespaced_environment_name_makes_one_directory_level() {
        let mut config = Config::default_config();
        config.environment.env_name = "MinAtar/Breakout-v1".into();
        let name = run_name(&config);
        assert!(name.starts_with("MinAtar-Breakout-v1-"), "{name}");
        assert!(!name.contains('/'));
    }

    #[test]
    fn an_explicit_run_name_is_kept_as_given() {
        let scratch = tempfile::tempdir().unwrap();
        let mut config = Config::default_config();
        config.training.checkpoint_root_dir = scratch.path().join("c").display().to_string();
        config.other.log_dir = scratch.path().join("l").display().to_string();
        config.other.run_name = "mine".to_string();
        std::fs::create_dir_all(scratch.path().join("c/mine")).unwrap();
        assert_eq!(planned_run_name(&config, None).unwrap(), "mine");
        // An automatic name is claimed: two in a row never share a directory.
        config.other.run_name.clear();
        let first = planned_run_name(&config, None).unwrap();
        let second = planned_run_name(&config, None).unwrap();
        assert_ne!(first, second);
        assert!(scratch.path().join("c").join(&second).is_dir());
    }
}
