//! Helpers shared by the library's integration tests: presets and configurations. (The tests
//! that drive the `cumind` binary live with it, in cli/tests.)
#![allow(dead_code)] // each test crate uses a different subset

/// The path of a preset in agents/.
pub fn preset(name: &str) -> String {
    format!("{}/agents/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The Catch preset as `cumind --config agents/catch.json` loads it, with `extra`
/// `section.key=value` overrides.
pub fn catch_config(extra: &[&str]) -> cumind::config::Config {
    cumind::config::Config::load(&cumind::config::ConfigSources {
        files: vec![std::path::PathBuf::from(preset("catch.json"))],
        text: None,
        env_vars: Vec::new(),
        sets: extra.iter().map(|s| s.to_string()).collect(),
    })
    .unwrap()
}
