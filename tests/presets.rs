//! Every preset in `agents/` loads over the embedded defaults and passes validation: a preset
//! that names a key the configuration does not have, or a value out of range, fails here
//! rather than on a user's first `cumind --config agents/... train`. Presets of `gymnasium:`
//! environments are checked without making the environment (a build without Python cannot).

use std::path::PathBuf;

use cumind::config::{Config, ConfigSources, EnvCheck};

#[test]
fn every_preset_loads_and_validates() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("agents");
    let mut presets: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("agents/ is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    presets.sort();
    assert!(presets.len() >= 5, "found only {presets:?}");
    for preset in &presets {
        let sources = ConfigSources {
            files: vec![preset.clone()],
            ..Default::default()
        };
        if let Err(e) = Config::load_checked(&sources, EnvCheck::IfMakeable) {
            panic!("{}: {e}", preset.display());
        }
    }
}
