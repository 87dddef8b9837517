//! Keeps README.md true: every configuration key is documented with its default, and CI runs the
//! README's test command.

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

#[test]
fn every_configuration_key_is_documented_with_its_default() {
    let readme = readme();
    let defaults: serde_json::Value =
        serde_json::from_str(cumind::config::DEFAULT_CONFIGURATION).unwrap();
    let mut missing = Vec::new();
    for (section, keys) in defaults.as_object().unwrap() {
        assert!(
            readme.contains(&format!("**{section}**")),
            "section {section} missing"
        );
        for (key, value) in keys.as_object().unwrap() {
            let row_start = format!("| `{key}` | ");
            let Some(pos) = readme.find(&row_start) else {
                missing.push(format!("{section}.{key}"));
                continue;
            };
            let row = &readme[pos..readme[pos..].find('\n').map_or(readme.len(), |e| pos + e)];
            let shown = match value {
                serde_json::Value::Array(_) => continue,
                serde_json::Value::String(s) => format!("\"{s}\""),
                other => other.to_string(),
            };
            assert!(
                row.contains(&format!(" {shown} ")),
                "README shows a stale default for {section}.{key} (expected {shown}): {row}"
            );
        }
    }
    assert!(missing.is_empty(), "keys missing from README: {missing:?}");
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = readme();
    let command = "cargo test --release --workspace";
    assert!(readme.contains(command));
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == command),
        ".ci/run does not run `{command}`"
    );
}
