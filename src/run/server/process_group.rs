//! A server made of several processes (a multi-node server's ranks, a deployment's router and
//! workers) as one [`ServerProcess`]: the first member serves; any member's exit is the
//! server's, named by the member that failed; every log is kept up to date together; they are
//! stopped together and each stop is said by name. What the members are to each other
//! ([`Shape`]) decides the rest: which one failed first, and the order they are stopped in.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::host::{FailedRank, Host, HostError, Liveness, Loss, ServerProcess, Stopped};
use servebench_model::catalog::Failure;
use servebench_model::results::meta::ProcessRecord;
use servebench_model::spec::types::{Engine, Server};

use super::server_error::ServerError;

/// How long the ranks that lost a silent rank get to say so in their logs.
const LOSS_WORDS_WAIT: Duration = Duration::from_secs(3);

/// One launched process of a server made of several.
/// The grace the other ranks get when one lost a process mid-point.
const LOST_RANK_GRACE: Duration = Duration::from_secs(2);

pub(super) struct Member {
    /// How its stop is said: `rank 1`, `router`, `decode1`.
    pub name: String,
    /// The host it runs on, by name.
    pub host: String,
    pub process: Box<dyn ServerProcess>,
    /// Its log in the run directory.
    pub log_path: PathBuf,
}

/// What the members of a server are to each other.
pub(super) enum Shape {
    /// A multi-node server's ranks, rank 0 first (it serves HTTP). The rank that failed is the
    /// first seen exited whose own log does not say it lost a peer (the others only followed
    /// it); they are stopped all at once.
    Ranks { engine: Engine },
    /// A routed deployment, the router first. The member that failed is the first seen
    /// exited; the router is stopped first, so it sends nothing more to workers that go.
    Deployment,
}

/// A server made of several processes, the one that serves first.
pub(crate) struct MultiProcessServer {
    members: Vec<Member>,
    shape: Shape,
    /// Members seen exited, in the order they were seen.
    exited: Vec<usize>,
}

/// The log of member `name` beside the server's `log`: `server-g1.decode1.log`,
/// `server-g1.rank1.log`.
pub(super) fn member_log_path(log: &Path, name: &str) -> PathBuf {
    let stem = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "server".into());
    log.with_file_name(format!("{stem}.{name}.log"))
}

/// Refuses a server spread over `count` hosts when fewer are free for it (`key`: the spec's
/// field that asks for them).
pub(super) fn enough_hosts(key: &str, count: usize, free: usize) -> Result<(), ServerError> {
    if free < count {
        return Err(ServerError::Config(format!(
            "{key} is {count} but only {free} host(s) are free for it: list at least {count} hosts in `hosts:`"
        )));
    }
    Ok(())
}

/// The program `server` runs as on `host`: the simulator is servebench itself there (the
/// host's copy of this binary), unless a launcher is given; any other engine's command names
/// its own program.
pub(super) async fn servebench_on(host: &dyn Host, server: &Server) -> Result<String, HostError> {
    let simulated = server.engine == Engine::Sim || server.simulate;
    if simulated && server.launcher.is_none() {
        host.servebench_binary().await
    } else {
        Ok("servebench".to_string())
    }
}

/// Stops every member at once (the members started so far of a launch that failed).
pub(super) async fn stop_members(members: &mut [Member], grace: Duration) -> Vec<Stopped> {
    futures_util::future::join_all(members.iter_mut().map(|m| m.process.stop(grace))).await
}

/// How named members' stops went, as one: gone only when every one is, each said by name,
/// the process group the first one's.
fn stopped_together(each: &[(String, Stopped)]) -> Stopped {
    Stopped {
        outcome: each
            .iter()
            .map(|(name, s)| {
                format!(
                    "{name}: {}{}",
                    s.outcome,
                    if s.gone { "" } else { " (STILL ALIVE)" }
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        pgid: each.first().map_or(0, |(_, s)| s.pgid),
        gone: each.iter().all(|(_, s)| s.gone),
    }
}

impl MultiProcessServer {
    /// `members`, the one that serves first.
    pub(super) fn new(members: Vec<Member>, shape: Shape) -> MultiProcessServer {
        MultiProcessServer {
            members,
            shape,
            exited: Vec::new(),
        }
    }

    fn serving(&self) -> &dyn ServerProcess {
        self.members[0].process.as_ref()
    }

    /// What a rank's own log says it died of.
    fn own_failure(engine: Engine, m: &Member) -> Failure {
        crate::engine::classify(engine, &crate::host::file_tail(&m.log_path, 20_000))
    }

    /// Adds the members that have exited since the last look.
    async fn look(&mut self) {
        for i in 0..self.members.len() {
            if !self.exited.contains(&i) && self.members[i].process.exited().await {
                self.exited.push(i);
            }
        }
    }

    /// True when every rank seen exited says in its log that it lost a peer.
    fn only_followers_exited(&self, engine: Engine) -> bool {
        self.exited
            .iter()
            .all(|&i| Self::own_failure(engine, &self.members[i]) == Failure::RankLost)
    }

    /// The member whose failure brought the server down, by [`Shape`].
    fn first_failed(&self) -> Option<usize> {
        let first = self.exited.first().copied();
        match self.shape {
            Shape::Deployment => first,
            Shape::Ranks { engine } => self
                .exited
                .iter()
                .copied()
                .find(|&i| Self::own_failure(engine, &self.members[i]) != Failure::RankLost)
                .or(first),
        }
    }

    /// A rank that died without a word (killed, its node gone) is known by what the others
    /// say: they lost it. Their words may still be on their way (a Slurm step's output passes
    /// through slurmstepd and srun): they get a moment to arrive.
    async fn lost_by_the_others(&mut self, engine: Engine) -> Option<Failure> {
        let deadline = std::time::Instant::now() + LOSS_WORDS_WAIT;
        loop {
            self.sync_log().await;
            if self
                .members
                .iter()
                .any(|m| Self::own_failure(engine, m) == Failure::RankLost)
            {
                return Some(Failure::RankLost);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl ServerProcess for MultiProcessServer {
    fn url(&self) -> &str {
        self.serving().url()
    }

    fn host_url(&self) -> Option<&str> {
        self.serving().host_url()
    }

    fn through_forward(&self) -> bool {
        self.serving().through_forward()
    }

    fn ids(&self) -> ProcessRecord {
        self.serving().ids()
    }

    fn exited(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            self.look().await;
            if self.exited.is_empty() {
                return false;
            }
            // The logs decide which member failed first: bring them all up to date.
            self.sync_log().await;
            if let Shape::Ranks { engine } = self.shape {
                // Ranks that only lost a peer follow the one that failed, and may be seen
                // gone first (a Slurm step's end takes a while to reach its srun): the failed
                // one gets a moment to be seen too, so the failure is pinned on it.
                let deadline = std::time::Instant::now() + LOSS_WORDS_WAIT;
                while self.exited.len() < self.members.len()
                    && self.only_followers_exited(engine)
                    && std::time::Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    self.look().await;
                    self.sync_log().await;
                }
            }
            true
        })
    }

    fn sync_log(&self) -> BoxFuture<'_, ()> {
        // Each future made here, so the one returned holds no reference to a member.
        let each: Vec<BoxFuture<'_, ()>> =
            self.members.iter().map(|m| m.process.sync_log()).collect();
        Box::pin(async move {
            futures_util::future::join_all(each).await;
        })
    }

    fn log_display(&self) -> String {
        let shown = self.first_failed().unwrap_or(0);
        self.members[shown].process.log_display()
    }

    fn log_lag(&self) -> Duration {
        self.serving().log_lag()
    }

    /// The shortest of the members' poll intervals.
    fn poll_interval(&self) -> Duration {
        self.members
            .iter()
            .map(|m| m.process.poll_interval())
            .min()
            .unwrap_or(Duration::from_millis(50))
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Stopped> {
        Box::pin(async move {
            let each = match self.shape {
                Shape::Ranks { .. } => stop_members(&mut self.members, grace).await,
                Shape::Deployment => {
                    let router = self.members[0].process.stop(grace).await;
                    let workers = stop_members(&mut self.members[1..], grace).await;
                    std::iter::once(router).chain(workers).collect()
                }
            };
            let named: Vec<(String, Stopped)> = self
                .members
                .iter()
                .map(|m| m.name.clone())
                .zip(each)
                .collect();
            stopped_together(&named)
        })
    }

    fn slurm_job(&self) -> Option<servebench_model::results::meta::SlurmJob> {
        // The first member's step holds the allocation.
        self.serving().slurm_job()
    }

    fn host_failure(&mut self) -> BoxFuture<'_, Option<Failure>> {
        Box::pin(async move {
            let i = self.first_failed()?;
            if let Some(f) = self.members[i].process.host_failure().await {
                return Some(f);
            }
            match self.shape {
                Shape::Deployment => None,
                Shape::Ranks { engine } => {
                    if Self::own_failure(engine, &self.members[i]) != Failure::Unknown {
                        return None;
                    }
                    self.lost_by_the_others(engine).await
                }
            }
        })
    }

    fn exit_signal(&mut self) -> Option<i32> {
        match self.shape {
            Shape::Deployment => {
                let i = self.exited.first().copied()?;
                self.members[i].process.exit_signal()
            }
            // Not said for ranks: the signal that ended the rank seen first is often the
            // teardown's (srun and the launcher kill a step's other ranks), not the cause,
            // which the ranks' logs give.
            Shape::Ranks { .. } => None,
        }
    }

    fn lost_process(&mut self) -> BoxFuture<'_, Option<Loss>> {
        Box::pin(async move {
            for i in 0..self.members.len() {
                let Some(loss) = self.members[i].process.lost_process().await else {
                    continue;
                };
                let name = self.members[i].name.clone();
                // One rank short, the others wait on it forever (a collective never
                // completes): all go. A worker that lost a part is stopped by its own look:
                // the router then serves on the others, as it would in a user's deployment.
                if loss.fatal && matches!(self.shape, Shape::Ranks { .. }) {
                    for m in &mut self.members {
                        m.process.stop(LOST_RANK_GRACE).await;
                    }
                }
                return Some(Loss {
                    what: format!("{name}: {}", loss.what),
                    fatal: loss.fatal,
                });
            }
            None
        })
    }

    /// Ranks are asked through rank 0, which serves HTTP for them all; a deployment's
    /// probe is its router's (its workers were given their own at launch).
    fn watch_liveness(&mut self, probe: Liveness) {
        match self.shape {
            Shape::Ranks { .. } => {
                for m in &mut self.members {
                    m.process.watch_liveness(probe.clone());
                }
            }
            Shape::Deployment => {
                if let Some(router) = self.members.first_mut() {
                    router.process.watch_liveness(probe);
                }
            }
        }
    }

    fn failed_rank(&self) -> Option<FailedRank> {
        let i = self.first_failed()?;
        let m = &self.members[i];
        Some(FailedRank {
            rank: i as u32,
            of: self.members.len() as u32,
            host: m.host.clone(),
            log_path: m.log_path.clone(),
            name: matches!(self.shape, Shape::Deployment).then(|| m.name.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_logs_sit_beside_the_servers() {
        assert_eq!(
            member_log_path(Path::new("/runs/x/server-g1.log"), "decode1"),
            Path::new("/runs/x/server-g1.decode1.log")
        );
    }
}
