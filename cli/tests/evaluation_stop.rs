//! `training.stop_return` with `training.stop_confirm_episodes`: an evaluation that reaches the
//! threshold stops the run only when a second evaluation, from other starting states, reaches
//! it too.

mod common;

use common::{text, train_in_place};

/// Catch with an untrained network (training never starts: the replay never holds
/// `min_memory_size` transitions), evaluated every 16 environment steps (one step of the 16
/// environments) over `eval_episodes` episodes.
fn untrained_catch(dir: &std::path::Path, name: &str, keys: &[&str]) -> String {
    let mut all = vec![
        "training.max_env_steps=800",
        "memory.memory_capacity=20000",
        "memory.min_memory_size=20000",
        "training.eval_interval=16",
    ];
    all.extend_from_slice(keys);
    let out = train_in_place(dir, "catch.json", name, &all);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    t
}

#[test]
fn a_confirming_evaluation_that_falls_short_keeps_the_run_going() {
    // One episode per evaluation reaches a mean of 1 whenever the ball is caught; 40 more
    // episodes of an untrained agent all catching it does not happen.
    let dir = tempfile::tempdir().unwrap();
    let t = untrained_catch(
        dir.path(),
        "short",
        &[
            "training.eval_episodes=1",
            "training.stop_return=1",
            "training.stop_confirm_episodes=40",
        ],
    );
    let confirms: Vec<&str> = t.lines().filter(|l| l.starts_with("confirm @")).collect();
    assert!(!confirms.is_empty(), "no evaluation reached 1:\n{t}");
    for line in &confirms {
        assert!(
            line.contains("over 40 more episodes (not confirmed, training on)"),
            "{line}"
        );
    }
    // Each confirmation follows an evaluation that reached the threshold.
    let reached = t
        .lines()
        .filter(|l| l.starts_with("eval @") && l.contains("mean return 1.0 +-"))
        .count();
    assert_eq!(reached, confirms.len(), "{t}");
    assert!(t.contains("stopped: reached max_env_steps = 800"), "{t}");
}

#[test]
fn a_confirmed_evaluation_stops_the_run_and_without_confirmation_the_first_one_does() {
    let dir = tempfile::tempdir().unwrap();
    // Every evaluation reaches -1, the lowest return of Catch.
    let t = untrained_catch(
        dir.path(),
        "confirmed",
        &[
            "training.eval_episodes=2",
            "training.stop_return=-1",
            "training.stop_confirm_episodes=3",
        ],
    );
    assert_eq!(t.matches("eval @").count(), 1, "{t}");
    assert!(
        t.contains("over 3 more episodes (confirmed)")
            && t.contains("reached stop_return = -1, confirmed by"),
        "{t}"
    );
    let metrics = std::fs::read_to_string(dir.path().join("runs/confirmed/metrics.csv")).unwrap();
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.starts_with("eval/confirm_mean_return,16,"))
            .count(),
        1,
        "{metrics}"
    );

    let t = untrained_catch(
        dir.path(),
        "plain",
        &["training.eval_episodes=2", "training.stop_return=-1"],
    );
    assert_eq!(t.matches("eval @").count(), 1, "{t}");
    assert!(
        !t.contains("confirm @") && !t.contains("confirmed by"),
        "{t}"
    );
    assert!(t.contains("reached stop_return = -1 |"), "{t}");
}
