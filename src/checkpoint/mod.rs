//! Checkpoints: safetensors weights (online and target network), optimizer state, JSON metadata
//! (configuration, counters, versions, file digests) and a replay snapshot.
//!
//! Layout under a run directory:
//! ```text
//! <run>/step-000001234/{metadata.json, model.safetensors, target.safetensors,
//!                       optimizer.safetensors, replay.safetensors,
//!                       replay-rank-1.safetensors, ...}
//! <run>/latest          -> "step-000001234"
//! ```
//! (`replay-rank-R.safetensors`: rank R's replay memory, in a run over several MPI ranks.)
//! Every checkpoint is written into a temporary directory that is renamed into place, and
//! `latest` is replaced by rename, so a crash or a failed write at any moment leaves the
//! previous checkpoint intact and `latest` pointing at it; a failed save removes its temporary
//! directory and names the file and the cause. Old step directories are pruned only after the
//! new one is in place. Each file's size and CRC-32 are recorded in metadata.json and checked on
//! load, so a truncated or corrupted file is an error that names it.
//!
//! A run directory whose `latest` is missing, unreadable or points at a directory without
//! metadata resolves to its newest complete step directory instead ([`resolve`]);
//! [`latest_problem`] says what was wrong, for the caller to warn about. A damaged file inside
//! the checkpoint `latest` names is an error naming that file, not a silent fallback.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::Config;
use crate::network::NetworkSpec;
use crate::replay::ReplayBuffer;

mod latest;

pub use latest::{latest_problem, resolve};

/// Version of the checkpoint layout; bumped on incompatible changes.
pub const FORMAT_VERSION: u32 = 1;
const METADATA: &str = "metadata.json";
const MODEL: &str = "model.safetensors";
const TARGET: &str = "target.safetensors";
const OPTIMIZER: &str = "optimizer.safetensors";
/// The replay snapshot, binary (see `replay/binary.rs`).
const REPLAY: &str = "replay.safetensors";
/// The replay snapshot of checkpoints written before the binary form; still read.
const REPLAY_JSON: &str = "replay.json";
const LATEST: &str = "latest";
/// The directory inside a run directory that holds the checkpoint of the run's best
/// evaluation so far (without the replay buffer: it is for playing, not for resuming).
pub const BEST: &str = "best";

#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("no checkpoint at {path}: expected a directory with {METADATA} (a step directory) or a `{LATEST}` file (a run directory)")]
    NotFound { path: String },
    #[error("checkpoint file {path} is missing")]
    MissingFile { path: String },
    #[error("checkpoint file {path} is corrupt: {reason}")]
    Corrupt { path: String, reason: String },
    #[error(
        "checkpoint {path} has format version {found}, this build reads version {FORMAT_VERSION}"
    )]
    Version { path: String, found: u32 },
    #[error("I/O error on {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("tensor error")]
    Candle(#[from] candle_core::Error),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |error| CheckpointError::Io {
        path: path.display().to_string(),
        error,
    }
}

/// Size and CRC-32 of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    pub bytes: u64,
    pub crc32: u32,
}

/// Counters of a run at the time of a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub env_steps: u64,
    pub training_steps: u64,
    pub episodes: u64,
    /// Seconds of training before this checkpoint (summed over resumed segments).
    pub elapsed_seconds: f64,
    /// Best mean evaluation return so far (NaN-free; `None` before the first evaluation).
    pub best_eval_return: Option<f64>,
}

/// metadata.json.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metadata {
    pub format_version: u32,
    pub cumind_version: String,
    pub candle_version: String,
    pub created_unix_seconds: u64,
    pub config: serde_json::Value,
    pub network: NetworkSpec,
    pub counters: Counters,
    pub optimizer_step: usize,
    pub files: BTreeMap<String, FileDigest>,
}

impl Metadata {
    /// The configuration the run was trained with, layered over this build's defaults (so a
    /// checkpoint from before a key was added still loads, with that key's default).
    pub fn config(&self) -> Result<Config, CheckpointError> {
        let sources = crate::config::ConfigSources {
            text: Some(("the stored configuration".into(), self.config.to_string())),
            ..Default::default()
        };
        Config::load_checked(&sources, crate::config::EnvCheck::IfMakeable).map_err(|e| {
            CheckpointError::Corrupt {
                path: METADATA.into(),
                reason: format!("stored configuration does not load: {e}"),
            }
        })
    }
}

/// Everything a checkpoint holds, in memory.
pub struct Checkpoint {
    pub metadata: Metadata,
    pub model: HashMap<String, Tensor>,
    pub target: HashMap<String, Tensor>,
    pub optimizer: HashMap<String, Tensor>,
    pub replay: Option<ReplayBuffer>,
    /// The step directory it was read from.
    pub dir: PathBuf,
}

/// What to write.
pub struct CheckpointData<'a> {
    pub config: &'a Config,
    pub network: &'a NetworkSpec,
    pub counters: Counters,
    pub model: HashMap<String, Tensor>,
    pub target: HashMap<String, Tensor>,
    pub optimizer: HashMap<String, Tensor>,
    pub optimizer_step: usize,
    pub replay: Option<&'a ReplayBuffer>,
    /// The replay snapshots of ranks 1, 2, ... of a run over several ranks (`replay` is rank
    /// 0's), already serialised; empty for a run on one process.
    pub replay_shards: &'a [Vec<u8>],
}

/// The file of rank `rank`'s replay snapshot (rank 0's is `replay.safetensors`).
pub fn replay_shard_file(rank: usize) -> String {
    if rank == 0 {
        REPLAY.to_string()
    } else {
        format!("replay-rank-{rank}.safetensors")
    }
}

/// How many ranks' replay snapshots a checkpoint holds: 1 for a run on one process (or none
/// when it holds no replay), K for a run over K ranks.
pub fn replay_shards(metadata: &Metadata) -> usize {
    if !metadata.files.contains_key(REPLAY) && !metadata.files.contains_key(REPLAY_JSON) {
        return 0;
    }
    1 + (1..)
        .take_while(|&r| metadata.files.contains_key(&replay_shard_file(r)))
        .count()
}

/// Rank `rank`'s replay snapshot from the checkpoint in step directory `dir` (1 and up: the
/// shards of a run over several ranks; rank 0's comes with [`load`]), checked against its
/// recorded size and CRC.
pub fn load_replay_shard(
    dir: &Path,
    metadata: &Metadata,
    rank: usize,
) -> Result<ReplayBuffer, CheckpointError> {
    let file = replay_shard_file(rank);
    let bytes = verified_bytes(dir, &file, metadata)?;
    ReplayBuffer::from_binary(&bytes).map_err(|e| CheckpointError::Corrupt {
        path: dir.join(&file).display().to_string(),
        reason: e.to_string(),
    })
}

fn digest(path: &Path) -> Result<FileDigest, CheckpointError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    Ok(FileDigest {
        bytes: bytes.len() as u64,
        crc32: crc32fast::hash(&bytes),
    })
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let mut f = std::fs::File::create(path).map_err(io_err(path))?;
    f.write_all(bytes).map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

fn save_tensors(map: &HashMap<String, Tensor>, path: &Path) -> Result<(), CheckpointError> {
    // safetensors needs contiguous CPU-readable tensors; move them to the CPU first.
    let cpu: HashMap<String, Tensor> = map
        .iter()
        .map(|(k, t)| Ok((k.clone(), t.to_device(&Device::Cpu)?.contiguous()?)))
        .collect::<Result<_, candle_core::Error>>()?;
    candle_core::safetensors::save(&cpu, path).map_err(|e| match e {
        candle_core::Error::Io(error) => CheckpointError::Io {
            path: path.display().to_string(),
            error,
        },
        other => CheckpointError::Corrupt {
            path: path.display().to_string(),
            reason: format!("cannot write the tensors: {other}"),
        },
    })?;
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io_err(path))
}

/// Write a checkpoint for `data` under `run_dir` atomically and point `latest` at it, keeping
/// the newest `training.keep_checkpoints` step directories. Returns the step directory. On
/// failure the temporary directory is removed and `latest` still names the previous
/// checkpoint.
pub fn save(run_dir: &Path, data: &CheckpointData) -> Result<PathBuf, CheckpointError> {
    save_keeping(run_dir, data, data.config.training.keep_checkpoints)
}

/// [`save`], keeping the newest `keep` step directories of `run_dir` (0: every one).
pub fn save_keeping(
    run_dir: &Path,
    data: &CheckpointData,
    keep: usize,
) -> Result<PathBuf, CheckpointError> {
    std::fs::create_dir_all(run_dir).map_err(io_err(run_dir))?;
    remove_stale_temporaries(run_dir);
    let name = format!("step-{:010}", data.counters.training_steps);
    let tmp = run_dir.join(format!(".tmp-{name}-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    let result = write_step(run_dir, &tmp, &name, data, keep);
    if result.is_err() {
        let _ignored_best_effort = std::fs::remove_dir_all(&tmp);
    }
    result
}

/// Remove `.tmp-*` directories left by saves that were killed (best effort: a failure here
/// only leaves disk space in use).
fn remove_stale_temporaries(run_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ignored_best_effort = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Fill `tmp`, rename it to `run_dir/name`, point `latest` at it, prune old checkpoints.
fn write_step(
    run_dir: &Path,
    tmp: &Path,
    name: &str,
    data: &CheckpointData,
    keep: usize,
) -> Result<PathBuf, CheckpointError> {
    let final_dir = run_dir.join(name);

    save_tensors(&data.model, &tmp.join(MODEL))?;
    save_tensors(&data.target, &tmp.join(TARGET))?;
    save_tensors(&data.optimizer, &tmp.join(OPTIMIZER))?;
    let mut files = BTreeMap::new();
    if let Some(replay) = data.replay {
        let path = tmp.join(REPLAY);
        let bytes = replay.to_binary().map_err(|e| CheckpointError::Corrupt {
            path: path.display().to_string(),
            reason: format!("cannot serialise the replay buffer: {e}"),
        })?;
        write_synced(&path, &bytes)?;
    }
    let mut names: Vec<String> = [MODEL, TARGET, OPTIMIZER, REPLAY]
        .iter()
        .map(|f| f.to_string())
        .collect();
    for (i, bytes) in data.replay_shards.iter().enumerate() {
        let name = replay_shard_file(i + 1);
        write_synced(&tmp.join(&name), bytes)?;
        names.push(name);
    }
    for file in names {
        let path = tmp.join(&file);
        if path.exists() {
            files.insert(file, digest(&path)?);
        }
    }
    crash_point("files written");
    let metadata = Metadata {
        format_version: FORMAT_VERSION,
        cumind_version: env!("CARGO_PKG_VERSION").to_string(),
        candle_version: "0.11".to_string(),
        created_unix_seconds: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        config: serde_json::to_value(data.config).expect("config serialises"),
        network: data.network.clone(),
        counters: data.counters.clone(),
        optimizer_step: data.optimizer_step,
        files,
    };
    let meta_json = serde_json::to_vec_pretty(&metadata).expect("metadata serialises");
    write_synced(&tmp.join(METADATA), &meta_json)?;
    crash_point("metadata written");

    if final_dir.exists() {
        // The same step saved again (the end of a run right after a periodic save): the
        // complete older copy stays in place until the new one has taken its name.
        replace_dir(tmp, &final_dir)?;
    } else {
        std::fs::rename(tmp, &final_dir).map_err(io_err(&final_dir))?;
    }
    sync_dir(run_dir)?;
    crash_point("step in place");
    let latest_tmp = run_dir.join(format!(".{LATEST}.tmp"));
    write_synced(&latest_tmp, name.as_bytes())?;
    crash_point("latest written");
    std::fs::rename(&latest_tmp, run_dir.join(LATEST)).map_err(io_err(run_dir))?;
    sync_dir(run_dir)?;
    crash_point("latest renamed");
    prune(run_dir, keep)?;
    Ok(final_dir)
}

/// A point of a save at which a test may stop it as a kill would (see `crash_test`); nothing
/// outside tests.
#[inline]
fn crash_point(point: &'static str) {
    #[cfg(test)]
    crash_test::reached(point);
    #[cfg(not(test))]
    let _ = point;
}

/// Fault injection for the tests: a save stopped at one of its `crash_point`s by a panic, so
/// that none of the save's own clean-up runs, as after SIGKILL or a power cut.
mod crash_test {
    #[cfg(test)]
    thread_local! {
        pub static CRASH_AT: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
        pub static NO_EXCHANGE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    #[cfg(test)]
    pub fn reached(point: &'static str) {
        if CRASH_AT.with(|c| c.get()) == Some(point) {
            panic!("stopped at `{point}`");
        }
    }

    /// Whether the atomic exchange is turned off (tests of the fallback that moves the older
    /// copy aside).
    pub fn exchange_disabled() -> bool {
        #[cfg(test)]
        return NO_EXCHANGE.with(|c| c.get());
        #[cfg(not(test))]
        false
    }
}

/// Put the complete directory `new` at `target`, which holds an older complete one. On Linux
/// the two swap names in one step (`renameat2` with `RENAME_EXCHANGE`), so `target` is never
/// missing, and the older copy, now at `new`, is removed after. Elsewhere, or on a file system
/// without the exchange, the older copy is renamed aside to `<step>.replaced` first: a crash
/// between the two renames leaves `latest` naming a missing directory, and loading falls back
/// to the newest complete step directory, which is that copy (pruning removes a leftover).
fn replace_dir(new: &Path, target: &Path) -> Result<(), CheckpointError> {
    if !target.is_dir() {
        let in_the_way = std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "something other than a step directory has its name",
        );
        return Err(io_err(target)(in_the_way));
    }
    if !crash_test::exchange_disabled() && exchange(new, target).is_ok() {
        crash_point("exchanged");
        let _ignored_best_effort = std::fs::remove_dir_all(new);
        return Ok(());
    }
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Named as a step, so that loading finds it should the save stop before `new` is in place.
    let aside = target.with_file_name(format!("{name}.replaced"));
    if aside.exists() {
        std::fs::remove_dir_all(&aside).map_err(io_err(&aside))?;
    }
    std::fs::rename(target, &aside).map_err(io_err(target))?;
    crash_point("old copy aside");
    std::fs::rename(new, target).map_err(io_err(target))?;
    let _ignored_best_effort = std::fs::remove_dir_all(&aside);
    Ok(())
}

/// Swap the names of `a` and `b` atomically (Linux's `renameat2(RENAME_EXCHANGE)`).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_os_str().as_bytes())?;
    let b = std::ffi::CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call, and the
    // arguments are renameat2's (the system call, which every Linux C library reaches).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// Make the renames inside `dir` durable (a power cut can otherwise lose a rename whose
/// directory entry was never written); a no-op where directories cannot be opened as files.
fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    #[cfg(unix)]
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Delete all but the newest `keep` step directories (0: keep every one).
fn prune(run_dir: &Path, keep: usize) -> Result<(), CheckpointError> {
    let mut steps: Vec<PathBuf> = std::fs::read_dir(run_dir)
        .map_err(io_err(run_dir))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("step-"))
        })
        .collect();
    // An older copy moved aside by `replace_dir` goes once the step that replaced it is in
    // place; without it (a save stopped between the two renames) it counts as that step.
    steps.retain(|p| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        match name.as_deref().and_then(|n| n.strip_suffix(".replaced")) {
            Some(base) if run_dir.join(base).is_dir() => {
                let _ignored_best_effort = std::fs::remove_dir_all(p);
                false
            }
            _ => true,
        }
    });
    steps.sort();
    if keep > 0 && steps.len() > keep {
        for old in &steps[..steps.len() - keep] {
            std::fs::remove_dir_all(old).map_err(io_err(old))?;
            crash_point("one old step pruned");
        }
    }
    Ok(())
}

/// Read and verify the metadata of the checkpoint at `path` (step or run directory).
pub fn load_metadata(path: &Path) -> Result<(PathBuf, Metadata), CheckpointError> {
    read_metadata(&resolve(path)?)
}

/// Read and verify the metadata of the step directory `dir`.
pub(super) fn read_metadata(dir: &Path) -> Result<(PathBuf, Metadata), CheckpointError> {
    let dir = dir.to_path_buf();
    let meta_path = dir.join(METADATA);
    let text = std::fs::read(&meta_path).map_err(io_err(&meta_path))?;
    let value: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| CheckpointError::Corrupt {
            path: meta_path.display().to_string(),
            reason: format!("not valid JSON: {e}"),
        })?;
    let found = value
        .get("format_version")
        .and_then(|v| v.as_u64())
        .unwrap_or(0) as u32;
    if found != FORMAT_VERSION {
        return Err(CheckpointError::Version {
            path: dir.display().to_string(),
            found,
        });
    }
    let metadata: Metadata =
        serde_json::from_value(value).map_err(|e| CheckpointError::Corrupt {
            path: meta_path.display().to_string(),
            reason: format!("unexpected contents: {e}"),
        })?;
    Ok((dir, metadata))
}

fn verified_bytes(dir: &Path, file: &str, meta: &Metadata) -> Result<Vec<u8>, CheckpointError> {
    let path = dir.join(file);
    let expected = meta
        .files
        .get(file)
        .ok_or_else(|| CheckpointError::Corrupt {
            path: dir.join(METADATA).display().to_string(),
            reason: format!("no digest recorded for {file}"),
        })?;
    if !path.is_file() {
        return Err(CheckpointError::MissingFile {
            path: path.display().to_string(),
        });
    }
    let bytes = std::fs::read(&path).map_err(io_err(&path))?;
    if bytes.len() as u64 != expected.bytes {
        return Err(CheckpointError::Corrupt {
            path: path.display().to_string(),
            reason: format!(
                "{} bytes, expected {} (truncated or partly written)",
                bytes.len(),
                expected.bytes
            ),
        });
    }
    let crc = crc32fast::hash(&bytes);
    if crc != expected.crc32 {
        return Err(CheckpointError::Corrupt {
            path: path.display().to_string(),
            reason: format!(
                "CRC-32 {crc:08x}, expected {:08x} (contents changed)",
                expected.crc32
            ),
        });
    }
    Ok(bytes)
}

fn load_tensors(
    dir: &Path,
    file: &str,
    meta: &Metadata,
    device: &Device,
) -> Result<HashMap<String, Tensor>, CheckpointError> {
    let bytes = verified_bytes(dir, file, meta)?;
    candle_core::safetensors::load_buffer(&bytes, device).map_err(|e| CheckpointError::Corrupt {
        path: dir.join(file).display().to_string(),
        reason: e.to_string(),
    })
}

/// Load the weights only (for evaluation and the library API).
pub fn load_model(
    path: &Path,
    device: &Device,
) -> Result<(Metadata, HashMap<String, Tensor>), CheckpointError> {
    let (dir, meta) = load_metadata(path)?;
    let model = load_tensors(&dir, MODEL, &meta, device)?;
    Ok((meta, model))
}

/// Load everything (to resume training).
pub fn load(path: &Path, device: &Device) -> Result<Checkpoint, CheckpointError> {
    let (dir, metadata) = load_metadata(path)?;
    let model = load_tensors(&dir, MODEL, &metadata, device)?;
    let target = load_tensors(&dir, TARGET, &metadata, device)?;
    let optimizer = load_tensors(&dir, OPTIMIZER, &metadata, device)?;
    let replay = if metadata.files.contains_key(REPLAY) {
        let bytes = verified_bytes(&dir, REPLAY, &metadata)?;
        Some(
            ReplayBuffer::from_binary(&bytes).map_err(|e| CheckpointError::Corrupt {
                path: dir.join(REPLAY).display().to_string(),
                reason: e.to_string(),
            })?,
        )
    } else if metadata.files.contains_key(REPLAY_JSON) {
        let bytes = verified_bytes(&dir, REPLAY_JSON, &metadata)?;
        Some(
            serde_json::from_slice(&bytes).map_err(|e| CheckpointError::Corrupt {
                path: dir.join(REPLAY_JSON).display().to_string(),
                reason: e.to_string(),
            })?,
        )
    } else {
        None
    };
    Ok(Checkpoint {
        metadata,
        model,
        target,
        optimizer,
        replay,
        dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ReplayConfig;
    use crate::testing::games::scripted_game;

    fn config() -> Config {
        Config::default_config()
    }

    fn spec() -> NetworkSpec {
        crate::testing::specs::tiny_spec(vec![4], 2)
    }

    fn tensors(seed: f32) -> HashMap<String, Tensor> {
        let mut map = HashMap::new();
        map.insert(
            "a.weight".to_string(),
            Tensor::new(&[[seed, 2.0], [3.0, 4.0]], &Device::Cpu).unwrap(),
        );
        map.insert(
            "a.bias".to_string(),
            Tensor::new(&[seed, -1.0], &Device::Cpu).unwrap(),
        );
        map
    }

    fn replay() -> ReplayBuffer {
        let mut r = ReplayBuffer::new(ReplayConfig {
            capacity: 100,
            num_unroll_steps: 2,
            td_steps: 2,
            discount: 0.9,
            per_alpha: 1.0,
            per_beta: 1.0,
            per_epsilon: 1e-3,
            two_player: false,
            max_bytes: 0,
            td_age_transitions: 0,
            symmetries: Vec::new(),
        });
        r.save_game(scripted_game(&[1.0, 1.0], &[0.5, 0.4], &[0; 3], true, 0.0))
            .unwrap();
        r
    }

    fn write(dir: &Path, steps: u64, replay: &ReplayBuffer) -> PathBuf {
        write_keeping(dir, steps, replay, config().training.keep_checkpoints)
    }

    fn write_keeping(dir: &Path, steps: u64, replay: &ReplayBuffer, keep: usize) -> PathBuf {
        let mut cfg = config();
        cfg.training.keep_checkpoints = keep;
        let s = spec();
        save(
            dir,
            &CheckpointData {
                config: &cfg,
                network: &s,
                counters: Counters {
                    env_steps: 10 * steps,
                    training_steps: steps,
                    episodes: 3,
                    elapsed_seconds: 1.5,
                    best_eval_return: Some(9.0),
                },
                model: tensors(steps as f32),
                target: tensors(-1.0),
                optimizer: tensors(0.5),
                optimizer_step: steps as usize,
                replay: Some(replay),
                replay_shards: &[],
            },
        )
        .unwrap()
    }

    #[test]
    fn round_trip_restores_everything() {
        let dir = tempfile::tempdir().unwrap();
        let r = replay();
        let step_dir = write(dir.path(), 7, &r);
        assert!(step_dir.ends_with("step-0000000007"));
        let ckpt = load(dir.path(), &Device::Cpu).unwrap();
        assert_eq!(ckpt.dir, step_dir);
        assert_eq!(ckpt.metadata.counters.training_steps, 7);
        assert_eq!(ckpt.metadata.counters.best_eval_return, Some(9.0));
        assert_eq!(ckpt.metadata.network, spec());
        assert_eq!(ckpt.metadata.config().unwrap(), config());
        let w = ckpt.model["a.weight"].to_vec2::<f32>().unwrap();
        assert_eq!(w, vec![vec![7.0, 2.0], vec![3.0, 4.0]]);
        assert_eq!(
            ckpt.target["a.bias"].to_vec1::<f32>().unwrap(),
            vec![-1.0, -1.0]
        );
        let back = ckpt.replay.unwrap();
        assert_eq!(back.num_transitions(), r.num_transitions());
        assert_eq!(back.games().next().unwrap().1, r.games().next().unwrap().1);
    }

    /// Saving a step that is already there replaces it with the new data and leaves nothing
    /// behind; the exchange at its heart swaps two directories' names.
    #[test]
    fn saving_the_same_step_again_replaces_it_in_one_step() {
        let dir = tempfile::tempdir().unwrap();
        let r = replay();
        write(dir.path(), 5, &r);
        let mut cfg = config();
        cfg.training.keep_checkpoints = 2;
        let s = spec();
        let again = CheckpointData {
            config: &cfg,
            network: &s,
            counters: Counters {
                env_steps: 777,
                training_steps: 5,
                episodes: 4,
                elapsed_seconds: 2.5,
                best_eval_return: None,
            },
            model: tensors(42.0),
            target: tensors(-1.0),
            optimizer: tensors(0.5),
            optimizer_step: 5,
            replay: Some(&r),
            replay_shards: &[],
        };
        let step_dir = save(dir.path(), &again).unwrap();
        let ckpt = load(dir.path(), &Device::Cpu).unwrap();
        assert_eq!(ckpt.dir, step_dir);
        assert_eq!(ckpt.metadata.counters.env_steps, 777);
        assert_eq!(
            ckpt.model["a.bias"].to_vec1::<f32>().unwrap(),
            vec![42.0, -1.0]
        );
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".tmp")), "{names:?}");

        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(a.join("which"), "a").unwrap();
        std::fs::write(b.join("which"), "b").unwrap();
        replace_dir(&a, &b).unwrap();
        assert_eq!(std::fs::read_to_string(b.join("which")).unwrap(), "a");
        assert!(!a.exists());
    }

    /// A save stopped at any of its points, as a kill would stop it (no clean-up runs), leaves
    /// a run whose newest complete checkpoint loads: the new one once `latest` names it, the
    /// previous one before; and the next save works. For a new step and for a step saved
    /// again, with the atomic exchange and with its fallback.
    #[test]
    fn a_save_killed_at_any_point_leaves_a_checkpoint_that_loads() {
        const POINTS: [&str; 8] = [
            "files written",
            "metadata written",
            "exchanged",
            "old copy aside",
            "step in place",
            "latest written",
            "latest renamed",
            "one old step pruned",
        ];
        let r = replay();
        for point in POINTS {
            for (resave, no_exchange) in [(false, false), (true, false), (true, true)] {
                let case =
                    format!("stopped at `{point}`, resave {resave}, no exchange {no_exchange}");
                let dir = tempfile::tempdir().unwrap();
                write_keeping(dir.path(), 1, &r, 1);
                write_keeping(dir.path(), 2, &r, 2);
                let new_step = if resave { 2 } else { 3 };
                crash_test::NO_EXCHANGE.with(|c| c.set(no_exchange));
                crash_test::CRASH_AT.with(|c| c.set(Some(point)));
                let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    write_keeping(dir.path(), new_step, &r, 1)
                }));
                crash_test::CRASH_AT.with(|c| c.set(None));
                let reached = stopped.is_err();
                let applies = match point {
                    "exchanged" => resave && !no_exchange,
                    "old copy aside" => resave && no_exchange,
                    // Resaving step 2 with one kept finds nothing older to prune than step 1.
                    _ => true,
                };
                assert_eq!(
                    reached,
                    applies,
                    "{case}: the point was {}reached",
                    if reached { "" } else { "not " }
                );
                let ckpt = load(dir.path(), &Device::Cpu)
                    .unwrap_or_else(|e| panic!("{case}: the run does not load: {e}"));
                // The newest complete checkpoint: never the step before the one being replaced.
                let steps = ckpt.metadata.counters.training_steps;
                assert!(
                    steps == 2 || steps == new_step,
                    "{case}: loaded step {steps}"
                );
                if reached && matches!(point, "latest renamed" | "one old step pruned") {
                    assert_eq!(steps, new_step, "{case}");
                }
                // The next save cleans up and works.
                crash_test::NO_EXCHANGE.with(|c| c.set(false));
                write_keeping(dir.path(), 4, &r, 1);
                let left: Vec<String> = std::fs::read_dir(dir.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(".tmp") || n.ends_with(".replaced"))
                    .collect();
                assert!(left.is_empty(), "{case}: left behind {left:?}");
                assert_eq!(
                    load(dir.path(), &Device::Cpu)
                        .unwrap()
                        .metadata
                        .counters
                        .training_steps,
                    4
                );
            }
        }
    }

    #[test]
    fn latest_points_at_the_newest_and_old_ones_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let r = replay();
        for s in [1, 2, 3, 4] {
            write(dir.path(), s, &r);
        }
        let resolved = resolve(dir.path()).unwrap();
        assert!(resolved.ends_with("step-0000000004"));
        let steps: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
            .collect();
        assert_eq!(steps.len(), config().training.keep_checkpoints);
        // No temporary directories are left behind.
        assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".tmp")));
    }

    #[test]
    fn keep_checkpoints_sets_how_many_steps_stay_and_zero_keeps_all() {
        let steps_in = |dir: &Path| {
            std::fs::read_dir(dir)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
                .count()
        };
        let r = replay();
        for (keep, expected) in [(3, 3), (1, 1), (0, 5)] {
            let dir = tempfile::tempdir().unwrap();
            for s in 1..=5 {
                write_keeping(dir.path(), s, &r, keep);
            }
            assert_eq!(steps_in(dir.path()), expected, "keep_checkpoints = {keep}");
            assert!(resolve(dir.path()).unwrap().ends_with("step-0000000005"));
        }
    }

    #[test]
    fn truncated_file_is_named_in_the_error() {
        for file in [MODEL, REPLAY] {
            let dir = tempfile::tempdir().unwrap();
            let step_dir = write(dir.path(), 1, &replay());
            let path = step_dir.join(file);
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
            let err = load(dir.path(), &Device::Cpu).err().unwrap().to_string();
            assert!(err.contains(file) && err.contains("truncated"), "{err}");
        }
    }

    #[test]
    fn flipped_byte_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let step_dir = write(dir.path(), 1, &replay());
        let path = step_dir.join(REPLAY);
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let err = load(dir.path(), &Device::Cpu).err().unwrap().to_string();
        assert!(
            err.contains("replay.safetensors") && err.contains("CRC"),
            "{err}"
        );
    }

    #[test]
    fn corrupt_metadata_and_missing_checkpoint_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(dir.path(), &Device::Cpu).err().unwrap().to_string();
        assert!(err.contains("no checkpoint"), "{err}");
        let step_dir = write(dir.path(), 1, &replay());
        std::fs::write(step_dir.join(METADATA), "{\"format_version\": 1, \"cumind").unwrap();
        let err = load(dir.path(), &Device::Cpu).err().unwrap().to_string();
        assert!(
            err.contains("metadata.json") && err.contains("not valid JSON"),
            "{err}"
        );
        std::fs::remove_file(step_dir.join(MODEL)).unwrap();
        std::fs::write(step_dir.join(METADATA), "{\"format_version\": 99}").unwrap();
        let err = load(dir.path(), &Device::Cpu).err().unwrap().to_string();
        assert!(err.contains("format version 99"), "{err}");
    }

    #[test]
    fn a_damaged_or_missing_latest_falls_back_to_the_newest_complete_step() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 1, &replay());
        let newest = write(dir.path(), 2, &replay());
        assert_eq!(latest_problem(dir.path()), None);
        let latest = dir.path().join(LATEST);
        for damage in ["", "\u{0}\u{0}garbage", "step-0000000009", "../elsewhere"] {
            std::fs::write(&latest, damage).unwrap();
            assert_eq!(resolve(dir.path()).unwrap(), newest, "latest = {damage:?}");
            let warning = latest_problem(dir.path()).unwrap();
            assert!(warning.contains("step-0000000002"), "{warning}");
            assert_eq!(load(dir.path(), &Device::Cpu).unwrap().dir, newest);
        }
        std::fs::remove_file(&latest).unwrap();
        assert_eq!(resolve(dir.path()).unwrap(), newest);
        assert!(latest_problem(dir.path()).unwrap().contains("missing"));
    }

    #[test]
    fn an_incomplete_newest_step_is_skipped_and_stale_temporaries_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let good = write(dir.path(), 1, &replay());
        // What a save killed halfway (or a disk that filled up) could leave behind: a
        // temporary directory, and a step directory whose files are not all there.
        let stale = dir.path().join(".tmp-step-0000000002-12345");
        std::fs::create_dir_all(&stale).unwrap();
        std::fs::write(stale.join(MODEL), b"partial").unwrap();
        let broken = dir.path().join("step-0000000002");
        std::fs::create_dir_all(&broken).unwrap();
        std::fs::copy(good.join(METADATA), broken.join(METADATA)).unwrap();
        std::fs::write(dir.path().join(LATEST), "step-0000000002").unwrap();
        // `latest` names a directory with metadata: a damaged checkpoint, reported by file.
        let err = load(dir.path(), &Device::Cpu).err().unwrap().to_string();
        assert!(err.contains("step-0000000002"), "{err}");
        // Without its metadata it is incomplete, and the run falls back to the good one.
        std::fs::remove_file(broken.join(METADATA)).unwrap();
        assert_eq!(resolve(dir.path()).unwrap(), good);
        // The next save cleans up the temporary directory.
        write(dir.path(), 3, &replay());
        assert!(!stale.exists());
    }

    #[test]
    fn a_failed_save_keeps_latest_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 1, &replay());
        // The step directory's name is taken by a file: the rename into place fails.
        std::fs::write(dir.path().join("step-0000000002"), b"in the way").unwrap();
        let cfg = config();
        let s = spec();
        let r = replay();
        let err = save(
            dir.path(),
            &CheckpointData {
                config: &cfg,
                network: &s,
                counters: Counters {
                    training_steps: 2,
                    ..Default::default()
                },
                model: HashMap::new(),
                target: HashMap::new(),
                optimizer: HashMap::new(),
                optimizer_step: 0,
                replay: Some(&r),
                replay_shards: &[],
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("step-0000000002"), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LATEST)).unwrap(),
            "step-0000000001"
        );
        assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".tmp")));
    }

    #[test]
    fn a_checkpoint_with_the_older_json_replay_snapshot_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let r = replay();
        let step_dir = write(dir.path(), 1, &r);
        // Turn it into what earlier builds wrote: replay.json, with its digest.
        std::fs::remove_file(step_dir.join(REPLAY)).unwrap();
        let json = serde_json::to_vec(&r).unwrap();
        std::fs::write(step_dir.join(REPLAY_JSON), &json).unwrap();
        let meta_path = step_dir.join(METADATA);
        let mut meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
        let files = meta["files"].as_object_mut().unwrap();
        files.remove(REPLAY);
        files.insert(
            REPLAY_JSON.to_string(),
            serde_json::json!({"bytes": json.len(), "crc32": crc32fast::hash(&json)}),
        );
        std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
        let loaded = load(dir.path(), &Device::Cpu).unwrap().replay.unwrap();
        assert_eq!(
            serde_json::to_string(&loaded).unwrap(),
            serde_json::to_string(&r).unwrap()
        );
    }
}
