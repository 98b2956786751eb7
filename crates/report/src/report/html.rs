//! Self-contained HTML pages: `report.html` beside every `report.md`, and `history.html`.
//! Everything is inline (the Markdown's content as HTML with its SVG charts embedded, the
//! style, the script, the data), so a page opens from a checkout or an attachment with no
//! network. On top of the Markdown's content a page has charts with hover values and
//! toggled series, each point's details, and (for a run) a per-request timeline: scheduled,
//! sent, first token, each chunk and the end, with the router's worker where recorded.

use std::fmt::Write;
use std::path::Path;

use serde_json::json;

use servebench_model::catalog::Metric;
use servebench_model::results::records::{PointRecord, RequestRecord};
use servebench_model::results::rundir::RunDir;

/// The run's page, beside `report.md`.
pub(crate) const REPORT_HTML: &str = "report.html";

const SCRIPT: &str = include_str!("../../templates/page.js");
const STYLE: &str = include_str!("../../templates/page.css");

/// Requests the timeline shows per point, and in all (a page stays small enough to open).
const TIMELINE_PER_POINT: usize = 400;
const TIMELINE_TOTAL: usize = 8_000;
/// Chunk times kept per request in the timeline.
const TIMELINE_CHUNKS: usize = 256;
/// Bytes of one inlined chart.
const SVG_BUDGET: u64 = 4 << 20;

/// Escapes text for HTML.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// A whole page: `title`, the content (HTML: the title, status, verdicts and summary a
/// reviewer reads first), then the interactive part (its data: `charts`, `timeline`), then
/// extra HTML (point details).
pub(crate) fn page(title: &str, content: &str, data: &serde_json::Value, extra: &str) -> String {
    // No `<` in the data at all (JSON has none outside strings, where `\u003c` is the same
    // character): neither `</script>` nor `<!--` (which would make a later `</script>`
    // part of the data) can end or confuse the script element; `>` and `&` likewise.
    let data = serde_json::to_string(data)
        .unwrap_or_else(|_| "{}".into())
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let has_timeline = data.contains("\"timeline\":[{");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{title}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n<section id=\"sb-content\">\n{content}</section>\n<section id=\"sb-interactive\">\n<h2>Interactive charts</h2>\n<p class=\"sb-hint\">Hover a point for its values; click a legend entry to hide or show its line.</p>\n<div id=\"sb-charts\"></div>\n{timeline}</section>\n{extra}<p id=\"sb-ready\" class=\"sb-hint\">charts not drawn (the page's script did not run)</p>\n</main>\n<script type=\"application/json\" id=\"sb-data\">{data}</script>\n<script>\n{SCRIPT}</script>\n</body>\n</html>\n",
        title = escape(title),
        timeline = if has_timeline {
            "<h2>Per-request timeline</h2>\n<p class=\"sb-hint\">One row per request, time from the point's first scheduled request: grey, queued in the client (scheduled to sent); orange, waiting for the first token; blue, the stream, a tick per chunk; red, a gap between chunks over four times the median (a stall) or a failed request. Hover a row for its times, worker and error.</p>\n<div id=\"sb-timeline\"></div>\n"
        } else {
            ""
        },
    )
}

/// Markdown (as servebench's templates write it) to HTML: headings, paragraphs, tables,
/// lists, quotes, code, emphasis, links; an image whose file `inline` can read is embedded
/// as its SVG, any other is left as its text (a page never loads anything).
pub(crate) fn markdown_to_html(md: &str, inline: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    let mut paragraph: Vec<&str> = Vec::new();
    let flush = |out: &mut String, p: &mut Vec<&str>| {
        if !p.is_empty() {
            let _ = writeln!(out, "<p>{}</p>", inline_md(&p.join(" "), inline));
            p.clear();
        }
    };
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        if t.starts_with("```") {
            flush(&mut out, &mut paragraph);
            let mut code = String::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                code.push_str(&escape(lines[i]));
                code.push('\n');
                i += 1;
            }
            let _ = writeln!(out, "<pre><code>{code}</code></pre>");
            i += 1;
            continue;
        }
        if t.is_empty() {
            flush(&mut out, &mut paragraph);
            i += 1;
            continue;
        }
        if let Some(level) = heading_level(t) {
            flush(&mut out, &mut paragraph);
            let text = t[level..].trim();
            let _ = writeln!(out, "<h{level}>{}</h{level}>", inline_md(text, inline));
            i += 1;
            continue;
        }
        if t.starts_with('|') {
            flush(&mut out, &mut paragraph);
            let mut rows: Vec<&str> = Vec::new();
            while i < lines.len() && lines[i].trim_start().starts_with('|') {
                rows.push(lines[i].trim());
                i += 1;
            }
            out.push_str(&table(&rows, inline));
            continue;
        }
        if t.starts_with("> ") || t == ">" {
            flush(&mut out, &mut paragraph);
            let mut quoted: Vec<&str> = Vec::new();
            while i < lines.len() && lines[i].trim_start().starts_with('>') {
                quoted.push(lines[i].trim_start()[1..].trim_start());
                i += 1;
            }
            let inner = quoted.join("\n");
            let inner = inner
                .replace("[!WARNING]", "**Warning**")
                .replace("[!CAUTION]", "**Caution**")
                .replace("[!NOTE]", "**Note**")
                .replace("[!IMPORTANT]", "**Important**")
                .replace("[!TIP]", "**Tip**");
            let _ = writeln!(
                out,
                "<blockquote>{}</blockquote>",
                markdown_to_html(&inner, inline)
            );
            continue;
        }
        if t.starts_with("- ") || t.starts_with("* ") {
            flush(&mut out, &mut paragraph);
            out.push_str("<ul>\n");
            while i < lines.len() {
                let l = lines[i].trim_start();
                if l.starts_with("- ") || l.starts_with("* ") {
                    let _ = writeln!(out, "<li>{}</li>", inline_md(&l[2..], inline));
                } else if !l.is_empty() && lines[i].starts_with("  ") {
                    // A continuation line of the item before.
                    let _ = writeln!(out, "{}", inline_md(l, inline));
                } else {
                    break;
                }
                i += 1;
            }
            out.push_str("</ul>\n");
            continue;
        }
        paragraph.push(t);
        i += 1;
    }
    flush(&mut out, &mut paragraph);
    out
}

fn heading_level(t: &str) -> Option<usize> {
    let n = t.chars().take_while(|c| *c == '#').count();
    ((1..=6).contains(&n) && t[n..].starts_with(' ')).then_some(n)
}

/// The cells of a table row, `\|` kept inside a cell.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cur.push('|');
                chars.next();
            }
            '|' => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

fn table(rows: &[&str], inline: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::from("<div class=\"sb-table\"><table>\n");
    let is_rule = |r: &str| {
        cells(r)
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|x| "-:".contains(x)))
    };
    let header = rows.len() >= 2 && is_rule(rows[1]);
    for (n, row) in rows.iter().enumerate() {
        if header && n == 1 {
            continue;
        }
        let tag = if header && n == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for c in cells(row) {
            let _ = write!(out, "<{tag}>{}</{tag}>", inline_md(&c, inline));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table></div>\n");
    out
}

/// Inline Markdown: `code`, **bold**, images, links; everything else escaped.
fn inline_md(text: &str, inline: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('`')
            && let Some(end) = r.find('`')
        {
            let _ = write!(out, "<code>{}</code>", escape(&r[..end]));
            rest = &r[end + 1..];
            continue;
        }
        if let Some(r) = rest.strip_prefix("**")
            && let Some(end) = r.find("**")
        {
            let _ = write!(out, "<strong>{}</strong>", inline_md(&r[..end], inline));
            rest = &r[end + 2..];
            continue;
        }
        let image = rest.starts_with("![");
        if (image || rest.starts_with('['))
            && let Some((label, target, len)) = link(&rest[usize::from(image)..])
        {
            if image {
                match inline(target) {
                    Some(svg) => {
                        let _ = write!(out, "<figure class=\"sb-figure\">{svg}</figure>");
                    }
                    None => {
                        let _ = write!(out, "<em>[{}]</em>", escape(label));
                    }
                }
            } else if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with('#')
            {
                let _ = write!(
                    out,
                    "<a href=\"{}\">{}</a>",
                    escape(target),
                    inline_md(label, inline)
                );
            } else {
                // A file beside the report: named, not linked (the page stands alone).
                let _ = write!(
                    out,
                    "{} (<code>{}</code>)",
                    inline_md(label, inline),
                    escape(target)
                );
            }
            rest = &rest[usize::from(image) + len..];
            continue;
        }
        let c = rest.chars().next().expect("not empty");
        out.push_str(&escape(&c.to_string()));
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `[label](target)` at the start of `s`: the label, the target and the bytes taken.
fn link(s: &str) -> Option<(&str, &str, usize)> {
    let s2 = s.strip_prefix('[')?;
    let close = s2.find("](")?;
    let label = &s2[..close];
    let after = &s2[close + 2..];
    let end = after.find(')')?;
    Some((label, &after[..end], 1 + close + 2 + end + 1))
}

/// Reads an SVG chart from `dir/path` for inlining (None when it is not an SVG file there,
/// is over its budget, or the path leaves `dir`).
pub(crate) fn read_svg(dir: &Path, path: &str) -> Option<String> {
    if !path.ends_with(".svg") || path.contains("..") || path.starts_with('/') {
        return None;
    }
    let file = dir.join(path);
    if std::fs::metadata(&file).ok()?.len() > SVG_BUDGET {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    // The XML declaration cannot stand inside HTML.
    let start = text.find("<svg")?;
    Some(text[start..].to_string())
}

/// A headline metric against the context length (or the sweep values), one line per server
/// group named by its swept server settings, from the points.
fn point_charts(points: &[PointRecord]) -> Vec<serde_json::Value> {
    let mut groups: Vec<&str> = Vec::new();
    for p in points {
        if !groups.contains(&p.group.as_str()) {
            groups.push(&p.group);
        }
    }
    let contexts: Vec<u64> = points
        .iter()
        .filter_map(|p| p.requested_prompt_tokens)
        .collect();
    let spread = contexts.iter().max() > contexts.iter().min();
    // In the spec's own terms: the x axis by the sweep values that are not the server's, a
    // line per server by its swept settings (`server.args.tp=8`), its group's id only when
    // the server was not swept.
    let part = |p: &PointRecord, server: bool| {
        let kept: indexmap::IndexMap<String, serde_json::Value> = p
            .values
            .iter()
            .filter(|(k, _)| k.starts_with("server.") == server)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        super::format::values_text(&kept)
    };
    let mut x_keys: Vec<String> = Vec::new();
    for p in points {
        let key = part(p, false);
        if !x_keys.contains(&key) {
            x_keys.push(key);
        }
    }
    let line_name = |g: &str| {
        points
            .iter()
            .find(|p| p.group == g)
            .map(|p| part(p, true))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| g.to_string())
    };
    Metric::headline()
        .filter_map(|m| {
            let name = m.name();
            let series: Vec<serde_json::Value> = groups
                .iter()
                .filter_map(|g| {
                    let pts: Vec<serde_json::Value> = points
                        .iter()
                        .filter(|p| p.group == *g)
                        .filter_map(|p| {
                            let s = p.metrics.get(name).filter(|s| s.count > 0)?;
                            let x = if spread {
                                p.requested_prompt_tokens? as f64
                            } else {
                                let key = part(p, false);
                                (x_keys.iter().position(|k| *k == key)? + 1) as f64
                            };
                            let label = super::format::values_text(&p.values);
                            Some(json!({
                                "x": x,
                                "y": m.shown(s.mean),
                                "lo": s.ci95_low.map(|v| m.shown(v)),
                                "hi": s.ci95_high.map(|v| m.shown(v)),
                                "label": format!("{} {label}", p.id),
                                "flagged": p.flags.iter().any(|f| !f.kind.is_informational()) || p.ok == 0,
                            }))
                        })
                        .collect();
                    (!pts.is_empty()).then(|| json!({ "name": line_name(g), "points": pts }))
                })
                .collect();
            if series.is_empty() {
                return None;
            }
            let ticks: Vec<serde_json::Value> = if spread {
                let mut cs = contexts.clone();
                cs.sort_unstable();
                cs.dedup();
                cs.iter()
                    .map(|c| json!({"x": *c as f64, "label": servebench_model::text::tokens(*c as f64)}))
                    .collect()
            } else {
                x_keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| {
                        let label = if k.is_empty() { "all" } else { k.as_str() };
                        json!({"x": (i + 1) as f64, "label": label})
                    })
                    .collect()
            };
            Some(json!({
                "title": format!("{} by point", m.long_label()),
                "x_label": x_label(points, spread),
                "x_log": spread,
                "x_ticks": ticks,
                "y_label": format!("{} ({})", m.label(), m.unit()),
                "series": series,
            }))
        })
        .collect()
}

/// The x axis of the point charts: the context, or the swept keys that are not the server's.
fn x_label(points: &[PointRecord], spread: bool) -> String {
    if spread {
        return "context (prompt tokens, log scale)".to_string();
    }
    let dims: Vec<&str> = points
        .iter()
        .flat_map(|p| p.values.keys())
        .filter(|k| !k.starts_with("server."))
        .map(String::as_str)
        .fold(Vec::new(), |mut v, k| {
            if !v.contains(&k) {
                v.push(k);
            }
            v
        });
    if dims.is_empty() {
        "point".to_string()
    } else {
        dims.join(", ")
    }
}

/// Each point's details: its values, counts, flags and every metric's statistics.
fn point_details(points: &[PointRecord]) -> String {
    let mut out = String::from("<section id=\"sb-points\">\n<h2>Point details</h2>\n");
    for p in points {
        let values = super::format::values_text(&p.values);
        let _ = writeln!(
            out,
            "<details><summary><b>{}</b> {} · group {} · {} ok, {} failed{}</summary>",
            escape(&p.id),
            escape(&values),
            escape(&p.group),
            p.ok,
            p.errors,
            if p.flags.is_empty() {
                String::new()
            } else {
                format!(" · {} flag(s)", p.flags.len())
            }
        );
        for f in &p.flags {
            let _ = writeln!(
                out,
                "<p class=\"sb-flag\">⚠ {}: {}</p>",
                escape(f.kind.name()),
                escape(&f.message)
            );
        }
        out.push_str("<div class=\"sb-table\"><table><tr><th>metric</th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>min</th><th>max</th><th>95% CI</th></tr>\n");
        for (name, s) in &p.metrics {
            let m = Metric::from_name(name);
            let v = |x: f64| escape(&servebench_model::text::metric_value(m, x));
            let ci = match (s.ci95_low, s.ci95_high) {
                (Some(l), Some(h)) => format!("[{}, {}]", v(l), v(h)),
                _ => "—".to_string(),
            };
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{ci}</td></tr>",
                escape(m.map_or(name.as_str(), |m| m.label())),
                s.count,
                v(s.mean),
                v(s.p50),
                v(s.p90),
                v(s.p99),
                v(s.min),
                v(s.max),
            );
        }
        out.push_str("</table></div></details>\n");
    }
    out.push_str("</section>\n");
    out
}

/// Requests of a run whose spans the density view keeps (32 bytes each): every request of
/// any run up to this many.
const DENSITY_REQUESTS: usize = 1_000_000;
/// Time slots of a point's density view.
const DENSITY_SLOTS: usize = 200;

/// Collects each point's requests for the timeline, within the budgets, and every request's
/// span (scheduled, sent, first token, end; NaN when absent) for the density view.
#[derive(Default)]
struct TimelineFold {
    points: indexmap::IndexMap<String, (Vec<serde_json::Value>, usize)>,
    total: usize,
    spans: indexmap::IndexMap<String, Vec<[f64; 4]>>,
    spans_total: usize,
}

/// How many requests were queued, waiting for their first token and streaming, on average
/// over each of [`DENSITY_SLOTS`] slots of the point's whole span: a view of every request,
/// where the rows show the first few hundred.
fn density(spans: &[[f64; 4]]) -> Option<serde_json::Value> {
    let start = |s: &[f64; 4]| {
        if s[0].is_finite() {
            s[0].min(s[1])
        } else {
            s[1]
        }
    };
    let stop = |s: &[f64; 4]| {
        [s[3], s[2], s[1]]
            .into_iter()
            .find(|t| t.is_finite())
            .unwrap_or(s[1])
    };
    let t0 = spans.iter().map(start).fold(f64::INFINITY, f64::min);
    let t1 = spans.iter().map(stop).fold(f64::NEG_INFINITY, f64::max);
    if !(t0.is_finite() && t1.is_finite() && t1 > t0) {
        return None;
    }
    let n = DENSITY_SLOTS;
    let w = (t1 - t0) / n as f64;
    let mut phases = [vec![0.0f64; n], vec![0.0f64; n], vec![0.0f64; n]];
    for s in spans {
        let first = if s[2].is_finite() { s[2] } else { stop(s) };
        let intervals = [(s[0], s[1]), (s[1], first), (s[2], s[3])];
        for (phase, (a, b)) in intervals.into_iter().enumerate() {
            if !(a.is_finite() && b.is_finite() && b > a) {
                continue;
            }
            let fa = ((a - t0) / w).clamp(0.0, n as f64);
            let fb = ((b - t0) / w).clamp(0.0, n as f64);
            let (ia, ib) = ((fa as usize).min(n - 1), (fb as usize).min(n - 1));
            let slots = &mut phases[phase];
            if ia == ib {
                slots[ia] += fb - fa;
            } else {
                slots[ia] += (ia + 1) as f64 - fa;
                slots[ib] += fb - ib as f64;
                for slot in &mut slots[ia + 1..ib] {
                    *slot += 1.0;
                }
            }
        }
    }
    let round =
        |v: &Vec<f64>| -> Vec<f64> { v.iter().map(|x| (x * 1000.0).round() / 1000.0).collect() };
    Some(json!({
        "t0": t0,
        "t1": t1,
        "requests": spans.len(),
        "queued": round(&phases[0]),
        "waiting": round(&phases[1]),
        "streaming": round(&phases[2]),
    }))
}

impl TimelineFold {
    fn add(&mut self, r: &RequestRecord) {
        use servebench_model::results::records::RequestRole;
        if r.role != RequestRole::Measure {
            return;
        }
        if self.spans_total < DENSITY_REQUESTS {
            self.spans_total += 1;
            let first = r
                .chunks
                .iter()
                .find(|c| c.tokens > 0)
                .map(|c| r.sent_at + c.t_s);
            self.spans.entry(r.point.clone()).or_default().push([
                r.scheduled_at.unwrap_or(f64::NAN),
                r.sent_at,
                first.unwrap_or(f64::NAN),
                r.end_s.map_or(f64::NAN, |e| r.sent_at + e),
            ]);
        }
        let entry = self.points.entry(r.point.clone()).or_default();
        entry.1 += 1;
        if entry.0.len() >= TIMELINE_PER_POINT || self.total >= TIMELINE_TOTAL {
            return;
        }
        self.total += 1;
        let first = r
            .chunks
            .iter()
            .find(|c| c.tokens > 0)
            .map(|c| r.sent_at + c.t_s);
        let chunks: Vec<f64> = r
            .chunks
            .iter()
            .take(TIMELINE_CHUNKS)
            .map(|c| r.sent_at + c.t_s)
            .collect();
        entry.0.push(json!({
            "i": r.index,
            "round": r.round,
            "scheduled": r.scheduled_at,
            "sent": r.sent_at,
            "first": first,
            "end": r.end_s.map(|e| r.sent_at + e),
            "chunks": chunks,
            "chunks_cut": (r.chunks.len() > TIMELINE_CHUNKS).then_some(r.chunks.len()),
            "worker": r.worker,
            "prefill_worker": r.prefill_worker,
            "error": r.error.as_ref().map(|e| e.message.clone()),
        }));
    }
}

/// `report.html`: the report's Markdown as HTML with its charts inlined (read from the run
/// directory), the interactive charts, the point details and the per-request timeline
/// (requests read line by line, within the timeline's budgets).
pub(crate) fn report_page(
    dir: &RunDir,
    title: &str,
    markdown: &str,
    points: &[PointRecord],
) -> Result<String, servebench_model::results::rundir::RunDirError> {
    let mut fold = TimelineFold::default();
    dir.visit_requests(|r: RequestRecord| fold.add(&r))?;
    let mut spans = fold.spans;
    let timeline: Vec<serde_json::Value> = fold
        .points
        .into_iter()
        .map(|(id, (requests, seen))| {
            let density = spans.shift_remove(&id).and_then(|s| density(&s));
            let label = points
                .iter()
                .find(|p| p.id == id)
                .map(|p| {
                    let v = super::format::values_text(&p.values);
                    format!("{id} {v}")
                })
                .unwrap_or(id);
            json!({
                "label": label,
                "cut": (seen > requests.len()).then_some(seen),
                "requests": requests,
                "density": density,
            })
        })
        .collect();
    let content = markdown_to_html(markdown, &|p| read_svg(&dir.path, p));
    let data = json!({ "charts": point_charts(points), "timeline": timeline });
    Ok(page(title, &content, &data, &point_details(points)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_escaped_html_with_tables_lists_and_inlined_charts() {
        let md = "# Title <x>\n\nSome **bold** and `code|x`.\n\n| a | b \\| c |\n|---|---:|\n| 1 | 2 |\n\n- one\n- [two](https://example.com)\n\n> [!WARNING]\n> careful\n\n![chart](charts/a.svg)\n![other](charts/b.svg)\n";
        let html = markdown_to_html(md, &|p| {
            (p == "charts/a.svg").then(|| "<svg>A</svg>".into())
        });
        assert!(html.contains("<h1>Title &lt;x&gt;</h1>"), "{html}");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(html.contains("<code>code|x</code>"), "{html}");
        assert!(html.contains("<th>b | c</th>"), "{html}");
        assert!(html.contains("<td>2</td>"), "{html}");
        assert!(html.contains("<li>one</li>"), "{html}");
        assert!(
            html.contains("<a href=\"https://example.com\">two</a>"),
            "{html}"
        );
        assert!(
            html.contains("<blockquote><p><strong>Warning</strong> careful</p>"),
            "{html}"
        );
        assert!(
            html.contains("<figure class=\"sb-figure\"><svg>A</svg></figure>"),
            "{html}"
        );
        assert!(html.contains("<em>[other]</em>"), "{html}");
    }

    #[test]
    fn the_density_view_covers_every_request_of_a_long_point() {
        // 10,000 requests over 6.8 s, each sent 1 ms after its schedule, its first token
        // 10 ms later and its end 20 ms after that.
        let spans: Vec<[f64; 4]> = (0..10_000)
            .map(|i| {
                let t = i as f64 * 0.00068;
                [t, t + 0.001, t + 0.011, t + 0.031]
            })
            .collect();
        let d = density(&spans).unwrap();
        assert_eq!(d["requests"], 10_000);
        let (t0, t1) = (d["t0"].as_f64().unwrap(), d["t1"].as_f64().unwrap());
        assert!(t0 == 0.0 && (t1 - (0.00068 * 9_999.0 + 0.031)).abs() < 1e-9);
        let w = (t1 - t0) / DENSITY_SLOTS as f64;
        let sum = |k: &str| -> f64 {
            d[k].as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .sum::<f64>()
                * w
        };
        // Each phase's time over every request, within the rounding of each slot.
        for (k, each) in [("queued", 0.001), ("waiting", 0.010), ("streaming", 0.020)] {
            let want = each * 10_000.0;
            assert!(
                (sum(k) - want).abs() < want * 0.01,
                "{k}: {} vs {want}",
                sum(k)
            );
        }
        // The last slot still holds requests: the view reaches the end of the point.
        assert!(d["streaming"][DENSITY_SLOTS - 1].as_f64().unwrap() > 0.0);
    }

    #[test]
    fn point_charts_speak_the_specs_terms_not_ids() {
        let point = |id: &str, group: &str, tp: u32, c: u32| -> PointRecord {
            serde_json::from_value(json!({
                "id": id, "values": { "server.args.tp": tp, "concurrency": c }, "group": group,
                "ok": 3, "errors": 0, "flags": [], "incomplete": false,
                "metrics": { "ttft_s": { "count": 3, "mean": 0.1, "p50": 0.1, "p90": 0.1,
                    "p99": 0.1, "min": 0.1, "max": 0.1 } }
            }))
            .unwrap()
        };
        let points = [
            point("p001", "g1", 1, 1),
            point("p002", "g1", 1, 8),
            point("p003", "g2", 2, 1),
            point("p004", "g2", 2, 8),
        ];
        let charts = point_charts(&points);
        let c = &charts[0];
        assert_eq!(c["x_label"], "concurrency");
        let ticks: Vec<&str> = c["x_ticks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["label"].as_str().unwrap())
            .collect();
        assert_eq!(ticks, ["concurrency=1", "concurrency=8"]);
        let names: Vec<&str> = c["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["server.args.tp=1", "server.args.tp=2"]);
        // The second server's points sit at the same x as the first's.
        assert_eq!(c["series"][1]["points"][1]["x"], 2.0);
    }

    #[test]
    fn a_page_loads_nothing_from_outside_and_its_data_cannot_end_the_script() {
        let html = page(
            "t",
            "<p>x</p>",
            &json!({"charts": [], "note": "</script><b>"}),
            "",
        );
        assert!(!html.contains("src=\"http"), "no remote script");
        assert!(!html.contains("<link"), "no stylesheet link");
        assert!(
            html.contains("\\u003c/script\\u003e\\u003cb\\u003e"),
            "{html}"
        );
        // `<!--<script>` in a value would leave the script element open past its end.
        let html = page("t", "", &json!({"charts": [], "v": "<!--<script>"}), "");
        let data = &html[html.find("id=\"sb-data\">").unwrap()..];
        let data = &data[..data.find("</script>").unwrap()];
        assert!(!data.contains('<'), "{data}");
        // The content (title, status, verdicts, summary) comes before the charts.
        let html = page(
            "t",
            "<h1>Run</h1>",
            &json!({"charts": []}),
            "<p>details</p>",
        );
        let (content, charts, details) = (
            html.find("<h1>Run</h1>").unwrap(),
            html.find("sb-interactive").unwrap(),
            html.find("<p>details</p>").unwrap(),
        );
        assert!(content < charts && charts < details, "{html}");
    }
}
