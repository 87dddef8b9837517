//! Bad input, fuzzed: configuration files mutated at random (wrong types, values out of range,
//! unknown or missing keys, odd nesting) and checkpoints damaged at random (bytes flipped,
//! files truncated or extended, each file of a step, the replay snapshot and `latest`
//! included) give a clear error or a correct load, never a panic. The cases are drawn from
//! fixed seeds, so a failure names a case that reproduces; their number is bounded so that the
//! suite stays quick.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use candle_core::{DType, Device};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use cumind::checkpoint::{self, CheckpointData, Counters};
use cumind::config::{Config, ConfigSources};
use cumind::network::MuZeroNetwork;
use cumind::replay::ReplayBuffer;
use cumind::testing::games::{replay_config, scripted_game};
use cumind::testing::specs::tiny_spec;

/// A value of a random JSON type, some of them plausible, some absurd.
fn random_value(rng: &mut StdRng) -> Value {
    match rng.random_range(0..9) {
        0 => json!(null),
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random_range(-1_000_000i64..1_000_000)),
        3 => json!(rng.random_range(-1e12..1e12)),
        4 => json!(0),
        5 => json!("cuda:9"),
        6 => json!([1, "two", null]),
        7 => json!({"nested": {"deeper": 1}}),
        _ => json!(u64::MAX),
    }
}

/// One random change to a configuration: a key's value replaced, a key removed, an unknown
/// key or section added, a section renamed or made a scalar, a value wrapped in an object.
fn mutate(config: &mut Value, rng: &mut StdRng) {
    let sections: Vec<String> = config.as_object().unwrap().keys().cloned().collect();
    let section = &sections[rng.random_range(0..sections.len())];
    let keys: Vec<String> = config[section]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let key = keys.get(rng.random_range(0..keys.len().max(1))).cloned();
    let root = config.as_object_mut().unwrap();
    match (rng.random_range(0..7), key) {
        (0..=2, Some(key)) => {
            root.get_mut(section).unwrap()[&key] = random_value(rng);
        }
        (3, Some(key)) => {
            root.get_mut(section)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove(&key);
        }
        (4, Some(key)) => {
            let inner = root[section][&key].clone();
            root.get_mut(section).unwrap()[&key] = json!({ "value": inner });
        }
        (5, _) => {
            let value = root.remove(section).unwrap();
            root.insert(format!("{section} extra"), value);
        }
        (6, _) => {
            root.insert(section.clone(), random_value(rng));
        }
        _ => match root.get_mut(section).and_then(Value::as_object_mut) {
            Some(keys) => {
                keys.insert("no_such_key".into(), random_value(rng));
            }
            None => {
                root.insert("No such section".into(), json!({ "key": 1 }));
            }
        },
    }
}

#[test]
fn mutated_configurations_are_loaded_or_refused_with_a_message_never_a_panic() {
    let defaults: Value = serde_json::from_str(&Config::default_config().to_json()).unwrap();
    let mut rng = StdRng::seed_from_u64(2026);
    let (mut refused, mut loaded) = (0, 0);
    for case in 0..400 {
        let mut config = defaults.clone();
        for _ in 0..rng.random_range(1..4) {
            mutate(&mut config, &mut rng);
        }
        let text = config.to_string();
        let result = catch_unwind(AssertUnwindSafe(|| {
            Config::load(&ConfigSources {
                text: Some((format!("fuzz case {case}"), text.clone())),
                ..Default::default()
            })
        }));
        match result {
            Err(_) => panic!("case {case} panicked on:\n{text}"),
            Ok(Ok(config)) => {
                // A configuration that loads is a valid one: it writes and loads back equal.
                let again = Config::load(&ConfigSources {
                    text: Some(("round trip".into(), config.to_json())),
                    ..Default::default()
                })
                .unwrap_or_else(|e| {
                    panic!("case {case}: a loaded configuration fails to reload: {e}")
                });
                assert_eq!(again, config, "case {case}");
                loaded += 1;
            }
            Ok(Err(err)) => {
                let message = format!("{err:#}");
                assert!(message.len() > 20, "case {case}: terse error {message:?}");
                refused += 1;
            }
        }
    }
    // The mutations reach both outcomes.
    assert!(
        refused > 100 && loaded > 10,
        "{refused} refused, {loaded} loaded"
    );
}

/// A complete checkpoint (a tiny network, its target and optimizer state, a replay memory)
/// written to `dir`.
fn write_checkpoint(dir: &Path) {
    let config = Config::default_config();
    let spec = tiny_spec(vec![4], 2);
    let net = MuZeroNetwork::new(spec.clone(), 3, &Device::Cpu, DType::F32).unwrap();
    let tensors = net.params().to_tensors().unwrap();
    let mut replay = ReplayBuffer::new(replay_config(100, 2, 2, 0.9));
    replay
        .save_game(scripted_game(
            &[1.0, 0.0, 1.0],
            &[0.5, 0.4, 0.3],
            &[0; 4],
            true,
            0.0,
        ))
        .unwrap();
    checkpoint::save(
        dir,
        &CheckpointData {
            config: &config,
            network: &spec,
            counters: Counters {
                env_steps: 30,
                training_steps: 3,
                ..Default::default()
            },
            model: tensors.clone(),
            target: tensors,
            optimizer: HashMap::new(),
            optimizer_step: 3,
            replay: Some(&replay),
            replay_shards: &[],
        },
    )
    .unwrap();
}

/// Flip bytes, truncate or extend `bytes` at random.
fn damage(bytes: &mut Vec<u8>, rng: &mut StdRng) {
    match rng.random_range(0..3) {
        0 if !bytes.is_empty() => {
            for _ in 0..rng.random_range(1..9) {
                let i = rng.random_range(0..bytes.len());
                bytes[i] ^= 1 << rng.random_range(0..8);
            }
        }
        1 => {
            let keep = rng.random_range(0..=bytes.len());
            bytes.truncate(keep);
        }
        _ => {
            for _ in 0..rng.random_range(1..64) {
                bytes.push(rng.random());
            }
        }
    }
}

/// Make `metadata.json` vouch for the damaged `file` (its size and CRC-32), so that the damage
/// reaches the file's own parser rather than the checksum.
fn vouch_for(step: &Path, file: &str) {
    let path = step.join("metadata.json");
    let Ok(mut metadata) = serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap()) else {
        return;
    };
    let bytes = std::fs::read(step.join(file)).unwrap();
    metadata["files"][file] = json!({"bytes": bytes.len(), "crc32": crc32fast::hash(&bytes)});
    std::fs::write(&path, serde_json::to_vec_pretty(&metadata).unwrap()).unwrap();
}

#[test]
fn damaged_checkpoints_load_correctly_or_fail_with_a_message_never_a_panic() {
    let pristine = tempfile::tempdir().unwrap();
    write_checkpoint(pristine.path());
    let step_name = std::fs::read_to_string(pristine.path().join("latest")).unwrap();
    let files = [
        "model.safetensors",
        "target.safetensors",
        "replay.safetensors",
        "metadata.json",
    ];
    let mut rng = StdRng::seed_from_u64(7);
    let mut outcomes = HashMap::new();
    for file in files.iter().copied().chain(["latest"]) {
        for vouched in [false, true] {
            for case in 0..40 {
                let dir = tempfile::tempdir().unwrap();
                let run = dir.path();
                let step = run.join(step_name.trim());
                std::fs::create_dir(&step).unwrap();
                for entry in std::fs::read_dir(pristine.path().join(step_name.trim())).unwrap() {
                    let entry = entry.unwrap();
                    std::fs::copy(entry.path(), step.join(entry.file_name())).unwrap();
                }
                std::fs::copy(pristine.path().join("latest"), run.join("latest")).unwrap();
                let target = if file == "latest" {
                    run.join("latest")
                } else {
                    step.join(file)
                };
                let mut bytes = std::fs::read(&target).unwrap();
                damage(&mut bytes, &mut rng);
                std::fs::write(&target, &bytes).unwrap();
                if vouched && file != "latest" && file != "metadata.json" {
                    vouch_for(&step, file);
                }
                let what = format!("{file} damaged (case {case}, metadata vouching {vouched})");
                let result = catch_unwind(AssertUnwindSafe(|| checkpoint::load(run, &Device::Cpu)));
                let outcome = match result {
                    Err(_) => panic!("{what}: loading panicked"),
                    Ok(Ok(ckpt)) => {
                        // A load that succeeds is the checkpoint that was written.
                        assert_eq!(ckpt.metadata.counters.training_steps, 3, "{what}");
                        "loaded"
                    }
                    Ok(Err(err)) => {
                        let message = format!("{err:#}");
                        assert!(message.len() > 20, "{what}: terse error {message:?}");
                        "refused"
                    }
                };
                *outcomes.entry((file, outcome)).or_insert(0) += 1;
            }
        }
    }
    // Damage inside the step's files is refused (the checksums, or the parsers when the
    // metadata vouches for the damage); a damaged `latest` falls back to the step and loads.
    for file in files {
        assert!(
            outcomes.get(&(file, "refused")).copied().unwrap_or(0) > 40,
            "{file}: {outcomes:?}"
        );
    }
    assert!(
        outcomes.get(&("latest", "loaded")).copied().unwrap_or(0) > 40,
        "{outcomes:?}"
    );
}
