//! What a training run reports, on a terminal.

use cumind::metrics::{CsvSink, MetricSink, Progress, TensorBoardSink};

/// The training run's sink on a terminal: TensorBoard scalars and the same scalars as CSV (for
/// `cumind plot`), lines on stderr and an indicatif progress bar (lines are printed above the
/// bar so it does not swallow them).
pub struct ConsoleSink {
    tensorboard: TensorBoardSink,
    csv: CsvSink,
    bar: Option<indicatif::ProgressBar>,
}

impl ConsoleSink {
    pub fn new(tensorboard: TensorBoardSink, csv: CsvSink, show_progress: bool) -> Self {
        Self {
            tensorboard,
            csv,
            bar: show_progress.then(indicatif::ProgressBar::new_spinner),
        }
    }

    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.flush();
        if self.csv.failed_writes() > 0 {
            eprintln!(
                "warning: {} lines could not be written to {}",
                self.csv.failed_writes(),
                self.csv.path().display()
            );
        }
    }
}

impl MetricSink for ConsoleSink {
    fn scalar(&mut self, tag: &str, value: f64, step: u64) {
        self.tensorboard.scalar(tag, value, step);
        self.csv.scalar(tag, value, step);
    }

    fn log(&mut self, line: &str) {
        match &self.bar {
            // A hidden bar (not a terminal) would swallow the line.
            Some(bar) if !bar.is_hidden() => bar.println(line),
            _ => eprintln!("{line}"),
        }
    }

    fn progress(&mut self, p: &Progress) {
        let Some(bar) = &self.bar else {
            return;
        };
        if p.max_env_steps > 0 && bar.length() != Some(p.max_env_steps) {
            bar.set_length(p.max_env_steps);
            let style = indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} env steps | {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
        }
        bar.set_position(p.env_steps);
        bar.set_message(format!(
            "episodes {} | return {:.1} | loss {:.3} | {:.0} env/s, {:.0} train/s",
            p.episodes,
            p.recent_return,
            p.loss,
            p.env_steps_per_second,
            p.training_steps_per_second
        ));
    }

    fn flush(&mut self) {
        self.tensorboard.flush();
        self.csv.flush();
    }
}
