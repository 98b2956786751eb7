//! Builds the report model from a run's records: [`build_model`] from records in memory,
//! [`build_model_from`] from the points and the digest `requests.jsonl` was folded into. Each
//! section with a builder of its own (load, reproduction, server view, hardware) is called
//! from here; the charts' links come from the charts drawn from the finished model.

use indexmap::IndexMap;

use super::charts;
use super::digest::RequestDigest;
use super::format::value_text;
use super::metric_def::MetricDef;
use super::model::{
    ErrorSummary, MODEL_VERSION, NameValue, PointRow, PrefixCacheSection, PromptInfo, Provenance,
    ReportModel, ResultTable, RunInfo, ServerHost, ServerInfo, Setup, SweepDimension, Totals,
    UnfinishedPoint, Warning,
};
use servebench_model::catalog::{FlagKind, Method, Metric};
use servebench_model::results::meta::{RunMeta, RunStatus, ServerLaunch};
use servebench_model::results::records::{PointRecord, PointStatus, RequestRecord, Stat};
use servebench_model::spec::types::PromptSpec;

/// Builds the model from a run's stored records held in memory: [`build_model_from`] with
/// their [`RequestDigest`].
pub fn build_model(
    meta: &RunMeta,
    points: &[PointRecord],
    requests: &[RequestRecord],
) -> ReportModel {
    build_model_from(meta, points, &RequestDigest::of(requests))
}

/// Builds the model from a run's points and the digest of its requests (folded line by line
/// from `requests.jsonl`, so the model's memory does not grow with the requests).
pub(crate) fn build_model_from(
    meta: &RunMeta,
    points: &[PointRecord],
    requests: &RequestDigest,
) -> ReportModel {
    let exp = &meta.experiment;
    let (server_dimensions, point_dimensions): (Vec<String>, Vec<String>) = meta
        .dimensions
        .iter()
        .cloned()
        .partition(|d| is_server_dim(d));

    let tables = build_tables(points, requests, &server_dimensions, &point_dimensions);
    let totals = Totals {
        points: points.len(),
        ok: points.iter().map(|p| p.ok).sum(),
        errors: points.iter().map(|p| p.errors).sum(),
        requests_recorded: requests.recorded,
        prime_requests: requests.prime,
        warnings: tables.iter().map(|t| t.warnings.len()).sum(),
        points_ok: count_status(points, PointStatus::Ok),
        points_degraded: count_status(points, PointStatus::Degraded),
        points_failed: count_status(points, PointStatus::Failed),
    };

    let mut model = ReportModel {
        model_version: MODEL_VERSION,
        title: exp.name.clone(),
        description: exp.description.trim().to_string(),
        run: RunInfo {
            status: meta.status.to_string(),
            complete: meta.status == RunStatus::Complete,
            status_reason: meta.status_reason.clone(),
            started_at: meta.started_at.clone(),
            ended_at: meta.ended_at.clone(),
            duration_s: meta
                .ended_at
                .as_deref()
                .and_then(|end| seconds_between(&meta.started_at, end)),
        },
        setup: setup(meta, points, requests),
        imported: imported_setup(meta),
        servers: meta
            .servers
            .iter()
            .map(|s| server_info(s, points, &server_dimensions))
            .collect(),
        provenance: provenance(meta, points),
        sweep: sweep_dimensions(&meta.dimensions, points),
        dimensions: meta.dimensions.clone(),
        server_dimensions,
        point_dimensions,
        tables,
        unfinished_points: unfinished_points(points, requests),
        metric_defs: metric_defs(exp.method.resolve(), points),
        reproduction: super::reproduction::evaluate(meta, points, &[]),
        totals,
        data_notes: Vec::new(),
        charts: Vec::new(),
        prefix_cache: Vec::new(),
        trace: None,
        load: None,
        capacity: None,
        speculative: super::speculative::section(meta, points),
        server_view: super::server_view::rows(points, requests),
        timelines: Vec::new(),
        bound: None,
        gpu: None,
        profiles: Vec::new(),
        workers: None,
        validity: None,
        tool_calls: None,
    };
    fill_sections(&mut model, meta, points);
    model
}

/// What the run measured with: the engine, the workload, the cache policy and the method.
/// An imported run's setup as its tool's files recorded it: the resolved spec's settings
/// those files gave, and the tool's method (the rest of the spec only fills what a run
/// directory needs, and is not stated).
fn imported_setup(meta: &RunMeta) -> Option<super::model::ImportedSetup> {
    let i = meta.imported.as_ref()?;
    let mut settings = IndexMap::new();
    if let Ok(exp) = serde_json::to_value(&meta.experiment) {
        super::comparable::flatten("", &exp, &mut settings);
    }
    Some(super::model::ImportedSetup {
        tool: i.tool.clone(),
        version: i.version.clone(),
        files: i.files.clone(),
        recorded: settings
            .into_iter()
            .filter(|(k, _)| i.recorded.contains(k))
            .collect(),
        method: i
            .method
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        notes: i.notes.clone(),
    })
}

/// The file of a trace whose lines may send their blocks (`Setup::trace_blocks`).
fn trace_blocks(exp: &servebench_model::spec::types::Experiment) -> Option<String> {
    use servebench_model::spec::load_model::{HashIds, LoadSpec, TraceFormat};
    match exp.load.as_ref()? {
        LoadSpec::Trace { trace, .. }
            if matches!(trace.format, TraceFormat::Mooncake | TraceFormat::Bailian)
                && trace.hash_ids != HashIds::Ignore =>
        {
            Some(trace.file.display().to_string())
        }
        _ => None,
    }
}

fn setup(meta: &RunMeta, points: &[PointRecord], requests: &RequestDigest) -> Setup {
    let exp = &meta.experiment;
    let engine = engines_run(meta, &exp.server);
    let token_sources = requests.token_sources.clone();
    Setup {
        engine,
        model: exp.server.model.clone(),
        host: exp.host.label(),
        external_url: exp.server.url.clone(),
        api: exp.workload.api.to_string(),
        prompt: prompt_info(&exp.workload.prompt, points),
        captured: exp
            .load
            .as_ref()
            .and_then(|l| l.capture())
            .map(|t| t.file.display().to_string()),
        agent_sessions: exp.agentic().map(|a| a.file.display().to_string()),
        trace_blocks: trace_blocks(exp),
        output_tokens: exp.workload.output_tokens.nominal(),
        output_tokens_dist: exp
            .workload
            .output_tokens
            .fixed()
            .is_none()
            .then(|| exp.workload.output_tokens.describe()),
        ignore_eos: exp.workload.ignore_eos,
        temperature: exp.workload.temperature,
        cache_policy: exp.cache.policy.to_string(),
        cache_verify: exp.cache.verify,
        cache_reset: {
            let ways: Vec<String> = meta
                .servers
                .iter()
                .filter_map(|s| s.surface.as_ref()?.cache_reset.as_ref())
                .map(ToString::to_string)
                .collect();
            let probed = meta.servers.iter().filter(|s| s.surface.is_some()).count();
            (probed > 0 && ways.len() == probed && ways.iter().all(|w| w == &ways[0]))
                .then(|| ways[0].clone())
        },
        cache_reset_missing: meta
            .servers
            .iter()
            .any(|s| s.surface.as_ref().is_some_and(|x| x.cache_reset.is_none())),
        method: exp.method.name().to_string(),
        method_a: match exp.method.resolve() {
            servebench_model::spec::types::Measure::TwoPoint { a, .. } => Some(a),
            _ => None,
        },
        method_b: match exp.method.resolve() {
            servebench_model::spec::types::Measure::TwoPoint { b, .. } => Some(b),
            _ => None,
        },
        requests: exp.requests,
        concurrency: exp.concurrency,
        repeat: exp.repeat,
        request_timeout_s: exp.request_timeout.as_secs_f64(),
        token_sources,
        template: exp.report.template.clone(),
    }
}

/// Where and from what the run was made: the tool, the spec, the client and the hosts.
fn provenance(meta: &RunMeta, points: &[PointRecord]) -> Provenance {
    Provenance {
        tool_version: meta.tool_version.clone(),
        git_commit: meta.git.as_ref().map(|g| g.commit.clone()),
        git_dirty: meta.git.as_ref().map(|g| g.dirty),
        spec_file: meta.spec_file.clone(),
        spec_sha256: meta.spec_sha256.clone(),
        client_hostname: meta.client_host.hostname.clone(),
        client_os: meta.client_host.os.clone(),
        client_cpus: meta.client_host.cpus,
        client_placement: meta.client_placement.clone(),
        client_through_forward: meta.client_placement.as_deref() != Some("host")
            && meta.servers.iter().any(|s| s.through_forward),
        server_host: meta.server_host.as_ref().map(server_host),
        pool_hosts: super::hardware::pool_hosts(meta, points),
    }
}

/// The model's sections that each point's record fills (prefix cache, the bound, load,
/// traces, GPUs, profiler, workers, validity) and the charts' links, once its tables (whose
/// row labels the sections use) are made.
fn fill_sections(model: &mut ReportModel, meta: &RunMeta, points: &[PointRecord]) {
    let exp = &meta.experiment;
    model.prefix_cache = points
        .iter()
        .filter(|p| !p.prefix_cache.is_empty())
        .map(|p| PrefixCacheSection {
            point: p.id.clone(),
            label: model
                .tables
                .iter()
                .flat_map(|t| &t.rows)
                .find(|r| r.id == p.id)
                .map_or_else(|| p.id.clone(), |r| r.label.clone()),
            by: if p.prefix_cache[0].turn.is_some() {
                "turn".into()
            } else {
                "group".into()
            },
            rows: p.prefix_cache.clone(),
            per_worker: p.prefix_cache.iter().any(|r| r.workers.is_some()),
        })
        .collect();
    let labels: IndexMap<String, String> = model
        .tables
        .iter()
        .flat_map(|t| t.rows.iter().map(|r| (r.id.clone(), r.label.clone())))
        .collect();
    let variants: IndexMap<String, String> = model
        .tables
        .iter()
        .flat_map(|t| t.rows.iter().map(|r| (r.id.clone(), t.title.clone())))
        .collect();
    model.bound = super::bound_section::section(meta, points, &labels);
    model.load = super::load::section(points, &labels, &variants);
    model.trace = super::agentic::section(points, &labels);
    model.gpu = super::gpu::section(exp, points, &labels);
    model.profiles = super::profiles::rows(points, &labels);
    model.workers = super::workers::section(points, &labels);
    model.validity = super::validity::section(points, &labels);
    // Beside the other servers' rows, a point's label alone does not say whose it is.
    let server_labels: IndexMap<String, String> = if model.tables.len() > 1 {
        labels
            .iter()
            .map(|(id, label)| {
                let variant = variants.get(id).map_or("", String::as_str);
                (id.clone(), format!("{label}, {variant}"))
            })
            .collect()
    } else {
        labels.clone()
    };
    model.tool_calls = super::tool_calls::section(points, &server_labels);
    if let Some(load) = &mut model.load {
        // The links come from the same selection that draws the files.
        load.charts = super::load_charts::charts(load)
            .iter()
            .map(|c| c.link())
            .collect();
    }
    // The links come from the same selection that draws the files, so they always agree.
    model.charts = charts::charts(model).iter().map(|c| c.link()).collect();
}

fn is_server_dim(name: &str) -> bool {
    name.starts_with("server.")
}

fn dimension_values(p: &PointRecord, dims: &[String]) -> Vec<NameValue> {
    dims.iter()
        .map(|d| NameValue {
            name: d.clone(),
            value: p
                .values
                .get(d)
                .map(value_text)
                .unwrap_or_else(|| "—".to_string()),
        })
        .collect()
}

fn build_tables(
    points: &[PointRecord],
    requests: &RequestDigest,
    server_dims: &[String],
    point_dims: &[String],
) -> Vec<ResultTable> {
    let mut tables: Vec<ResultTable> = Vec::new();
    for p in points {
        let idx = match tables.iter().position(|t| t.group == p.group) {
            Some(i) => i,
            None => {
                let server_values = dimension_values(p, server_dims);
                let title = if server_values.is_empty() {
                    p.group.clone()
                } else {
                    server_values
                        .iter()
                        .map(|nv| format!("{}={}", nv.name, nv.value))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                tables.push(ResultTable {
                    group: p.group.clone(),
                    title,
                    server_values,
                    rows: Vec::new(),
                    warnings: Vec::new(),
                });
                tables.len() - 1
            }
        };
        let table = &mut tables[idx];
        let row = point_row(p, requests, point_dims, &mut table.warnings);
        table.rows.push(row);
    }
    tables
}

fn point_row(
    p: &PointRecord,
    requests: &RequestDigest,
    point_dims: &[String],
    warnings: &mut Vec<Warning>,
) -> PointRow {
    let values: Vec<String> = dimension_values(p, point_dims)
        .into_iter()
        .map(|nv| nv.value)
        .collect();
    let label = if point_dims.is_empty() {
        p.id.clone()
    } else {
        let dims: Vec<String> = point_dims
            .iter()
            .zip(&values)
            .map(|(d, v)| format!("{d}={v}"))
            .collect();
        format!("{} ({})", p.id, dims.join(", "))
    };

    // Every streaming metric has a row, measured or not (shown as `—`).
    let mut stats: IndexMap<String, Option<Stat>> = Metric::of_method(Method::Streaming)
        .map(|m| (m.name().to_string(), usable(p.metrics.get(m.name()))))
        .collect();
    // Queue delay only matters for load runs; show it when recorded. Unknown metrics follow.
    let queue = Metric::QueueDelay.name();
    if let Some(q) = usable(p.metrics.get(queue)) {
        stats.insert(queue.to_string(), Some(q));
    }
    for (name, stat) in &p.metrics {
        if !stats.contains_key(name) {
            stats.insert(name.clone(), usable(Some(stat)));
        }
    }

    let error_summary = error_summary(p, requests);

    // Flags from the record, plus warnings the record implies but did not flag itself.
    let mut point_warnings: Vec<(FlagKind, String)> = p
        .flags
        .iter()
        .map(|f| (f.kind.clone(), f.message.clone()))
        .collect();
    let has = |kind: &FlagKind, ws: &[(FlagKind, String)]| ws.iter().any(|(k, _)| k == kind);
    if p.errors > 0 && !has(&FlagKind::Errors, &point_warnings) {
        let kinds: Vec<String> = error_summary
            .iter()
            .map(|e| format!("{} ×{}", e.kind, e.count))
            .collect();
        let total = p.ok + p.errors;
        let mut msg = format!("{} of {} requests failed", p.errors, total);
        if !kinds.is_empty() {
            msg.push_str(&format!(" ({})", kinds.join(", ")));
        }
        msg.push_str("; the statistics cover the successful ones only.");
        point_warnings.push((FlagKind::Errors, msg));
    }
    if p.incomplete && !has(&FlagKind::Incomplete, &point_warnings) {
        point_warnings.push((
            FlagKind::Incomplete,
            "The point did not run to completion; its statistics cover fewer requests than \
             planned."
                .to_string(),
        ));
    }

    let mut marks: IndexMap<String, Vec<usize>> =
        ["prompt_tok", "cached", "ttft", "decode", "itl", "ok_err"]
            .iter()
            .map(|c| (c.to_string(), Vec::new()))
            .collect();
    for (kind, message) in &point_warnings {
        let n = warnings.len() + 1;
        let cell = kind.cell();
        marks.entry(cell.to_string()).or_default().push(n);
        warnings.push(Warning {
            n,
            point: p.id.clone(),
            label: label.clone(),
            kind: kind.to_string(),
            message: message.clone(),
            cell: cell.to_string(),
        });
    }
    let marks = marks
        .into_iter()
        .map(|(cell, ns)| {
            let text = if ns.is_empty() {
                String::new()
            } else {
                let ns: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
                format!(" ⚠{}", ns.join(","))
            };
            (cell, text)
        })
        .collect();

    PointRow {
        id: p.id.clone(),
        group: p.group.clone(),
        label,
        values,
        ctx_req: p.requested_prompt_tokens,
        ok: p.ok,
        errors: p.errors,
        incomplete: p.incomplete,
        status: p.status().to_string(),
        failure: p.failure.clone(),
        stats,
        marks,
        itl_per_chunk: p.has_flag(&FlagKind::ItlPerChunk),
        warning_count: point_warnings.len(),
        doubted: point_warnings.iter().any(|(k, _)| !k.is_informational()),
        error_summary,
        duration_s: p.wall.map(|w| w.ended_at - w.started_at),
    }
}

/// The definitions the report states, for the method that produced the numbers (a thinking
/// model's too, when some point's requests thought; the tool-calling ones, when some point's
/// requests were sent tools).
fn metric_defs(
    method: servebench_model::spec::types::Measure,
    points: &[PointRecord],
) -> IndexMap<String, MetricDef> {
    let thought = points
        .iter()
        .any(|p| p.metrics.contains_key(Metric::Ttfa.name()));
    let tools = points.iter().any(|p| p.tool_calls.is_some());
    let (method, a, b) = match method {
        servebench_model::spec::types::Measure::TwoPoint { a, b } => (Method::TwoPoint, a, b),
        servebench_model::spec::types::Measure::Streaming => (Method::Streaming, 0, 0),
    };
    // A metric only some points carry (older runs lack the interactivity) is defined
    // where one does.
    let carried = |m: &Metric| points.iter().any(|p| p.metrics.contains_key(m.name()));
    Metric::shown_for(method)
        .filter(|m| {
            !matches!(
                m,
                Metric::E2eInteractivityP90 | Metric::E2eInteractivityP75 | Metric::AgentsSloShare
            ) || carried(m)
        })
        .chain(Metric::of_reasoning().filter(|_| thought))
        .chain(Metric::of_tools().filter(|_| tools))
        .map(|m| (m.name().to_string(), MetricDef::of(m, method, a, b)))
        .collect()
}

/// A stat with no samples is "not measured", not a row of zeros.
fn usable(stat: Option<&Stat>) -> Option<Stat> {
    stat.filter(|s| s.count > 0).cloned()
}

fn error_summary(p: &PointRecord, requests: &RequestDigest) -> Vec<ErrorSummary> {
    let failed = requests
        .point(&p.id)
        .map(|d| &d.error_kinds)
        .filter(|kinds| !kinds.is_empty());
    // The point's own counts are authoritative; requests.jsonl supplies the sample messages.
    let kinds: IndexMap<String, usize> = if p.error_kinds.is_empty() {
        failed
            .into_iter()
            .flatten()
            .map(|(kind, first)| (kind.clone(), first.count))
            .collect()
    } else {
        p.error_kinds.clone()
    };
    kinds
        .into_iter()
        .map(|(kind, count)| {
            let sample = failed.and_then(|f| f.get(&kind));
            ErrorSummary {
                kind,
                count,
                sample: sample.map(|e| e.message.clone()),
                status: sample.and_then(|e| e.status),
            }
        })
        .collect()
}

/// Points with measured requests but no line in `points.jsonl`, in the order of their first
/// measured request.
fn unfinished_points(points: &[PointRecord], requests: &RequestDigest) -> Vec<UnfinishedPoint> {
    let finished: std::collections::HashSet<&str> = points.iter().map(|p| p.id.as_str()).collect();
    requests
        .points
        .iter()
        .filter(|(id, _)| !finished.contains(id.as_str()))
        .map(|(id, d)| UnfinishedPoint {
            id: id.clone(),
            requests: d.measured,
            errors: d.errors,
        })
        .collect()
}

fn sweep_dimensions(dims: &[String], points: &[PointRecord]) -> Vec<SweepDimension> {
    dims.iter()
        .map(|d| {
            let mut values: Vec<String> = Vec::new();
            for p in points {
                if let Some(v) = p.values.get(d) {
                    let v = value_text(v);
                    if !values.contains(&v) {
                        values.push(v);
                    }
                }
            }
            SweepDimension {
                name: d.clone(),
                server: is_server_dim(d),
                values,
            }
        })
        .collect()
}

/// The engines that served the run, each with the version it reported (`sglang (simulated)
/// 0.5.2, vllm 0.33.0`), in launch order; the spec's engine when nothing was launched yet.
fn engines_run(meta: &RunMeta, server: &servebench_model::spec::types::Server) -> String {
    let mut seen: Vec<String> = Vec::new();
    for s in &meta.servers {
        let version = s
            .server_info
            .as_ref()
            .and_then(|i| i.get("version"))
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .or_else(|| s.surface.as_ref().and_then(|x| x.version.clone()));
        let name = match version {
            Some(v) => format!("{} {v}", s.engine),
            None => s.engine.clone(),
        };
        if !seen.contains(&name) {
            seen.push(name);
        }
    }
    if seen.is_empty() {
        return if server.url.is_some() {
            "external".to_string()
        } else {
            server.engine.to_string()
        };
    }
    seen.join(", ")
}

/// A launch command as the report shows it: the program by its name, not the absolute path
/// it ran from on this machine (`servebench sim ...`, not `/home/me/.../target/debug/servebench
/// sim ...`), so a report says what ran without the runner's directory layout.
fn shown_command(argv: &[String]) -> String {
    let mut argv = argv.to_vec();
    if let Some(program) = argv.first_mut()
        && program.starts_with('/')
        && let Some(name) = std::path::Path::new(program.as_str())
            .file_name()
            .and_then(|n| n.to_str())
    {
        *program = name.to_string();
    }
    servebench_model::text::shell_join(&argv)
}

fn server_info(s: &ServerLaunch, points: &[PointRecord], server_dims: &[String]) -> ServerInfo {
    let dimension_values = points
        .iter()
        .find(|p| p.group == s.group)
        .map(|p| dimension_values(p, server_dims))
        .unwrap_or_default();
    ServerInfo {
        group: s.group.clone(),
        engine: s.engine.clone(),
        url: s.url.clone(),
        command: s.command.as_ref().map(|argv| shown_command(argv)),
        args: s
            .args
            .iter()
            // As the engine's command line spells it: `--name`, or a short flag verbatim.
            .map(|(k, v)| NameValue {
                name: if k.starts_with('-') {
                    k.clone()
                } else {
                    format!("--{k}")
                },
                value: value_text(v),
            })
            .collect(),
        env: s
            .env
            .iter()
            .map(|(k, v)| NameValue {
                name: k.clone(),
                value: v.clone(),
            })
            .collect(),
        server_version: s
            .server_info
            .as_ref()
            .and_then(|i| i.get("version"))
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .or_else(|| s.surface.as_ref().and_then(|x| x.version.clone())),
        identity: s
            .surface
            .as_ref()
            .map(|x| x.identity.clone())
            .unwrap_or_default(),
        cache_reset: s
            .surface
            .as_ref()
            .and_then(|x| x.cache_reset.as_ref())
            .map(ToString::to_string),
        tokenize: s
            .surface
            .as_ref()
            .and_then(|x| x.tokenize.as_ref())
            .map(|t| match t {
                servebench_model::results::meta::Tokenize::V1Prompt => "/v1/tokenize".to_string(),
                _ => "/tokenize".to_string(),
            }),
        metrics: s.surface.as_ref().is_some_and(|x| x.metrics),
        notes: s
            .notes
            .iter()
            .chain(s.surface.iter().flat_map(|x| x.notes.iter()))
            .cloned()
            .collect(),
        ready_after_s: s.ready_after_s,
        outcome: s.outcome.clone(),
        log_file: s.log_file.clone(),
        dimension_values,
        slurm: s.slurm.as_ref().map(slurm_words),
    }
}

/// A Slurm job's accounting as one sentence for the report.
fn slurm_words(j: &servebench_model::results::meta::SlurmJob) -> String {
    let mut parts = vec![format!("Slurm job {} (`{}`)", j.job_id, j.job_name)];
    if let Some(n) = &j.node_list {
        parts.push(format!("on {n}"));
    }
    if let Some(p) = &j.partition {
        parts.push(format!("partition {p}"));
    }
    if let Some(st) = &j.step {
        parts.push(format!("step {st}"));
    }
    if let Some(q) = j.queued_s {
        parts.push(format!(
            "{} in the queue",
            servebench_model::text::duration(q)
        ));
    }
    let mut text = parts.join(", ");
    if let Some(state) = &j.state {
        text.push_str(&format!("; state {state}"));
        if let Some(r) = &j.reason {
            text.push_str(&format!(" ({r})"));
        }
        if let Some(c) = &j.exit_code {
            text.push_str(&format!(", exit {c}"));
        }
        if let Some(a) = &j.accounting {
            text.push_str(&format!(" (from {a})"));
        }
    }
    text
}

fn prompt_info(prompt: &PromptSpec, points: &[PointRecord]) -> PromptInfo {
    let mut requested: Vec<u64> = points
        .iter()
        .filter_map(|p| p.requested_prompt_tokens)
        .collect();
    requested.dedup();
    let varies = {
        let first = requested.first();
        requested.iter().any(|r| Some(r) != first)
    };
    let target = |spec_tokens: u64| {
        if varies {
            None
        } else {
            Some(requested.first().copied().unwrap_or(spec_tokens))
        }
    };
    match prompt {
        PromptSpec::Repeat {
            text,
            tokens,
            calibrate,
        } => PromptInfo {
            kind: "repeat".to_string(),
            target_tokens: target(*tokens),
            varies,
            calibrate: Some(*calibrate),
            text: Some(text.clone()),
            seed: None,
            path: None,
            lengths: None,
        },
        PromptSpec::Random {
            tokens,
            seed,
            calibrate,
        } => PromptInfo {
            kind: "random".to_string(),
            target_tokens: target(tokens.nominal()),
            varies: varies || tokens.fixed().is_none(),
            calibrate: Some(*calibrate),
            text: None,
            seed: Some(*seed),
            path: None,
            lengths: tokens.fixed().is_none().then(|| tokens.describe()),
        },
        PromptSpec::Dataset { format, file } => PromptInfo {
            kind: format!("dataset ({format})"),
            target_tokens: None,
            varies: true,
            calibrate: None,
            text: None,
            seed: None,
            path: Some(file.display().to_string()),
            lengths: None,
        },
        PromptSpec::SharedPrefix {
            groups,
            prefix_tokens,
            suffix_tokens,
            seed,
        } => PromptInfo {
            kind: "shared-prefix".to_string(),
            target_tokens: Some(prefix_tokens + suffix_tokens),
            varies: false,
            calibrate: Some(true),
            text: None,
            seed: Some(*seed),
            path: None,
            lengths: Some(format!(
                "{groups} groups x {prefix_tokens} prefix tokens + {suffix_tokens} unique tokens"
            )),
        },
        PromptSpec::File { path } => PromptInfo {
            kind: "file".to_string(),
            target_tokens: None,
            varies: false,
            calibrate: None,
            text: None,
            seed: None,
            path: Some(path.display().to_string()),
            lengths: None,
        },
    }
}

fn seconds_between(start: &str, end: &str) -> Option<f64> {
    let start = chrono::DateTime::parse_from_rfc3339(start).ok()?;
    let end = chrono::DateTime::parse_from_rfc3339(end).ok()?;
    let ms = (end - start).num_milliseconds();
    (ms >= 0).then(|| ms as f64 / 1000.0)
}

fn count_status(points: &[PointRecord], status: PointStatus) -> usize {
    points.iter().filter(|p| p.status() == status).count()
}

fn server_host(v: &serde_json::Value) -> ServerHost {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
    let cpu = match (s("cpu_model"), v.get("cpu_count").and_then(|c| c.as_u64())) {
        (Some(m), Some(n)) => Some(format!("{m} ({n} CPUs)")),
        (m, n) => m.or(n.map(|n| format!("{n} CPUs"))),
    };
    let gpus = v
        .get("gpus")
        .and_then(|g| g.as_array())
        .map(|list| {
            list.iter()
                .map(|g| {
                    let f = |k: &str| {
                        g.get(k)
                            .map(|x| x.to_string().trim_matches('"').to_string())
                            .unwrap_or_default()
                    };
                    let power = g
                        .get("power_limit_w")
                        .and_then(|w| w.as_f64())
                        .map(|w| format!(", {} W power limit", servebench_model::text::sig3(w)))
                        .unwrap_or_default();
                    format!(
                        "{}, driver {}, {} MiB{power}",
                        f("name"),
                        f("driver_version"),
                        f("memory_total_mib")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    ServerHost {
        hostname: s("hostname"),
        os: s("os"),
        cpu,
        gpus,
        sglang_version: s("sglang_version"),
    }
}
