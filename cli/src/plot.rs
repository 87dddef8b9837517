//! Learning curves as a PNG: evaluation return, training return and the total loss of one or
//! more runs, against environment steps (top row) and wall time (bottom row).
//!
//! The curves come from each run's `metrics.csv` (written by [`cumind::metrics::CsvSink`] in the
//! run's log directory). Losses are logged per training step; the run's
//! `progress/training_steps` and `progress/elapsed_seconds` series (logged per environment step)
//! map every point to environment steps and wall time by linear interpolation.
//!
//! A peer's curve (another tool's evaluations, as `scripts/peers/sb3_minatar.py` writes them)
//! is a CSV file whose header starts `env_steps,wall_seconds,mean_return`: [`read_curves`]
//! takes either, so a peer is drawn beside CuMind's runs against both axes.
//!
//! Text needs a TrueType font: plotters is built without fontconfig (no system library to
//! install), so DejaVu Sans is built into the binary (the `dejavu` crate; the fonts' own
//! licence allows embedding them), and `--font` names another TrueType file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use thiserror::Error;

use cumind::metrics::METRICS_CSV;

/// Errors of [`read_run`] and [`draw`].
#[derive(Debug, Error)]
pub enum PlotError {
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} line {line}: expected `tag,step,value`, found {text:?}")]
    Format {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("{0}: no scalars to plot (is it a run's log directory, like runs/<name>?)")]
    Empty(PathBuf),
    #[error("{path} line {line}: expected `env_steps,wall_seconds,mean_return[,...]` (a peer's curve), found {text:?}")]
    PeerFormat {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("cannot use the font {path}: {reason}")]
    BadFont { path: PathBuf, reason: String },
    #[error("cannot draw {path}: {reason}")]
    Draw { path: PathBuf, reason: String },
    #[error(
        "{labels} --label values for {runs} runs: give one per run, in the runs' order, or none"
    )]
    Labels { labels: usize, runs: usize },
}

/// One run's scalar series, `series[tag] = [(step, value)]` in logged order.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCurves {
    /// The name shown in the legend (the run directory's name).
    pub name: String,
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
}

/// Read `dir/metrics.csv`.
///
/// Two things a live or resumed run leaves are read as what they are, not as errors:
/// - a last line without its newline is a row still being written (the file is read while the
///   run writes it, or the run was killed mid-write): it is left out;
/// - a run resumed from a checkpoint logs again the steps its first attempt logged after that
///   checkpoint: where a series' step goes back, the later rows replace the earlier ones from
///   that step on, so each curve is the history the resumed run continues.
pub fn read_run(dir: &Path) -> Result<RunCurves, PlotError> {
    let path = dir.join(METRICS_CSV);
    let text = std::fs::read_to_string(&path).map_err(|error| PlotError::Read {
        path: path.clone(),
        error,
    })?;
    let text = complete_lines(&text);
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let bad = || PlotError::Format {
            path: path.clone(),
            line: i + 1,
            text: line.chars().take(80).collect(),
        };
        let mut parts = line.rsplitn(3, ',');
        let value: f64 = parts.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
        let step: f64 = parts.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
        let tag = parts.next().ok_or_else(bad)?;
        let points = series.entry(tag.to_string()).or_default();
        if points.last().is_some_and(|&(last, _)| step < last) {
            let keep = points.partition_point(|&(s, _)| s < step);
            points.truncate(keep);
        }
        points.push((step, value));
    }
    if series.is_empty() {
        return Err(PlotError::Empty(dir.to_path_buf()));
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| dir.display().to_string());
    Ok(RunCurves { name, series })
}

/// `text` up to its last newline: a last line without one is a row still being written (the
/// file is read while its writer appends to it, or the writer was killed mid-line). A text
/// without any newline is kept whole: its one line is the header, which both readers check
/// or skip, so a file that has only its header so far reads as a curve with no rows.
fn complete_lines(text: &str) -> &str {
    match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => text,
    }
}

/// The header a peer's curve starts with.
pub const PEER_HEADER: &str = "env_steps,wall_seconds,mean_return";

/// A run's log directory ([`read_run`]) or a peer's curve, a CSV file ([`read_peer`]).
pub fn read_curves(path: &Path) -> Result<RunCurves, PlotError> {
    if path.is_file() {
        read_peer(path)
    } else {
        read_run(path)
    }
}

/// Names `runs` in the legend by `labels`, one per run in order; no labels keep the
/// directories' and files' names.
pub fn relabel(runs: &mut [RunCurves], labels: &[String]) -> Result<(), PlotError> {
    if labels.is_empty() {
        return Ok(());
    }
    if labels.len() != runs.len() {
        return Err(PlotError::Labels {
            labels: labels.len(),
            runs: runs.len(),
        });
    }
    for (run, label) in runs.iter_mut().zip(labels) {
        run.name = label.clone();
    }
    Ok(())
}

/// A peer's evaluations: a CSV file with the header `env_steps,wall_seconds,mean_return` (more
/// columns after these are ignored) and one row per evaluation. They become the series a run
/// logs for the same things (`eval/mean_return`, `progress/elapsed_seconds`), named after the
/// file. As in [`read_run`], a last row without its newline (the peer is still writing it) is
/// left out ([`complete_lines`]).
pub fn read_peer(path: &Path) -> Result<RunCurves, PlotError> {
    let text = std::fs::read_to_string(path).map_err(|error| PlotError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let text = complete_lines(&text);
    let bad = |line: usize, text: &str| PlotError::PeerFormat {
        path: path.to_path_buf(),
        line,
        text: text.chars().take(80).collect(),
    };
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    if !header.trim().starts_with(PEER_HEADER) {
        return Err(bad(1, header));
    }
    let (mut returns, mut clock) = (Vec::new(), Vec::new());
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<Option<f64>> = line
            .split(',')
            .take(3)
            .map(|f| f.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
            .collect();
        let [Some(steps), Some(seconds), Some(mean)] = fields[..] else {
            return Err(bad(i + 2, line));
        };
        returns.push((steps, mean));
        clock.push((steps, seconds));
    }
    if returns.is_empty() {
        return Err(PlotError::Empty(path.to_path_buf()));
    }
    let series = BTreeMap::from([
        ("eval/mean_return".to_string(), returns),
        ("progress/elapsed_seconds".to_string(), clock),
    ]);
    let name = path
        .file_stem()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| path.display().to_string());
    Ok(RunCurves { name, series })
}

/// `y` at `x` on the piecewise-linear curve through `points` (sorted by x); clamped at the ends.
fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let first = points.first()?;
    let last = points.last()?;
    if x <= first.0 {
        return Some(first.1);
    }
    if x >= last.0 {
        return Some(last.1);
    }
    let k = points.partition_point(|p| p.0 <= x);
    let (a, b) = (points[k - 1], points[k]);
    if b.0 == a.0 {
        return Some(b.1);
    }
    Some(a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0))
}

/// The running mean of the last `window` values.
fn running_mean(points: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len());
    let mut sum = 0.0;
    for (i, &(x, y)) in points.iter().enumerate() {
        sum += y;
        if i >= window {
            sum -= points[i - window].1;
        }
        out.push((x, sum / (i + 1).min(window) as f64));
    }
    out
}

/// Points `(x, y)` of one curve.
type Line = Vec<(f64, f64)>;

/// One curve against environment steps and against wall seconds.
struct TwoAxes {
    by_steps: Line,
    by_time: Line,
}

/// What one panel shows, one curve per run.
struct Panel {
    title: &'static str,
    per_run: Vec<TwoAxes>,
}

impl RunCurves {
    fn get(&self, tag: &str) -> &[(f64, f64)] {
        self.series.get(tag).map_or(&[], Vec::as_slice)
    }

    /// `points` (x = env steps) and the same against wall seconds.
    fn by_env_steps(&self, points: Line) -> TwoAxes {
        let clock = sorted(self.get("progress/elapsed_seconds"));
        let by_time = points
            .iter()
            .filter_map(|&(x, y)| Some((interpolate(&clock, x)?, y)))
            .collect();
        TwoAxes {
            by_steps: points,
            by_time,
        }
    }

    /// `points` logged per training step, mapped to env steps, and against wall seconds.
    fn by_training_steps(&self, points: &[(f64, f64)]) -> TwoAxes {
        // progress/training_steps is (env step, training steps): invert it.
        let inverse: Vec<(f64, f64)> = sorted(self.get("progress/training_steps"))
            .into_iter()
            .map(|(env, train)| (train, env))
            .collect();
        let at_env = points
            .iter()
            .filter_map(|&(t, y)| Some((interpolate(&inverse, t)?, y)))
            .collect();
        self.by_env_steps(at_env)
    }
}

fn sorted(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut p = points.to_vec();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    p
}

fn panels(runs: &[RunCurves]) -> Vec<Panel> {
    let loss = Panel {
        title: "total loss (mean of 10 logged values)",
        per_run: runs
            .iter()
            .map(|run| run.by_training_steps(&running_mean(run.get("loss/total"), 10)))
            .collect(),
    };
    // Two-player games evaluated per side: the win rates as first and as second player (the
    // training return sums both players' rewards and says nothing).
    if runs
        .iter()
        .any(|run| !run.get("eval/first/win_rate").is_empty())
    {
        let rate = |tag: &str| -> Vec<TwoAxes> {
            runs.iter()
                .map(|run| run.by_env_steps(run.get(tag).to_vec()))
                .collect()
        };
        return vec![
            Panel {
                title: "evaluation: win rate as first player",
                per_run: rate("eval/first/win_rate"),
            },
            Panel {
                title: "evaluation: win rate as second player",
                per_run: rate("eval/second/win_rate"),
            },
            loss,
        ];
    }
    let eval = Panel {
        title: "evaluation mean return",
        per_run: runs
            .iter()
            .map(|run| run.by_env_steps(run.get("eval/mean_return").to_vec()))
            .collect(),
    };
    let train = Panel {
        title: "training return (mean of 20 episodes)",
        per_run: runs
            .iter()
            .map(|run| run.by_env_steps(running_mean(run.get("episode/return"), 20)))
            .collect(),
    };
    vec![eval, train, loss]
}

/// The panels that some run has a point in; all of them when none has (each then says "no
/// data").
fn shown_panels(panels: Vec<Panel>) -> Vec<Panel> {
    let has_data = |panel: &Panel| panel.per_run.iter().any(|c| !c.by_steps.is_empty());
    if panels.iter().any(has_data) {
        panels.into_iter().filter(has_data).collect()
    } else {
        panels
    }
}

/// An axis value as people write it: 950, 12k, 1.5M.
fn short_number(x: f64) -> String {
    let a = x.abs();
    if a >= 1e6 {
        format!("{}M", trimmed(x / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trimmed(x / 1e3))
    } else {
        trimmed(x)
    }
}

/// `x` with at most two decimals and no trailing zeros.
fn trimmed(x: f64) -> String {
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Register plotters' sans-serif font (once per process): the TrueType file at `path`, or
/// the built-in DejaVu Sans.
fn register_font(path: Option<&Path>) -> Result<(), PlotError> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let result = REGISTERED.get_or_init(|| {
        let bytes: &'static [u8] = match path {
            None => dejavu::sans::regular(),
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
                // plotters keeps fonts for the life of the process.
                Box::leak(bytes.into_boxed_slice())
            }
        };
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "not a TrueType font".to_string())
    });
    result.clone().map_err(|reason| PlotError::BadFont {
        path: path.map_or_else(
            || PathBuf::from("(built-in DejaVu Sans)"),
            Path::to_path_buf,
        ),
        reason,
    })
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Draw `runs` into a PNG at `out`, with the TrueType font at `font` (`None`: the built-in
/// DejaVu Sans): a column per panel that any run has data for (all three, 1500 x 800, for
/// training runs; only the evaluations, 1000 x 800, for peers' curves alone), the environment
/// steps on the x axis of the top row and the wall time on the bottom row's.
pub fn draw(runs: &[RunCurves], out: &Path, font: Option<&Path>) -> Result<(), PlotError> {
    register_font(font)?;
    let fail = |reason: String| PlotError::Draw {
        path: out.to_path_buf(),
        reason,
    };
    let panels = shown_panels(panels(runs));
    let width = if panels.len() >= 3 { 1500 } else { 1000 };
    let root = BitMapBackend::new(out, (width, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let legend_font = ("sans-serif", LEGEND_FONT).into_font().color(&BLACK);
    // Each entry: a swatch of the run's colour, then its name; entries wrap onto as many
    // lines as the width needs.
    let entry_widths = runs
        .iter()
        .map(|r| {
            let (w, _) = root
                .estimate_text_size(&r.name, &legend_font)
                .map_err(|e| fail(e.to_string()))?;
            Ok(LEGEND_SWATCH + LEGEND_GAP + w)
        })
        .collect::<Result<Vec<u32>, PlotError>>()?;
    let lines = legend_lines(&entry_widths, width - 2 * LEGEND_MARGIN, LEGEND_SPACING);
    let legend_height = LEGEND_MARGIN + LEGEND_LINE * lines.len() as u32;
    let (top, body) = root.split_vertically(legend_height);
    for (l, line) in lines.iter().enumerate() {
        // The line's middle: the swatch is centred on it, and so is the name's text box.
        let mid = (LEGEND_MARGIN / 2 + LEGEND_LINE * l as u32 + LEGEND_LINE / 2) as i32;
        let mut x = LEGEND_MARGIN as i32;
        for &i in line {
            top.draw(&Rectangle::new(
                [(x, mid - 2), (x + LEGEND_SWATCH as i32, mid + 2)],
                run_color(i).filled(),
            ))
            .map_err(|e| fail(e.to_string()))?;
            top.draw_text(
                &runs[i].name,
                &legend_font,
                (
                    x + (LEGEND_SWATCH + LEGEND_GAP) as i32,
                    mid - (LEGEND_FONT / 2.0) as i32,
                ),
            )
            .map_err(|e| fail(e.to_string()))?;
            x += (entry_widths[i] + LEGEND_SPACING) as i32;
        }
    }
    let columns = panels.len();
    let areas = body.split_evenly((2, columns));
    for (p, panel) in panels.iter().enumerate() {
        for (row, x_label) in ["environment steps", "wall time (s)"].iter().enumerate() {
            let area = &areas[row * columns + p];
            let lines: Vec<&Line> = panel
                .per_run
                .iter()
                .map(|c| if row == 0 { &c.by_steps } else { &c.by_time })
                .collect();
            draw_panel(area, panel.title, x_label, &lines).map_err(fail)?;
        }
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(())
}

/// The colour of the `i`th run: its lines and its legend swatch.
fn run_color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// The legend's layout, in pixels: its font size, the margin around it, the height of one of
/// its lines, the length of a run's colour swatch, the space between swatch and name, and
/// between entries.
const LEGEND_FONT: f64 = 16.0;
const LEGEND_MARGIN: u32 = 20;
const LEGEND_LINE: u32 = 24;
const LEGEND_SWATCH: u32 = 28;
const LEGEND_GAP: u32 = 8;
const LEGEND_SPACING: u32 = 28;

/// The legend's entries (indices) line by line: in order, as many on a line as fit in `width`
/// with `spacing` between them, at least one per line (a name wider than the picture still
/// gets its line).
fn legend_lines(widths: &[u32], width: u32, spacing: u32) -> Vec<Vec<usize>> {
    let mut lines: Vec<Vec<usize>> = Vec::new();
    let mut used = 0;
    for (i, &w) in widths.iter().enumerate() {
        match lines.last_mut() {
            Some(line) if used + spacing + w <= width => {
                line.push(i);
                used += spacing + w;
            }
            _ => {
                lines.push(vec![i]);
                used = w;
            }
        }
    }
    lines
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    lines: &[&Line],
) -> Result<(), String> {
    let all = lines.iter().flat_map(|l| l.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all.filter(|p| p.0.is_finite() && p.1.is_finite()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        // Nothing logged for this panel (for example evaluation off): say so.
        area.draw_text(
            &format!("{title}: no data"),
            &("sans-serif", 16).into_font().color(&BLACK),
            (20, 20),
        )
        .map_err(|e| e.to_string())?;
        return Ok(());
    }
    if x1 == x0 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.05).max(1e-6);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(52)
        .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .x_labels(5)
        .y_labels(5)
        .x_label_formatter(&|x| short_number(*x))
        .y_label_formatter(&|y| short_number(*y))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, line) in lines.iter().enumerate() {
        chart
            .draw_series(LineSeries::new(
                line.iter().copied(),
                run_color(i).stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legend_wraps_its_entries_in_order_onto_lines_that_fit() {
        // 100 + 10 + 100 fits in 250; the third would need 320.
        assert_eq!(
            legend_lines(&[100, 100, 100, 40], 250, 10),
            vec![vec![0, 1], vec![2, 3]]
        );
        assert_eq!(legend_lines(&[30, 30, 30], 1000, 10), vec![vec![0, 1, 2]]);
        // A name wider than the picture gets a line of its own.
        assert_eq!(
            legend_lines(&[50, 400, 50], 300, 10),
            vec![vec![0], vec![1], vec![2]]
        );
        assert!(legend_lines(&[], 300, 10).is_empty());
    }

    #[test]
    fn axis_numbers_read_100k_not_100000() {
        assert_eq!(short_number(100_000.0), "100k");
        assert_eq!(short_number(12_500.0), "12.5k");
        assert_eq!(short_number(1_500_000.0), "1.5M");
        assert_eq!(short_number(950.0), "950");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(-2_000.0), "-2k");
        assert_eq!(short_number(0.0), "0");
    }

    /// A run evaluated per side draws the win rates instead of the mean and training returns.
    #[test]
    fn two_player_runs_show_win_rates_per_side() {
        let mut series = BTreeMap::new();
        series.insert("eval/first/win_rate".to_string(), vec![(100.0, 0.5)]);
        series.insert("eval/second/win_rate".to_string(), vec![(100.0, 0.25)]);
        let run = RunCurves {
            name: "board".into(),
            series,
        };
        let titles: Vec<&str> = panels(&[run]).iter().map(|p| p.title).collect();
        assert_eq!(
            titles,
            [
                "evaluation: win rate as first player",
                "evaluation: win rate as second player",
                "total loss (mean of 10 logged values)"
            ]
        );
        let plain = RunCurves {
            name: "cartpole".into(),
            series: BTreeMap::new(),
        };
        assert_eq!(panels(&[plain])[0].title, "evaluation mean return");
    }

    #[test]
    fn a_peers_curve_reads_as_evaluations_against_steps_and_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("breakout-dqn-seed1.csv");
        std::fs::write(
            &path,
            "env_steps,wall_seconds,mean_return,std_return\n25000,60.5,1.5,0.5\n50000,130,4.25,1\n",
        )
        .unwrap();
        let run = read_curves(&path).unwrap();
        assert_eq!(run.name, "breakout-dqn-seed1");
        assert_eq!(
            run.get("eval/mean_return"),
            &[(25000.0, 1.5), (50000.0, 4.25)]
        );
        let panel = &panels(std::slice::from_ref(&run))[0];
        assert_eq!(panel.title, "evaluation mean return");
        assert_eq!(panel.per_run[0].by_time, vec![(60.5, 1.5), (130.0, 4.25)]);

        // A wrong header, a bad row and no rows are errors that name the file and line.
        std::fs::write(&path, "tag,step,value\n").unwrap();
        let text = read_curves(&path).unwrap_err().to_string();
        assert!(
            text.contains("line 1") && text.contains("env_steps"),
            "{text}"
        );
        std::fs::write(&path, "env_steps,wall_seconds,mean_return\n1,2,x\n").unwrap();
        let text = read_curves(&path).unwrap_err().to_string();
        assert!(text.contains("line 2"), "{text}");
        std::fs::write(&path, "env_steps,wall_seconds,mean_return\n").unwrap();
        assert!(matches!(read_curves(&path), Err(PlotError::Empty(_))));
    }

    #[test]
    fn panels_without_a_point_in_any_run_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("freeway-ppo-seed1.csv");
        std::fs::write(&path, "env_steps,wall_seconds,mean_return\n25000,60,21.5\n").unwrap();
        let peer = read_curves(&path).unwrap();
        let titles = |runs: &[RunCurves]| -> Vec<&str> {
            shown_panels(panels(runs)).iter().map(|p| p.title).collect()
        };
        // Peers' curves alone: only the evaluations.
        assert_eq!(
            titles(std::slice::from_ref(&peer)),
            vec!["evaluation mean return"]
        );
        // Beside a training run that logs losses and episodes, every panel.
        std::fs::write(
            dir.path().join(METRICS_CSV),
            "tag,step,value\nloss/total,10,1.5\nepisode/return,10,3\nprogress/training_steps,10,1\n",
        )
        .unwrap();
        let run = read_run(dir.path()).unwrap();
        assert_eq!(titles(&[run, peer]).len(), 3);
        // Nothing anywhere: the panels stay, each to say so.
        let empty = RunCurves {
            name: "empty".into(),
            series: BTreeMap::new(),
        };
        assert_eq!(titles(&[empty]).len(), 3);
    }

    #[test]
    fn a_peers_row_still_being_written_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("freeway-dqn-seed3.csv");
        // Cut inside the mean: read whole, the row would be a wrong point, not an error.
        std::fs::write(
            &path,
            "env_steps,wall_seconds,mean_return\n25000,60,21.5\n50000,130,3",
        )
        .unwrap();
        let run = read_curves(&path).unwrap();
        assert_eq!(run.get("eval/mean_return"), &[(25000.0, 21.5)]);
        // The header alone, still without its newline: a curve with no rows yet.
        std::fs::write(&path, "env_steps,wall_seconds,mean_return").unwrap();
        assert!(matches!(read_curves(&path), Err(PlotError::Empty(_))));
    }

    #[test]
    fn labels_name_the_runs_in_order_and_must_match_their_number() {
        let run = |name: &str| RunCurves {
            name: name.into(),
            series: BTreeMap::new(),
        };
        let mut runs = vec![run("a"), run("b")];
        relabel(&mut runs, &[]).unwrap();
        assert_eq!(runs[1].name, "b");
        relabel(&mut runs, &["CuMind seed 1".into(), "DQN seed 1".into()]).unwrap();
        assert_eq!(runs[0].name, "CuMind seed 1");
        assert_eq!(runs[1].name, "DQN seed 1");
        let err = relabel(&mut runs, &["only one".into()]).unwrap_err();
        assert!(
            err.to_string().contains("1 --label values for 2 runs"),
            "{err}"
        );
        assert_eq!(
            runs[0].name, "CuMind seed 1",
            "a refused relabel changes nothing"
        );
    }

    #[test]
    fn interpolation_is_linear_inside_and_clamped_outside() {
        let p = [(0.0, 0.0), (10.0, 100.0), (20.0, 100.0)];
        assert_eq!(interpolate(&p, 5.0), Some(50.0));
        assert_eq!(interpolate(&p, 15.0), Some(100.0));
        assert_eq!(interpolate(&p, -3.0), Some(0.0));
        assert_eq!(interpolate(&p, 99.0), Some(100.0));
        assert_eq!(interpolate(&[], 1.0), None);
    }

    #[test]
    fn running_mean_covers_the_last_window() {
        let p = [(1.0, 1.0), (2.0, 3.0), (3.0, 5.0)];
        assert_eq!(
            running_mean(&p, 2),
            vec![(1.0, 1.0), (2.0, 2.0), (3.0, 4.0)]
        );
    }

    #[test]
    fn losses_map_to_env_steps_and_seconds_through_the_progress_series() {
        let mut series = BTreeMap::new();
        // 10 training steps per 100 env steps; 2 seconds per 100 env steps.
        series.insert(
            "progress/training_steps".to_string(),
            vec![(0.0, 0.0), (100.0, 10.0), (200.0, 20.0)],
        );
        series.insert(
            "progress/elapsed_seconds".to_string(),
            vec![(0.0, 0.0), (100.0, 2.0), (200.0, 4.0)],
        );
        series.insert("loss/total".to_string(), vec![(5.0, 0.9), (15.0, 0.5)]);
        let run = RunCurves {
            name: "r".into(),
            series,
        };
        let curve = run.by_training_steps(run.get("loss/total"));
        assert_eq!(curve.by_steps, vec![(50.0, 0.9), (150.0, 0.5)]);
        assert_eq!(curve.by_time, vec![(1.0, 0.9), (3.0, 0.5)]);
    }

    #[test]
    fn read_run_leaves_out_an_unfinished_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join(METRICS_CSV);
        std::fs::write(&csv, "tag,step,value\nloss/total,3,1.5\nloss/to").unwrap();
        let run = read_run(dir.path()).unwrap();
        assert_eq!(run.series["loss/total"], vec![(3.0, 1.5)]);
        // A cut inside a number would give a wrong point, not an error: it is left out too.
        std::fs::write(&csv, "tag,step,value\nloss/total,3,1.5\nloss/total,37").unwrap();
        let run = read_run(dir.path()).unwrap();
        assert_eq!(run.series["loss/total"], vec![(3.0, 1.5)]);
    }

    #[test]
    fn read_run_lets_a_resumed_run_replace_the_steps_it_logs_again() {
        let dir = tempfile::tempdir().unwrap();
        // First attempt logged steps 1-4, its last checkpoint was at step 2; the resumed run
        // logs 3 and 4 again, then 5. Another series logged once per step is left alone.
        std::fs::write(
            dir.path().join(METRICS_CSV),
            "tag,step,value\na,1,1\na,2,2\nb,2,20\na,3,3\na,4,4\na,3,30\na,4,40\na,5,50\nb,4,40\n",
        )
        .unwrap();
        let run = read_run(dir.path()).unwrap();
        assert_eq!(
            run.series["a"],
            vec![
                (1.0, 1.0),
                (2.0, 2.0),
                (3.0, 30.0),
                (4.0, 40.0),
                (5.0, 50.0)
            ]
        );
        assert_eq!(run.series["b"], vec![(2.0, 20.0), (4.0, 40.0)]);
    }

    #[test]
    fn read_run_names_a_malformed_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(METRICS_CSV),
            "tag,step,value\nloss/total,3,1.5\nloss/total,x,1\n",
        )
        .unwrap();
        let err = read_run(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("line 3") && err.contains("metrics.csv"),
            "{err}"
        );
        std::fs::write(dir.path().join(METRICS_CSV), "tag,step,value\n").unwrap();
        assert!(matches!(read_run(dir.path()), Err(PlotError::Empty(_))));
    }
}
