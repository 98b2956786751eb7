//! Request records written off the measuring threads. Serialising a finished request's record
//! (64 chunks and more), redacting it and writing it took tens of microseconds on a tokio
//! worker; at 512 streams ending together that queued every other stream's reads behind them
//! for 10-30 ms, and a read that late merges a token's arrival with the next one's. The
//! writer thread does that work on a thread of its own, which the kernel schedules against
//! the workers (a worker woken by a read need not wait for it), while the request's task
//! waits for the answer without holding its worker: a record that could not be written is
//! still not measured, as with a direct write. The thread also folds each written record into
//! its round's tally in the same step, so every record in the file is in the point's summary
//! even when the task that sent it is gone before the answer comes back.

use std::sync::mpsc;

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::tally::RoundTally;

use servebench_model::results::records::RequestRecord;

/// Where each request record goes as it completes: `requests.jsonl` in the run directory, or
/// the remote agent's stdout. A sink that fails has already stopped the run (a request that
/// cannot be recorded is not measured), and the record is left out of the point.
pub(crate) type RecordSink =
    std::sync::Arc<dyn Fn(&RequestRecord) -> std::io::Result<()> + Send + Sync>;

/// Where a round's written records are folded (None once the round took its tally back).
pub(crate) type TallyCell = Arc<Mutex<Option<RoundTally>>>;

/// A record to write, the tally it is folded into once written, and where to hand it back
/// with whether it was written; or a barrier, answered once every job before it is done.
enum Job {
    Write(
        Box<RequestRecord>,
        Option<TallyCell>,
        oneshot::Sender<(RequestRecord, bool)>,
    ),
    Barrier(oneshot::Sender<()>),
}

/// The thread that writes records to a sink, in the order they are given.
pub(crate) struct RecordWriter {
    jobs: mpsc::Sender<Job>,
}

impl RecordWriter {
    /// Starts the thread; it ends when the writer is dropped. Each record is given the worker
    /// that `routing` knows served it (a launched deployment's) before it is written.
    pub(crate) fn start(
        sink: RecordSink,
        routing: std::sync::Arc<crate::run::server::routing::RoutingBook>,
    ) -> RecordWriter {
        let (jobs, due) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("servebench-records".into())
            .spawn(move || {
                yield_to_the_measuring_threads();
                for job in due {
                    match job {
                        Job::Write(mut rec, tally, back) => {
                            routing.attribute(&mut rec);
                            let written = sink(&rec).is_ok();
                            if written
                                && let Some(t) = &tally
                                && let Some(t) =
                                    t.lock().unwrap_or_else(|p| p.into_inner()).as_mut()
                            {
                                t.add(&rec);
                            }
                            let _ = back.send((*rec, written));
                        }
                        Job::Barrier(back) => {
                            let _ = back.send(());
                        }
                    }
                }
            })
            .expect("the OS starts a thread");
        RecordWriter { jobs }
    }

    /// Writes `rec` (folding it into `tally` once written); gives it back when it was
    /// written, None when it was not (the sink failed and has stopped the run, or the writer
    /// thread is gone).
    pub(crate) async fn write(
        &self,
        rec: RequestRecord,
        tally: Option<TallyCell>,
    ) -> Option<RequestRecord> {
        let (back, answer) = oneshot::channel();
        self.jobs
            .send(Job::Write(Box::new(rec), tally, back))
            .ok()?;
        match answer.await {
            Ok((rec, true)) => Some(rec),
            _ => None,
        }
    }

    /// Waits until every record given before is written and folded.
    pub(crate) async fn drain(&self) {
        let (back, answer) = oneshot::channel();
        if self.jobs.send(Job::Barrier(back)).is_ok() {
            let _ = answer.await;
        }
    }
}

/// Lowers this thread's priority by 10 nice levels (this thread only: Linux's `setpriority` on
/// a thread id). When 512 streams end together, its serialisation and redaction took as much
/// CPU as the tokio workers, on cores the server under test may share: the kernel now gives the
/// workers reading tokens, and the server reading the next requests, the CPU first. Records are
/// not timed: a record written late only delays its task's next request, off every clock.
fn yield_to_the_measuring_threads() {
    #[cfg(target_os = "linux")]
    {
        let tid = nix::unistd::gettid().as_raw();
        // SAFETY: getpriority and setpriority read their integer arguments and touch no memory
        // of ours. A refusal leaves the priority as it was, which is only slower.
        unsafe {
            let who = tid as nix::libc::id_t;
            // Relative to the run's own priority (a run started under `nice` stays below it).
            let own = nix::libc::getpriority(nix::libc::PRIO_PROCESS, who);
            nix::libc::setpriority(nix::libc::PRIO_PROCESS, who, (own + 10).min(19));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn records_are_written_in_order_and_a_failed_write_gives_none() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let sink: RecordSink = Arc::new(move |r: &RequestRecord| {
            if r.index == 2 {
                return Err(std::io::Error::other("disk full"));
            }
            kept.lock().unwrap().push(r.index);
            Ok(())
        });
        let writer = RecordWriter::start(sink, Default::default());
        for index in 0..4 {
            let rec = RequestRecord {
                index,
                ..RequestRecord::fixture()
            };
            let back = writer.write(rec, None).await;
            assert_eq!(back.map(|r| r.index), (index != 2).then_some(index));
        }
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 3]);
    }

    /// The writer runs 10 nice levels below the process and the caller's thread keeps its own.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_writer_thread_yields_to_the_measuring_threads() {
        let sink: RecordSink = Arc::new(|_: &RequestRecord| Ok(()));
        let writer = RecordWriter::start(sink, Default::default());
        // One record through it: the thread has lowered its priority by then.
        assert!(writer.write(RequestRecord::fixture(), None).await.is_some());
        let nice = |stat: &str| -> i64 {
            // Field 19 of /proc/<pid>/task/<tid>/stat, counted after the command's parenthesis.
            let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
            rest.split_whitespace().nth(16).unwrap().parse().unwrap()
        };
        let mut writers = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let dir = task.unwrap().path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim() == "servebench-reco" {
                writers.push(nice(&std::fs::read_to_string(dir.join("stat")).unwrap()));
            }
        }
        assert!(!writers.is_empty(), "no record writer thread found");
        let own = nice(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
        assert!(
            writers.contains(&(own + 10).min(19)),
            "{writers:?} (own {own})"
        );
    }
}
