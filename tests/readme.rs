//! Keeps the documentation true: every configuration key is in docs/configuration.md with its
//! default, CI runs the README's test command, and the README stays a front page.

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

fn configuration_reference() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap()
}

#[test]
fn every_configuration_key_is_documented_with_its_default() {
    let readme = configuration_reference();
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
                "docs/configuration.md shows a stale default for {section}.{key} (expected {shown}): {row}"
            );
        }
    }
    assert!(
        missing.is_empty(),
        "keys missing from docs/configuration.md: {missing:?}"
    );
}

/// The README is the front page (the reference lives in docs/), and every document it links
/// to exists.
#[test]
fn the_readme_is_a_front_page_whose_links_exist() {
    let readme = readme();
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines");
    for (i, _) in readme.match_indices("](docs/") {
        let rest = &readme[i + 2..];
        let path = &rest[..rest.find(')').unwrap()];
        let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
        assert!(
            std::path::Path::new(&full).is_file(),
            "README links to {path}, which is missing"
        );
    }
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
