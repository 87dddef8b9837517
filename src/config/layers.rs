//! Layering: the embedded defaults <- `--config` files <- a stored configuration (resume) <-
//! `CUMIND_*` variables <- `--set` flags, merged with the `config` crate, then deserialised
//! with the key path of any error.

use super::{invalid, Config, ConfigError};

/// The embedded default configuration.
pub const DEFAULT_CONFIGURATION: &str = include_str!("../../configuration.json");

/// Prefix of the environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "CUMIND";

/// Where configuration comes from, besides the embedded defaults.
#[derive(Debug, Clone, Default)]
pub struct ConfigSources {
    /// `--config` files, layered in the order given (a later file overrides an earlier one).
    pub files: Vec<std::path::PathBuf>,
    /// A JSON layer given as text, applied after the file (a resumed run's stored configuration).
    pub text: Option<(String, String)>,
    /// Environment variables (name, value); the binary passes `std::env::vars()`, tests their own.
    pub env_vars: Vec<(String, String)>,
    /// `--set section.key=value` flags, in order.
    pub sets: Vec<String>,
}

/// Lowercase snake_case form of a section name: `"Data Types"` -> `data_types`,
/// `"Self-Play"` -> `self_play`.
pub fn normalise_section_name(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| match c {
            ' ' | '-' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

fn normalised_json(text: &str, origin: &str) -> Result<String, ConfigError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|error| ConfigError::Json {
            origin: origin.to_string(),
            error,
        })?;
    let serde_json::Value::Object(sections) = value else {
        return Err(ConfigError::NotAnObject {
            origin: origin.to_string(),
            found: json_kind(&value).to_string(),
        });
    };
    let mut out = serde_json::Map::new();
    for (name, section) in sections {
        let key = normalise_section_name(&name);
        if let (Some(serde_json::Value::Object(existing)), serde_json::Value::Object(new)) =
            (out.get_mut(&key), &section)
        {
            existing.extend(new.clone());
        } else {
            out.insert(key, section);
        }
    }
    Ok(serde_json::Value::Object(out).to_string())
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Split one `--set section.key=value` flag into its normalised `section.key` and its value
/// (parsed as JSON, else taken as a string).
pub fn parse_set(flag: &str) -> Result<(String, serde_json::Value), ConfigError> {
    let bad = || ConfigError::BadSet {
        flag: flag.to_string(),
    };
    let (path, raw) = flag.split_once('=').ok_or_else(bad)?;
    let (section, key) = path.trim().split_once('.').ok_or_else(bad)?;
    if section.is_empty() || key.is_empty() || key.contains('.') {
        return Err(bad());
    }
    let value = serde_json::from_str(raw.trim())
        .unwrap_or_else(|_| serde_json::Value::String(raw.to_string()));
    Ok((
        format!("{}.{}", normalise_section_name(section), key.trim()),
        value,
    ))
}

/// The `section.key` an environment variable `CUMIND_<SECTION>__<KEY>` overrides, if it is one.
pub fn env_var_key(name: &str) -> Option<String> {
    let rest = name.strip_prefix(&format!("{ENV_PREFIX}_"))?;
    let (section, key) = rest.split_once("__")?;
    Some(format!(
        "{}.{}",
        section.to_ascii_lowercase(),
        key.to_ascii_lowercase()
    ))
}

/// Turn `--set` flags into one JSON layer: `{"section": {"key": value}}`; a later flag on the
/// same key wins.
fn sets_to_json(sets: &[String]) -> Result<String, ConfigError> {
    let mut root = serde_json::Map::new();
    for flag in sets {
        let (path, value) = parse_set(flag)?;
        let (section, key) = path.split_once('.').expect("parse_set returns section.key");
        let entry = root
            .entry(section.to_string())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let serde_json::Value::Object(map) = entry {
            map.insert(key.to_string(), value);
        }
    }
    Ok(serde_json::Value::Object(root).to_string())
}

impl Config {
    /// The embedded defaults alone.
    pub fn default_config() -> Config {
        Self::load(&ConfigSources::default()).expect("embedded configuration.json is valid")
    }

    /// Layer every source over the embedded defaults, deserialise and validate.
    pub fn load(sources: &ConfigSources) -> Result<Config, ConfigError> {
        Self::load_checked(sources, super::EnvCheck::Required)
    }

    /// [`Config::load`], with the environment checked as `env_check` says.
    pub fn load_checked(
        sources: &ConfigSources,
        env_check: super::EnvCheck,
    ) -> Result<Config, ConfigError> {
        use config::{Environment, File, FileFormat};
        let mut builder = config::Config::builder().add_source(File::from_str(
            &normalised_json(DEFAULT_CONFIGURATION, "the embedded configuration.json")?,
            FileFormat::Json,
        ));
        for path in &sources.files {
            let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
                path: path.display().to_string(),
                error,
            })?;
            let origin = format!("configuration file {}", path.display());
            builder = builder.add_source(File::from_str(
                &normalised_json(&text, &origin)?,
                FileFormat::Json,
            ));
        }
        if let Some((origin, text)) = &sources.text {
            builder = builder.add_source(File::from_str(
                &normalised_json(text, origin)?,
                FileFormat::Json,
            ));
        }
        let env_map: std::collections::HashMap<String, String> = sources
            .env_vars
            .iter()
            .filter(|(name, _)| name.starts_with(&format!("{ENV_PREFIX}_")))
            .cloned()
            .collect();
        builder = builder
            .add_source(
                Environment::with_prefix(ENV_PREFIX)
                    .prefix_separator("_")
                    .separator("__")
                    .try_parsing(true)
                    .source(Some(env_map)),
            )
            .add_source(File::from_str(
                &sets_to_json(&sources.sets)?,
                FileFormat::Json,
            ));
        let merged: serde_json::Value = builder.build()?.try_deserialize()?;
        let config: Config = serde_path_to_error::deserialize(&merged).map_err(|err| {
            let path = err.path().to_string();
            let key = if path == "." {
                "(top level)".to_string()
            } else {
                path
            };
            let mut message = err.inner().to_string();
            if message.ends_with("expected string or map") {
                if let Some(variants) = enum_variants(merged.clone(), err.path()) {
                    message =
                        message.replace("expected string or map", &format!("expected {variants}"));
                }
            }
            invalid(&key, message)
        })?;
        config.validate_with(env_check)?;
        Ok(config)
    }

    /// The configuration of a run resumed from `stored` (the JSON kept in its checkpoint, from
    /// `origin`), changed by `CUMIND_*` variables and `--set` flags. A resumed run keeps its
    /// environment and its network: changing either is an error.
    pub fn load_resumed(
        origin: &str,
        stored: &str,
        env_vars: Vec<(String, String)>,
        sets: Vec<String>,
    ) -> Result<Config, ConfigError> {
        let config = Config::load(&ConfigSources {
            files: Vec::new(),
            text: Some((origin.to_string(), stored.to_string())),
            env_vars: env_vars.clone(),
            sets: sets.clone(),
        })?;
        let before = Config::load(&ConfigSources {
            text: Some((origin.to_string(), stored.to_string())),
            ..Default::default()
        })?;
        if config.environment.env_name != before.environment.env_name {
            return Err(invalid(
                "environment.env_name",
                "a resumed run cannot change its environment",
            ));
        }
        if config.network_architecture != before.network_architecture {
            return Err(invalid(
                "network_architecture",
                "a resumed run cannot change its network architecture",
            ));
        }
        Ok(config)
    }
}

/// The variants of the enum at `path` in `merged`, as serde lists them ("`a` or `b`", "one of
/// `a`, `b`, `c`"). serde names them for an unknown string but not for a value of another
/// type (a number, a boolean), so the key's value is replaced by a string no variant has and
/// the error read.
fn enum_variants(
    mut merged: serde_json::Value,
    path: &serde_path_to_error::Path,
) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut slot = &mut merged;
    for segment in path.iter() {
        slot = match segment {
            Segment::Map { key } => slot.get_mut(key.as_str())?,
            Segment::Seq { index } => slot.get_mut(*index)?,
            _ => return None,
        };
    }
    *slot = serde_json::Value::String("\u{1}".to_string());
    let err = serde_path_to_error::deserialize::<_, Config>(merged).err()?;
    if err.path().to_string() != path.to_string() {
        return None;
    }
    let message = err.into_inner().to_string();
    if !message.starts_with("unknown variant") {
        return None;
    }
    message
        .split_once(", expected ")
        .map(|(_, variants)| variants.to_string())
}
