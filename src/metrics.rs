//! Where training reports its scalars: a one-method [`MetricSink`] trait, a TensorBoard writer
//! and an in-memory sink for tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Receives what a training run reports: named scalar series, lines for a person and, about
/// once a second, where the run stands. Library code reports here instead of printing; the
/// CLI's sink prints.
pub trait MetricSink {
    fn scalar(&mut self, tag: &str, value: f64, step: u64);
    /// A line for a person: an evaluation result, a warning (default: dropped).
    fn log(&mut self, _line: &str) {}
    /// Where the run stands (default: dropped).
    fn progress(&mut self, _progress: &Progress) {}
    /// Make everything written so far durable (default: nothing to do).
    fn flush(&mut self) {}
}

/// A training run's state, for a progress display.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Progress {
    pub env_steps: u64,
    /// The environment-step budget (0: none).
    pub max_env_steps: u64,
    pub episodes: u64,
    /// Mean return of the last (up to) 20 training episodes.
    pub recent_return: f64,
    /// The last training step's total loss (NaN before the first).
    pub loss: f32,
    pub env_steps_per_second: f64,
    pub training_steps_per_second: f64,
}

/// Discards everything.
#[derive(Debug, Default)]
pub struct NullSink;

impl MetricSink for NullSink {
    fn scalar(&mut self, _: &str, _: f64, _: u64) {}
}

/// Keeps every scalar and line in memory: `series[tag] = [(step, value), ...]`.
#[derive(Debug, Default, Clone)]
pub struct MemorySink {
    pub series: BTreeMap<String, Vec<(u64, f64)>>,
    pub lines: Vec<String>,
}

impl MetricSink for MemorySink {
    fn scalar(&mut self, tag: &str, value: f64, step: u64) {
        self.series
            .entry(tag.to_string())
            .or_default()
            .push((step, value));
    }

    fn log(&mut self, line: &str) {
        self.lines.push(line.to_string());
    }
}

/// TensorBoard event files in one directory per run (tensorboard-rs names files by the second,
/// so two writers on one directory would overwrite each other: each run gets its own).
pub struct TensorBoardSink {
    writer: tensorboard_rs::summary_writer::SummaryWriter,
    dir: PathBuf,
}

impl TensorBoardSink {
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            writer: tensorboard_rs::summary_writer::SummaryWriter::new(dir),
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl MetricSink for TensorBoardSink {
    fn scalar(&mut self, tag: &str, value: f64, step: u64) {
        self.writer.add_scalar(tag, value as f32, step as usize);
    }

    fn flush(&mut self) {
        self.writer.flush();
    }
}

/// Scalars as CSV lines `tag,step,value` in one file per run (appended to on resume), for
/// `cumind plot` and for anyone without TensorBoard. Write errors are counted, not fatal: the
/// run matters more than its curves.
///
/// A run killed mid-write leaves a torn last line (the buffer reaches the file in pieces): on
/// opening, the sink cuts the file back to its last complete line before appending, so the
/// resumed run's first row is not glued to a fragment.
pub struct CsvSink {
    writer: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
    failed_writes: u64,
    torn_bytes: u64,
}

/// The CSV file a run's scalars go to, inside its log directory.
pub const METRICS_CSV: &str = "metrics.csv";

impl CsvSink {
    /// Append to `dir/metrics.csv`, writing the header if the file is new.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        use std::io::Write;
        std::fs::create_dir_all(dir)?;
        let path = dir.join(METRICS_CSV);
        let torn_bytes = if path.exists() {
            cut_torn_tail(&path)?
        } else {
            0
        };
        // New, or emptied because not even its header was finished.
        let fresh = std::fs::metadata(&path).map_or(true, |m| m.len() == 0);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let mut writer = std::io::BufWriter::new(file);
        if fresh {
            writeln!(writer, "tag,step,value")?;
        }
        Ok(Self {
            writer,
            path,
            failed_writes: 0,
            torn_bytes,
        })
    }

    /// Bytes of a torn last line cut from the file when it was opened (0: it ended cleanly).
    pub fn torn_bytes(&self) -> u64 {
        self.torn_bytes
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines that could not be written.
    pub fn failed_writes(&self) -> u64 {
        self.failed_writes
    }
}

/// Truncates `path` after its last newline and returns how many bytes that removed: the
/// unfinished line a killed writer left. Reads backwards in blocks, so a long file costs no more
/// than its tail.
fn cut_torn_tail(path: &Path) -> std::io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    const BLOCK: u64 = 4096;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    let mut end = len;
    let mut block = Vec::new();
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        block.resize((end - start) as usize, 0);
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block)?;
        if let Some(i) = block.iter().rposition(|&b| b == b'\n') {
            let keep = start + i as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
            }
            return Ok(len - keep);
        }
        end = start;
    }
    // No newline at all: not even the header was finished.
    file.set_len(0)?;
    Ok(len)
}

impl MetricSink for CsvSink {
    fn scalar(&mut self, tag: &str, value: f64, step: u64) {
        use std::io::Write;
        if writeln!(self.writer, "{tag},{step},{value}").is_err() {
            self.failed_writes += 1;
        }
    }

    fn flush(&mut self) {
        use std::io::Write;
        if self.writer.flush().is_err() {
            self.failed_writes += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sink_keeps_series_in_order() {
        let mut sink = MemorySink::default();
        sink.scalar("loss", 2.0, 1);
        sink.scalar("loss", 1.0, 2);
        sink.scalar("return", 9.0, 2);
        assert_eq!(sink.series["loss"], vec![(1, 2.0), (2, 1.0)]);
        assert_eq!(sink.series["return"], vec![(2, 9.0)]);
    }

    #[test]
    fn csv_sink_appends_rows_under_one_header() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut sink = CsvSink::new(dir.path()).unwrap();
            sink.scalar("loss/total", 1.5, 3);
            sink.flush();
        }
        {
            let mut sink = CsvSink::new(dir.path()).unwrap();
            sink.scalar("eval/mean_return", -2.0, 40);
            sink.flush();
        }
        let text = std::fs::read_to_string(dir.path().join(METRICS_CSV)).unwrap();
        assert_eq!(
            text,
            "tag,step,value\nloss/total,3,1.5\neval/mean_return,40,-2\n"
        );
    }

    #[test]
    fn csv_sink_cuts_a_torn_last_line_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(METRICS_CSV);
        // Longer than one read block, so the search for the last newline crosses blocks.
        let long_tag = "x".repeat(5000);
        std::fs::write(
            &path,
            format!("tag,step,value\nloss/total,3,1.5\n{long_tag},4"),
        )
        .unwrap();
        {
            let mut sink = CsvSink::new(dir.path()).unwrap();
            assert_eq!(sink.torn_bytes(), long_tag.len() as u64 + 2);
            sink.scalar("loss/total", 1.25, 4);
            sink.flush();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "tag,step,value\nloss/total,3,1.5\nloss/total,4,1.25\n"
        );
        // A clean file is left as it is.
        let sink = CsvSink::new(dir.path()).unwrap();
        assert_eq!(sink.torn_bytes(), 0);
        drop(sink);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn tensorboard_sink_writes_an_event_file() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        {
            let mut sink = TensorBoardSink::new(&run).unwrap();
            sink.scalar("train/loss", 1.5, 3);
            sink.flush();
        }
        let files: Vec<_> = std::fs::read_dir(&run)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(files.len(), 1);
        assert!(files[0]
            .to_string_lossy()
            .starts_with("events.out.tfevents."));
        let size = std::fs::metadata(run.join(&files[0])).unwrap().len();
        assert!(size > 0);
    }
}
