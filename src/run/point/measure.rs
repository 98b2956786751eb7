//! A point measured: its prompts made and its validity checked before the first round, its
//! rounds sent (each through `round`), and its record finished from what they folded.

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, PointRecord, Wall};
use servebench_model::spec::Point;
use servebench_model::spec::types::Experiment;

use super::planned::generation_request;
use super::prompts::Prompts;
use super::runner::PointRunner;
use crate::client::Client;
use crate::run::probe::{PointEnd, Probes, validity};

/// A measured point and whether the run was interrupted during it.
pub(crate) struct PointOutcome {
    pub record: PointRecord,
    pub interrupted: bool,
}

impl PointOutcome {
    /// A point that could not send its measured requests: flagged and marked incomplete.
    fn abandoned(
        mut record: PointRecord,
        kind: FlagKind,
        message: String,
        interrupted: bool,
    ) -> Self {
        record.flags.push(Flag::new(kind, message));
        record.incomplete = true;
        record.status = Some(servebench_model::results::records::PointStatus::Failed);
        PointOutcome {
            record,
            interrupted,
        }
    }
}

impl PointRunner {
    /// Measures `point` against the server at `client` (all rounds), with the prompts
    /// `given`, or read from the spec's prompt file when None (the remote agent has no
    /// access to the user's files).
    pub(crate) async fn measure(
        &mut self,
        client: &Client,
        point: &Point,
        group: &str,
        given: Option<Vec<String>>,
    ) -> PointOutcome {
        let started_at = crate::client::unix_now();
        let wall = move || {
            Some(Wall {
                started_at,
                ended_at: crate::client::unix_now(),
            })
        };
        let exp = &point.experiment;
        let mut record = PointRecord::empty(point, group);
        self.progress.point_started(&point.id, &point.label());
        let mut flags: Vec<Flag> = Vec::new();
        let prompts = match self.prompts(client, exp, given, &mut flags).await {
            Ok(p) => p,
            Err((kind, message, calibration)) => {
                let interrupted = self.interrupt.is_set();
                record.calibration = calibration;
                record.wall = wall();
                let outcome = PointOutcome::abandoned(record, kind, message, interrupted);
                // Every point says how it ended on the console, a failed one too.
                self.progress.point_finished(
                    &point.id,
                    &crate::run::progress::point_line(point, &outcome.record),
                );
                return outcome;
            }
        };
        // Agent sessions' prompts are their traces' blocks, a capture's its records' messages:
        // not the workload's prompt.
        let own_prompts =
            exp.agentic().is_none() && exp.load.as_ref().and_then(|l| l.capture()).is_none();
        record.requested_prompt_tokens = prompts.requested().filter(|_| own_prompts);
        record.calibration = prompts.calibration.clone();
        // Before the first round and its cache reset: outside every measured window.
        let checks = match exp.validity.any() {
            true => self.validity_before(client, point, &prompts).await,
            false => None,
        };

        // Every measured record is folded in as it finishes (it is in requests.jsonl already).
        let mut fold = servebench_report::measure::summary::PointFold::new(exp);
        let mut probes = self.probes(point, checks);
        let mut interrupted = false;
        let mut observed = servebench_report::measure::system::Observed::default();
        for round in 0..exp.repeat {
            if self.interrupt.is_set() {
                interrupted = true;
                break;
            }
            let stopped = self
                .round(
                    client,
                    point,
                    round,
                    &prompts,
                    &mut probes,
                    (&mut flags, &mut observed, &mut fold),
                )
                .await;
            if stopped {
                interrupted = true;
                break;
            }
        }

        if let Some(cause @ crate::run::interrupt::StopCause::WriteFailed { .. }) =
            self.interrupt.cause()
        {
            flags.push(Flag::new(
                FlagKind::WriteFailed,
                format!("{cause}; the point stopped there"),
            ));
        }
        finish_record(
            &mut record,
            exp,
            fold,
            probes,
            &observed,
            (flags, interrupted),
        );
        record.wall = wall();
        name_attention(&mut record, self.attention.as_deref());
        self.progress
            .point_finished(&point.id, &crate::run::progress::point_line(point, &record));
        PointOutcome {
            record,
            interrupted,
        }
    }

    /// The validity checks that run before the point's first round: its canaries, and the
    /// consistency prompt alone. None when an interrupt stopped them.
    async fn validity_before(
        &mut self,
        client: &Client,
        point: &Point,
        prompts: &Prompts,
    ) -> Option<validity::Checks> {
        use crate::prompt::canary;
        let exp = &point.experiment;
        let asker = validity::Asker {
            template: generation_request(exp, String::new(), &prompts.target),
            path: crate::run::request::RequestPath::new(self.path_parts(client, point, 0), None),
        };
        let length = prompts
            .requested()
            .unwrap_or(validity::UNSIZED_PROMPT_TOKENS);
        let mut checks = validity::Checks::new(asker.clone());
        if let Some(spec) = exp.validity.canaries() {
            let target = length.saturating_sub(canary::OVERHEAD_TOKENS).max(16);
            let filler = self.filler(client, exp, prompts, target).await;
            checks.view.canaries = validity::canaries(&asker, &spec, filler.as_deref()).await;
        }
        if let Some(spec) = exp.validity.consistency() {
            let tokens = spec
                .prompt_tokens
                .unwrap_or(length.min(validity::CONSISTENCY_PROMPT_TOKENS));
            let target = tokens.saturating_sub(canary::OVERHEAD_TOKENS).max(16);
            match self.filler(client, exp, prompts, target).await {
                Ok(filler) => checks.solo = Some(validity::solo(&asker, &spec, &filler).await?),
                Err(why) => checks.unjudged_consistency(why.to_string()),
            }
        }
        if self.interrupt.is_set() {
            return None;
        }
        Some(checks)
    }
}

/// A point whose server cached nothing names the model's attention layout, where it is
/// known: sliding and linear layers keep no whole prefix.
fn name_attention(record: &mut PointRecord, layout: Option<&str>) {
    let Some(layout) = layout else { return };
    for f in &mut record.flags {
        if f.kind == FlagKind::NoPrefixHits {
            f.message
                .push_str(&format!(". The model's attention: {layout}"));
        }
    }
}

/// The point's record from its rounds: the summary of the folded records, the client's
/// load figures, each probe's part, a cost without telemetry, and a failed client's verdict.
fn finish_record(
    record: &mut PointRecord,
    exp: &Experiment,
    fold: servebench_report::measure::summary::PointFold,
    probes: Probes,
    observed: &servebench_report::measure::system::Observed,
    (flags, interrupted): (Vec<Flag>, bool),
) {
    let mut fold = fold;
    let summary = fold.finish(exp, flags, interrupted);
    record.ok = summary.ok;
    record.errors = summary.errors;
    record.error_kinds = summary.error_kinds;
    record.metrics = summary.metrics;
    record.flags = summary.flags;
    record.load = fold
        .system
        .finish(exp, observed, &mut record.metrics, &mut record.flags);
    record.incomplete = summary.incomplete;
    record.status = Some(summary.status);
    record.prefix_cache = summary.prefix_cache;
    (record.trace_cache, record.jobs) = (summary.trace_cache, summary.jobs);
    if let Some(agent) = exp.slo.as_ref().and_then(|s| s.agent.as_ref()) {
        // The per-agent SLO judges the sessions, known only once the jobs are filled.
        servebench_report::measure::agents::put_check(agent, record);
    }
    record.tool_calls = summary.tool_calls;
    // Judged once the jobs and the trace's cache are filled.
    record.agentx = servebench_report::measure::agentx::judge(exp, record, interrupted);
    let end = PointEnd {
        exp,
        fold: &fold,
        observed,
        routed: &summary.routed,
        rerouted: &summary.rerouted,
    };
    probes.fill(&end, record);
    if record.gpu.is_none()
        && let Some(cost) = &exp.cost
    {
        // No telemetry: the cost needs the GPU count from the spec.
        let windows = fold.system.measured_windows(exp.open_loop().is_some());
        servebench_report::measure::gpu::put_cost(
            cost.gpu_hour,
            cost.gpus,
            &windows,
            &mut record.metrics,
        );
    }
    // A part of the client died: what it sent is not the point's measurement.
    if record.has_flag(&FlagKind::ClientFailed) {
        record.incomplete = true;
        record.status = Some(servebench_model::results::records::PointStatus::Failed);
    }
}
