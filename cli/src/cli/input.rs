//! Input checks at the edge: options that would go unread are refused or warned about, and
//! `eval`/`play` take only search keys over a checkpoint's configuration.

use anyhow::{bail, Context, Result};
use candle_core::Device;

use cumind::config::{env_var_key, Config, ConfigSources};

use super::args::ConfigArgs;

/// `--set` flags for dedicated options (`--seed` -> `other.seed`); an option and a `--set` on
/// the same key would leave one of them unread, so that is an error.
pub fn dedicated_flags(
    config: &ConfigArgs,
    flags: &[(&str, &str, Option<String>)],
) -> Result<Vec<String>> {
    let keys = config.set_keys()?;
    let mut extra = Vec::new();
    for (flag, key, value) in flags {
        if let Some(value) = value {
            if keys.iter().any(|k| k == key) {
                bail!("{flag} {value} and --set {key}=... both set `{key}`: give only one");
            }
            extra.push(format!("{key}={value}"));
        }
    }
    Ok(extra)
}

/// The `section.key`s named explicitly: by `--set` flags and by `CUMIND_*` variables.
pub fn explicit_keys(config: &ConfigArgs) -> Result<Vec<String>> {
    let mut keys = config.set_keys()?;
    keys.extend(std::env::vars().filter_map(|(name, _)| env_var_key(&name)));
    Ok(keys)
}

/// Warn on stderr about keys a training run would not read: those set explicitly, and those
/// whose value differs from the embedded default (say, in a preset file).
pub fn warn_ignored_keys(config: &Config, explicit: &[String]) -> Result<()> {
    let image = config
        .environment
        .spec()
        .make()?
        .observation_space()
        .shape()
        .len()
        == 3;
    let defaults = Config::default_config();
    for ignored in config.ignored_keys(image) {
        let value = config.value_of(ignored.key);
        let named = explicit.iter().any(|k| k == ignored.key);
        if named || value != defaults.value_of(ignored.key) {
            let shown = value.map(|v| v.to_string()).unwrap_or_default();
            eprintln!(
                "warning: `{}` = {shown} has no effect: {}",
                ignored.key, ignored.reason
            );
        }
    }
    Ok(())
}

/// Load a trained agent for `eval` or `play`: the checkpoint's configuration, with the search
/// changed by `--set mcts.KEY=VALUE` and `CUMIND_MCTS__*` variables. Everything else comes from
/// the checkpoint, so `--config` and `--set` on other sections are refused, and other
/// `CUMIND_*` variables are reported as ignored.
pub fn load_agent(
    command: &str,
    config_args: &ConfigArgs,
    checkpoint: &std::path::Path,
    device: &Device,
) -> Result<cumind::agent::Agent> {
    if !config_args.files.is_empty() {
        bail!(
            "`{command}` uses the configuration stored in the checkpoint and does not take --config; \
             change the search with --set mcts.KEY=VALUE"
        );
    }
    for key in config_args.set_keys()? {
        if !key.starts_with("mcts.") {
            bail!(
                "`{command}` reads only mcts.* keys from --set (the rest of its configuration is the \
                 checkpoint's); `--set {key}=...` would have no effect"
            );
        }
    }
    let mut env_vars = Vec::new();
    for (name, value) in std::env::vars() {
        match env_var_key(&name) {
            Some(key) if key.starts_with("mcts.") => env_vars.push((name, value)),
            Some(_) => eprintln!(
                "warning: {name} is ignored by `{command}`: it reads only CUMIND_MCTS__* variables"
            ),
            None => {}
        }
    }
    if let Some(problem) = cumind::checkpoint::latest_problem(checkpoint) {
        eprintln!("warning: {problem}");
    }
    let mut agent = cumind::agent::Agent::load_on(checkpoint, device)?;
    if !config_args.sets.is_empty() || !env_vars.is_empty() {
        let sources = ConfigSources {
            files: Vec::new(),
            text: Some((
                format!("the configuration stored in {}", checkpoint.display()),
                agent.config().to_json(),
            )),
            env_vars,
            sets: config_args.sets.clone(),
        };
        let config = Config::load(&sources).context("invalid configuration")?;
        warn_ignored_keys(&config, &explicit_keys(config_args)?)?;
        agent.set_search(config.mcts);
    }
    Ok(agent)
}
