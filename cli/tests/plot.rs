//! `cumind plot` and the curves.png that `cumind train` leaves beside its logs.

mod common;

use common::{assert_fails_with, cumind, text, train_in_place};

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

#[test]
fn train_writes_curves_and_plot_draws_several_runs() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a", "b"] {
        let out = train_in_place(
            dir.path(),
            "catch.json",
            name,
            &[
                "training.max_env_steps=800",
                "training.eval_interval=400",
                "training.eval_episodes=4",
            ],
        );
        assert!(out.status.success(), "{}", text(&out));
        let csv = std::fs::read_to_string(dir.path().join("runs").join(name).join("metrics.csv"))
            .unwrap();
        for tag in ["eval/mean_return", "loss/total", "progress/training_steps"] {
            assert!(csv.contains(tag), "{tag} missing from metrics.csv");
        }
        // The font is built in: a machine without fonts draws the curves too.
        let png = std::fs::read(dir.path().join("runs").join(name).join("curves.png")).unwrap();
        assert!(png.starts_with(PNG_SIGNATURE));
    }
    let out = cumind(dir.path())
        .args(["plot", "runs/a", "runs/b", "--out", "both.png"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let png = std::fs::read(dir.path().join("both.png")).unwrap();
    assert!(png.starts_with(PNG_SIGNATURE) && png.len() > 10_000);
    // The same runs with a font file given: the built-in one written to disk.
    std::fs::write(dir.path().join("sans.ttf"), dejavu::sans::regular()).unwrap();
    let out = cumind(dir.path())
        .args(["plot", "runs/a", "--out", "one.png", "--font", "sans.ttf"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read(dir.path().join("one.png"))
        .unwrap()
        .starts_with(PNG_SIGNATURE));

    // A directory that is not a run, a file that is not a font, and unread options: errors.
    let out = cumind(dir.path()).args(["plot", "ckpt"]).output().unwrap();
    assert_fails_with(&out, "metrics.csv");
    std::fs::write(dir.path().join("bad.ttf"), b"not a font").unwrap();
    let out = cumind(dir.path())
        .args(["plot", "runs/a", "--font", "bad.ttf"])
        .output()
        .unwrap();
    assert_fails_with(&out, "bad.ttf");
    let out = cumind(dir.path())
        .args(["plot", "runs/a", "--set", "other.seed=1"])
        .output()
        .unwrap();
    assert_fails_with(&out, "no effect");
}
