//! GPU telemetry while a round of a point runs: `nvidia-smi` in its looping mode (`-lms`),
//! or a source polled every interval (`amd-smi metric --json`, a DCGM exporter's
//! `/metrics`), started with the round and stopped at its end, each reading of every GPU
//! recorded (`gpu.jsonl`) as it arrives. It runs where the point is measured from, which is
//! the server's host for the programs (this machine for `host: local`, the agent on an SSH
//! host or Slurm node).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

use servebench_model::results::gpu::{GpuReading, GpuSample};

/// Where each reading goes as it arrives: the run directory's `gpu.jsonl` (or the agent's
/// stdout).
pub(crate) type GpuSink = Arc<dyn Fn(&GpuSample) -> std::io::Result<()> + Send + Sync>;

/// The fields asked of nvidia-smi, in the order [`parse_line`] reads them. The last is the
/// clock event (throttle) reasons' bitmask, `clocks_event_reasons.active` since driver 535;
/// older drivers only know `clocks_throttle_reasons.active` (the same column).
const FIELDS: &str = "index,uuid,name,memory.used,memory.free,memory.total,clocks.sm,clocks.mem,\
utilization.gpu,power.draw,power.limit,temperature.gpu,";
const REASONS_NEW: &str = "clocks_event_reasons.active";
const REASONS_OLD: &str = "clocks_throttle_reasons.active";

/// The longest line kept from nvidia-smi (a GPU's line is about 150 bytes); longer ones are
/// dropped whole.
const MAX_LINE: usize = 4096;
/// The most GPUs one reading holds.
const MAX_GPUS: usize = 256;
/// How long nvidia-smi gets to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(1);
/// How long a round waits for the first reading before it sends (NVML's start-up takes a few
/// hundred ms): the window then opens with a reading before it, so its edge is measured, not
/// extrapolated, and a round that ends at once (a crash) still has a reading.
const FIRST_WAIT: Duration = Duration::from_secs(2);

/// How long one poll of amd-smi may take (a Python program: its start-up alone is a few
/// hundred ms) and one scrape of a DCGM exporter.
const AMD_SMI_TIMEOUT: Duration = Duration::from_secs(10);
const DCGM_TIMEOUT: Duration = Duration::from_secs(2);

/// What a round's sampler reads.
pub(crate) enum Source {
    /// `nvidia-smi` at this path, in its looping mode.
    NvidiaSmi(PathBuf),
    /// `amd-smi` at this path, run every interval.
    AmdSmi(PathBuf),
    /// A DCGM exporter, scraped every interval.
    Dcgm(Arc<super::gpu_dcgm::DcgmExporter>),
}

impl Source {
    /// The source's name, as the report gives it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Source::NvidiaSmi(_) => "nvidia-smi",
            Source::AmdSmi(_) => "amd-smi",
            Source::Dcgm(_) => "dcgm",
        }
    }

    /// One reading of a polled source.
    async fn poll(&self) -> Result<Vec<GpuReading>, super::gpu_error::ReadError> {
        Ok(match self {
            Source::NvidiaSmi(_) => return Err(super::gpu_error::ReadError::NotPolled),
            Source::AmdSmi(p) => super::gpu_amd::read(p, AMD_SMI_TIMEOUT).await?,
            Source::Dcgm(e) => e.read(DCGM_TIMEOUT).await?,
        })
    }
}

/// The program `name` on `PATH`, if there is one.
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The argument vector for nvidia-smi (never a shell string).
fn args(interval: Duration, reasons: &str) -> Vec<String> {
    vec![
        format!("--query-gpu={FIELDS}{reasons}"),
        "--format=csv,noheader,nounits".into(),
        "-lms".into(),
        interval.as_millis().max(1).to_string(),
    ]
}

/// A sampler running for one round. Dropped without [`GpuSampler::finish`] (a round that
/// ended early), it still stops nvidia-smi: its task sees the stop channel close.
pub(crate) struct GpuSampler {
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    samples: Arc<Mutex<Kept>>,
}

impl GpuSampler {
    /// Starts `source` reading every `interval` and waits (at most [`FIRST_WAIT`]) for its
    /// first reading. One that cannot be started gives nothing and says why through `failed`.
    pub(crate) async fn start(
        source: Arc<Source>,
        interval: Duration,
        point: &str,
        round: u32,
        sink: GpuSink,
        failed: Arc<Mutex<Option<String>>>,
    ) -> GpuSampler {
        let samples = Arc::new(Mutex::new(Kept::default()));
        let (stop, stopped) = oneshot::channel();
        let (first, first_seen) = oneshot::channel();
        let tag = Tag {
            point: point.to_string(),
            round,
        };
        let channels = (stopped, first);
        let task = match source.as_ref() {
            Source::NvidiaSmi(program) => tokio::spawn(sample(
                program.clone(),
                interval,
                tag,
                sink,
                samples.clone(),
                failed,
                channels,
            )),
            _ => tokio::spawn(poll(
                source,
                interval,
                tag,
                sink,
                samples.clone(),
                failed,
                channels,
            )),
        };
        // Dropped unsent when the sampler ends without a reading: no wait then.
        let _ = tokio::time::timeout(FIRST_WAIT, first_seen).await;
        GpuSampler {
            stop: Some(stop),
            task: Some(task),
            samples,
        }
    }

    /// Stops nvidia-smi (SIGTERM, then SIGKILL) and returns the round's readings.
    pub(crate) async fn finish(mut self) -> Vec<GpuSample> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.samples
            .lock()
            .map(|mut k| std::mem::take(&mut k.samples))
            .unwrap_or_default()
    }
}

struct Tag {
    point: String,
    round: u32,
}

/// Runs nvidia-smi until `stopped`, the old spelling of the reasons' field tried when the
/// new one is refused before any reading.
async fn sample(
    program: PathBuf,
    interval: Duration,
    tag: Tag,
    sink: GpuSink,
    samples: Arc<Mutex<Kept>>,
    failed: Arc<Mutex<Option<String>>>,
    (mut stopped, first): (oneshot::Receiver<()>, oneshot::Sender<()>),
) {
    let mut first = Some(first);
    for reasons in [REASONS_NEW, REASONS_OLD] {
        let mut child = match tokio::process::Command::new(&program)
            .args(args(interval, reasons))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // Dropped (the run's task cancelled): killed, never left behind.
            .kill_on_drop(true)
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                set(&failed, format!("cannot start {}: {e}", program.display()));
                return;
            }
        };
        let Some(mut out) = child.stdout.take() else {
            return;
        };
        // Its stderr is drained as it comes (a full pipe would stop it), the first
        // MAX_LINE bytes kept for the message.
        let stderr = child.stderr.take().map(|mut e| {
            tokio::spawn(async move {
                let (mut kept, mut b) = (Vec::new(), [0u8; 1024]);
                while let Ok(n) = e.read(&mut b).await {
                    if n == 0 {
                        break;
                    }
                    let room = MAX_LINE.saturating_sub(kept.len()).min(n);
                    kept.extend_from_slice(&b[..room]);
                }
                kept
            })
        });
        let mut lines = Lines::default();
        let mut group = Group::default();
        let mut read_any = false;
        let mut buf = [0u8; 8192];
        let ended_alone = loop {
            let n = tokio::select! {
                r = out.read(&mut buf) => r.unwrap_or(0),
                _ = &mut stopped => break false,
            };
            if n == 0 {
                break true;
            }
            for line in lines.push(&buf[..n]) {
                let Some(reading) = parse_line(&line) else {
                    continue;
                };
                read_any = true;
                if let Some(f) = first.take() {
                    let _ = f.send(());
                }
                if let Some(done) = group.add(reading, &tag) {
                    keep(&sink, &samples, done);
                }
            }
        };
        if let Some(done) = group.take(&tag) {
            keep(&sink, &samples, done);
        }
        stop_child(&mut child).await;
        if !ended_alone {
            return;
        }
        // It ended by itself: refused the field (try the old spelling) or failed.
        let mut err = String::new();
        if let Some(task) = stderr
            && let Ok(Ok(kept)) = tokio::time::timeout(Duration::from_millis(500), task).await
        {
            err = String::from_utf8_lossy(&kept).trim().to_string();
        }
        if read_any || reasons == REASONS_OLD || !err.contains("valid field") {
            if read_any {
                set(
                    &failed,
                    format!(
                        "{} ended by itself while the round ran{}",
                        program.display(),
                        if err.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", servebench_model::text::truncate(&err, 200))
                        }
                    ),
                );
            } else {
                set(
                    &failed,
                    format!(
                        "{} ended without a reading{}",
                        program.display(),
                        if err.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", servebench_model::text::truncate(&err, 200))
                        }
                    ),
                );
            }
            return;
        }
    }
}

/// Reads a polled source every `interval` until `stopped` (a read that takes longer delays
/// the next), each answer a reading; the first failure is kept as the sampler's cause.
async fn poll(
    source: Arc<Source>,
    interval: Duration,
    tag: Tag,
    sink: GpuSink,
    samples: Arc<Mutex<Kept>>,
    failed: Arc<Mutex<Option<String>>>,
    (mut stopped, first): (oneshot::Receiver<()>, oneshot::Sender<()>),
) {
    let mut first = Some(first);
    let mut failures: u32 = 0;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut stopped => return,
        }
        let read = tokio::select! {
            r = source.poll() => r,
            _ = &mut stopped => return,
        };
        match read {
            Ok(mut gpus) => {
                gpus.truncate(MAX_GPUS);
                if let Some(f) = first.take() {
                    let _ = f.send(());
                }
                let s = GpuSample {
                    point: tag.point.clone(),
                    round: tag.round,
                    t: crate::client::unix_now(),
                    gpus,
                    cut: None,
                };
                keep(&sink, &samples, s);
            }
            Err(why) => {
                set(&failed, why.to_string());
                // Nothing read yet: the round need not wait for a first reading.
                drop(first.take());
                // A failing source is asked again later and later (a failing exporter was
                // re-fetched, 4 MiB each, every 50 ms, beside the requests measured).
                failures += 1;
                let wait = interval
                    .saturating_mul(1 << failures.min(16))
                    .min(MAX_BACKOFF);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = &mut stopped => return,
                }
                continue;
            }
        }
        failures = 0;
    }
}

/// The longest wait between two reads of a failing polled source.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

fn set(failed: &Mutex<Option<String>>, why: String) {
    if let Ok(mut f) = failed.lock()
        && f.is_none()
    {
        *f = Some(why);
    }
}

/// Readings a point keeps in memory (at 8 GPUs every 50 ms, 3 hours); later ones still go
/// to the sink, and the point's energy counts the uncovered end at the covered mean.
pub(crate) const MAX_KEPT: usize = 200_000;
/// Bytes of readings a point keeps in memory, whatever their count: a source that floods
/// (readings as fast as it can print them, 256 GPUs with long names) stops being kept here,
/// long before the allocator gives out.
pub(crate) const MAX_KEPT_BYTES: usize = 64 << 20;
/// The most bytes of a GPU's name or uuid kept (real ones are under 100).
const MAX_TEXT: usize = 256;

/// What a reading takes in memory, about: its fixed part and its texts.
pub(crate) fn sample_bytes(s: &GpuSample) -> usize {
    std::mem::size_of::<GpuSample>()
        + s.gpus
            .iter()
            .map(|g| {
                std::mem::size_of::<GpuReading>()
                    + g.name.as_ref().map_or(0, String::len)
                    + g.uuid.as_ref().map_or(0, String::len)
            })
            .sum::<usize>()
}

/// A reading as a GPU can give it: texts cut to [`MAX_TEXT`] bytes, and values outside what
/// any GPU reports (negative memory, a 150% utilisation, NaN) left out rather than believed
/// (-5 MiB free raised `gpu-memory-tight`).
pub(crate) fn sane(mut r: GpuReading) -> GpuReading {
    let cut = |t: &mut Option<String>| {
        if let Some(s) = t
            && s.len() > MAX_TEXT
        {
            *s = servebench_model::text::truncate(s, MAX_TEXT);
        }
    };
    cut(&mut r.name);
    cut(&mut r.uuid);
    let within = |v: &mut Option<f64>, lo: f64, hi: f64| {
        if v.is_some_and(|x| !(lo..=hi).contains(&x)) {
            *v = None;
        }
    };
    // 16 TiB of memory, 100 GHz, 100 kW, -60..200 °C: far past any GPU, short of nonsense.
    for m in [
        &mut r.memory_used_mib,
        &mut r.memory_free_mib,
        &mut r.memory_total_mib,
    ] {
        within(m, 0.0, f64::from(16u32 << 20));
    }
    within(&mut r.sm_mhz, 0.0, 100_000.0);
    within(&mut r.mem_mhz, 0.0, 100_000.0);
    within(&mut r.util_pct, 0.0, 100.0);
    within(&mut r.power_w, 0.0, 100_000.0);
    within(&mut r.power_limit_w, 0.0, 100_000.0);
    within(&mut r.temp_c, -60.0, 200.0);
    r
}

/// A round's readings in memory and their bytes.
#[derive(Default)]
pub(crate) struct Kept {
    samples: Vec<GpuSample>,
    bytes: usize,
}

fn keep(sink: &GpuSink, kept: &Mutex<Kept>, mut s: GpuSample) {
    s.gpus = s.gpus.into_iter().map(sane).collect();
    // A reading that cannot be written is lost, not fatal: telemetry is a side channel.
    let _ = sink(&s);
    let bytes = sample_bytes(&s);
    if let Ok(mut k) = kept.lock()
        && k.samples.len() < MAX_KEPT
        && k.bytes + bytes <= MAX_KEPT_BYTES
    {
        k.bytes += bytes;
        k.samples.push(s);
    }
}

/// SIGTERM, a grace period, then SIGKILL.
async fn stop_child(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// Lines out of a byte stream, each at most [`MAX_LINE`] bytes (a longer one is dropped).
#[derive(Default)]
struct Lines {
    pending: Vec<u8>,
    overlong: bool,
}

impl Lines {
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                if !self.overlong {
                    out.push(String::from_utf8_lossy(&self.pending).into_owned());
                }
                self.pending.clear();
                self.overlong = false;
            } else if self.pending.len() < MAX_LINE {
                self.pending.push(b);
            } else {
                self.overlong = true;
            }
        }
        out
    }
}

/// The lines of one interval: nvidia-smi prints every GPU in index order, so a GPU seen
/// again starts the next reading.
#[derive(Default)]
struct Group {
    t: f64,
    gpus: Vec<GpuReading>,
}

impl Group {
    fn add(&mut self, r: GpuReading, tag: &Tag) -> Option<GpuSample> {
        let done = if self.gpus.iter().any(|g| g.index == r.index) {
            self.take(tag)
        } else {
            None
        };
        if self.gpus.is_empty() {
            self.t = crate::client::unix_now();
        }
        if self.gpus.len() < MAX_GPUS {
            self.gpus.push(r);
        }
        done
    }

    fn take(&mut self, tag: &Tag) -> Option<GpuSample> {
        if self.gpus.is_empty() {
            return None;
        }
        Some(GpuSample {
            point: tag.point.clone(),
            round: tag.round,
            t: self.t,
            gpus: std::mem::take(&mut self.gpus),
            cut: None,
        })
    }
}

/// One line of `--format=csv,noheader,nounits` for [`FIELDS`]; None when it is not one (a
/// message, a header). `[N/A]` and `[Not Supported]` become absent fields.
pub(crate) fn parse_line(line: &str) -> Option<GpuReading> {
    let cells: Vec<&str> = line.split(',').map(str::trim).collect();
    // index, uuid, name (which might hold commas), then ten numbers.
    if cells.len() < 13 {
        return None;
    }
    let n = cells.len();
    let index = cells[0].parse::<u32>().ok()?;
    let text = |s: &str| (!absent(s)).then(|| s.to_string());
    let num = |i: usize| -> Option<f64> {
        let s = cells[i];
        if absent(s) {
            return None;
        }
        s.parse::<f64>().ok().filter(|v| v.is_finite())
    };
    let tail = n - 10;
    let name = cells[2..tail].join(",");
    let throttle = {
        let s = cells[n - 1];
        let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"));
        match hex {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.parse::<u64>().ok(),
        }
    };
    Some(GpuReading {
        index,
        uuid: text(cells[1]),
        name: text(&name),
        memory_used_mib: num(tail),
        memory_free_mib: num(tail + 1),
        memory_total_mib: num(tail + 2),
        sm_mhz: num(tail + 3),
        mem_mhz: num(tail + 4),
        util_pct: num(tail + 5),
        power_w: num(tail + 6),
        power_limit_w: num(tail + 7),
        temp_c: num(tail + 8),
        throttle,
    })
}

fn absent(s: &str) -> bool {
    s.is_empty() || (s.starts_with('[') && s.ends_with(']'))
}

#[cfg(test)]
mod tests {

    /// A flood of readings (256 GPUs with 4 KiB names, as fast as it prints) is kept up to a
    /// byte budget, not a count: it took the runner to 2.1 GB in 10 s.
    #[test]
    fn a_flood_of_readings_is_kept_within_its_bytes() {
        let kept = Mutex::new(Kept::default());
        let sink: GpuSink = Arc::new(|_| Ok(()));
        let long = "x".repeat(4000);
        let reading = GpuReading {
            index: 0,
            uuid: Some(long.clone()),
            name: Some(long),
            memory_free_mib: Some(-5.0),
            ..GpuReading::default()
        };
        for _ in 0..2_000 {
            let s = GpuSample {
                point: "p001".into(),
                round: 0,
                t: 0.0,
                gpus: vec![reading.clone(); MAX_GPUS],
                cut: None,
            };
            keep(&sink, &kept, s);
        }
        let k = kept.lock().unwrap();
        assert!(k.bytes <= MAX_KEPT_BYTES, "{}", k.bytes);
        assert!(k.samples.len() < 2_000, "cut by bytes: {}", k.samples.len());
        let g = &k.samples[0].gpus[0];
        assert!(g.name.as_ref().unwrap().len() <= MAX_TEXT + 4);
        assert_eq!(g.memory_free_mib, None, "no GPU has -5 MiB free");
    }
    use super::*;

    #[test]
    fn a_line_of_nvidia_smi_is_read_and_unsupported_fields_are_absent() {
        let r = parse_line(
            "1, GPU-abc, NVIDIA H200, 1000, 140000, 143771, 1980, 3201, 87, 612.50, 700.00, 61, 0x0000000000000004",
        )
        .unwrap();
        assert_eq!(r.index, 1);
        assert_eq!(r.name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(r.memory_free_mib, Some(140000.0));
        assert_eq!(r.power_w, Some(612.5));
        assert_eq!(r.power_limit_w, Some(700.0));
        assert_eq!(r.throttle, Some(4));
        let r = parse_line(
            "0, GPU-x, Tesla T4, 5, 15000, 15360, 300, 5000, [N/A], [Not Supported], 70.00, 40, [N/A]",
        )
        .unwrap();
        assert_eq!(r.util_pct, None);
        assert_eq!(r.power_w, None);
        assert_eq!(r.throttle, None);
        assert!(parse_line("No devices were found").is_none());
        assert!(parse_line("index, uuid").is_none());
    }

    #[test]
    fn a_name_with_commas_keeps_the_numbers_in_place() {
        let r = parse_line("0, GPU-x, A, B, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x1").unwrap();
        assert_eq!(r.name.as_deref(), Some("A,B"));
        assert_eq!(r.memory_used_mib, Some(1.0));
        assert_eq!(r.temp_c, Some(9.0));
        assert_eq!(r.throttle, Some(1));
    }

    #[test]
    fn lines_are_bounded_and_gpus_group_into_readings() {
        let mut l = Lines::default();
        let long = vec![b'x'; MAX_LINE + 10];
        assert!(l.push(&long).is_empty());
        assert_eq!(l.push(b"\nok\n"), vec!["ok".to_string()]);
        let tag = Tag {
            point: "p1".into(),
            round: 0,
        };
        let mut g = Group::default();
        let r = |i| GpuReading {
            index: i,
            ..GpuReading::default()
        };
        assert!(g.add(r(0), &tag).is_none());
        assert!(g.add(r(1), &tag).is_none());
        let first = g.add(r(0), &tag).unwrap();
        assert_eq!(first.gpus.len(), 2);
        assert_eq!(g.take(&tag).unwrap().gpus.len(), 1);
    }
}
