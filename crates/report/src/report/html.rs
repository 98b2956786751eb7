//! Self-contained HTML pages: `report.html` beside every `report.md`, and `history.html`.
//! Everything is inline (the Markdown's content as HTML with its SVG charts embedded, the
//! style, the script, the data), so a page opens from a checkout or an attachment with no
//! network. On top of the Markdown's content a page has charts with hover values and
//! toggled series, each point's details, and (for a run) a per-request timeline: scheduled,
//! sent, first token, each chunk and the end, with the router's worker where recorded.

use std::path::Path;

use pulldown_cmark::{BlockQuoteKind, CowStr, Event, Options, Parser, Tag, TagEnd};
use serde::Serialize;
use serde_json::json;

use minijinja::HtmlEscape;
use servebench_model::catalog::Metric;
use servebench_model::results::records::{PointRecord, RequestRecord};
use servebench_model::results::rundir::RunDir;

use super::ReportError;
use super::templates::{PAGE_TEMPLATE, render_own};

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

/// What `page.html.j2` reads. `content` is HTML (from [`markdown_to_html`]); every other text
/// is escaped by the template.
#[derive(Serialize)]
struct PageView<'a> {
    title: &'a str,
    style: &'static str,
    script: &'static str,
    content: &'a str,
    has_timeline: bool,
    points: Option<&'a [PointDetails]>,
    data: &'a serde_json::Value,
}

/// A whole page: `title`, the content (HTML: the title, status, verdicts and summary a
/// reviewer reads first), then the interactive part (its data: `charts`, `timeline`), then
/// each point's details (a run's page; none for the history).
pub(crate) fn page(
    title: &str,
    content: &str,
    data: &serde_json::Value,
    points: Option<&[PointDetails]>,
) -> Result<String, ReportError> {
    let has_timeline = data["timeline"]
        .as_array()
        .is_some_and(|t| t.first().is_some_and(serde_json::Value::is_object));
    let (name, source) = PAGE_TEMPLATE;
    let view = PageView {
        title,
        style: STYLE,
        script: SCRIPT,
        content,
        has_timeline,
        points,
        data,
    };
    render_own(&view, name, source)
}

/// Markdown (GitHub's: tables, `> [!WARNING]`) to HTML through pulldown-cmark. Raw HTML in
/// the Markdown is shown as text, never passed through (a server's name or error may carry
/// `<script>`). An image whose file `inline` can read is embedded as its SVG, any other is
/// left as its text, and only links to the web or the page itself are links: a page loads
/// nothing and stands alone.
pub(crate) fn markdown_to_html(md: &str, inline: &dyn Fn(&str) -> Option<String>) -> String {
    let mut events: Vec<Event> = Vec::new();
    // Per open link: the file it named when it is no link here.
    let mut links: Vec<Option<CowStr>> = Vec::new();
    // An open image: its target and its text so far.
    let mut image: Option<(CowStr, String)> = None;
    // An alert's word, written at the start of its first paragraph.
    let mut alert: Option<&str> = None;
    let md = html_blocks_as_text(md);
    for event in Parser::new_ext(&md, Options::ENABLE_TABLES | Options::ENABLE_GFM) {
        if let Some((_, text)) = &mut image {
            match event {
                Event::End(TagEnd::Image) => {
                    let (target, text) = image.take().expect("open");
                    let html = match inline(&target) {
                        Some(svg) => format!("<figure class=\"sb-figure\">{svg}</figure>"),
                        None => format!("<em>[{}]</em>", HtmlEscape(&text)),
                    };
                    events.push(Event::Html(html.into()));
                }
                Event::Text(t) | Event::Code(t) | Event::Html(t) | Event::InlineHtml(t) => {
                    text.push_str(&t)
                }
                _ => {}
            }
            continue;
        }
        match event {
            Event::Start(Tag::Image { dest_url, .. }) => image = Some((dest_url, String::new())),
            Event::Start(Tag::Link { ref dest_url, .. }) => {
                let web = ["http://", "https://", "#"]
                    .iter()
                    .any(|p| dest_url.starts_with(p));
                if web {
                    links.push(None);
                    events.push(event);
                } else {
                    links.push(Some(dest_url.clone()));
                }
            }
            Event::End(TagEnd::Link) => match links.pop().flatten() {
                // A file beside the report: named, not linked.
                Some(file) => events.push(Event::Html(
                    format!(" (<code>{}</code>)", HtmlEscape(&file)).into(),
                )),
                None => events.push(event),
            },
            Event::Html(t) | Event::InlineHtml(t) => events.push(Event::Text(t)),
            // An HTML block's text, escaped, reads as a paragraph.
            Event::Start(Tag::HtmlBlock) => events.push(Event::Start(Tag::Paragraph)),
            Event::End(TagEnd::HtmlBlock) => events.push(Event::End(TagEnd::Paragraph)),
            Event::Start(Tag::BlockQuote(kind)) => {
                alert = kind.map(|k| match k {
                    BlockQuoteKind::Note => "Note",
                    BlockQuoteKind::Tip => "Tip",
                    BlockQuoteKind::Important => "Important",
                    BlockQuoteKind::Warning => "Warning",
                    BlockQuoteKind::Caution => "Caution",
                });
                events.push(Event::Start(Tag::BlockQuote(None)));
            }
            Event::End(TagEnd::BlockQuote(_)) => events.push(Event::End(TagEnd::BlockQuote(None))),
            Event::Start(Tag::Paragraph) => {
                events.push(event);
                if let Some(word) = alert.take() {
                    events.push(Event::Html(format!("<strong>{word}</strong> ").into()));
                }
            }
            // Wide tables scroll in their own box.
            Event::Start(Tag::Table(_)) => {
                events.push(Event::Html("<div class=\"sb-table\">".into()));
                events.push(event);
            }
            Event::End(TagEnd::Table) => {
                events.push(event);
                events.push(Event::Html("</div>\n".into()));
            }
            other => events.push(other),
        }
    }
    let mut out = String::with_capacity(md.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut out, events.into_iter());
    out
}

/// The Markdown with every line that opens with `<` (after quote and list markers) opening
/// with `\<` instead: such a line would start an HTML block, which runs to its end condition
/// (for a value such as `<!--`, `-->`: the rest of the report, shown as one run of text); as
/// `\<` it is text in its paragraph, cell or item like any other. Fenced code is left alone.
fn html_blocks_as_text(md: &str) -> String {
    let mut out = String::with_capacity(md.len() + 64);
    let mut fence: Option<&str> = None;
    for line in md.split_inclusive('\n') {
        let t = line.trim_start();
        if let Some(f) = fence {
            if t.starts_with(f) {
                fence = None;
            }
            out.push_str(line);
            continue;
        }
        fence = ["```", "~~~"].into_iter().find(|f| t.starts_with(f));
        let mut at = line.len() - t.len();
        loop {
            let rest = &line[at..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            let bullet = rest.starts_with(['-', '*', '+']) && rest[1..].starts_with([' ', '\t']);
            let marker = if rest.starts_with('>') || bullet {
                1
            } else if (1..=9).contains(&digits)
                && rest[digits..].starts_with(['.', ')'])
                && rest[digits + 1..].starts_with([' ', '\t'])
            {
                digits + 1
            } else {
                break;
            };
            let after = &rest[marker..];
            at += marker + (after.len() - after.trim_start_matches([' ', '\t']).len());
        }
        if fence.is_none() && line[at..].starts_with('<') {
            out.push_str(&line[..at]);
            out.push('\\');
            out.push_str(&line[at..]);
        } else {
            out.push_str(line);
        }
    }
    out
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

/// A point's details on the page: its values, counts, flags and every metric's statistics,
/// as text (the template escapes it).
#[derive(Serialize)]
pub(crate) struct PointDetails {
    id: String,
    values: String,
    group: String,
    ok: usize,
    errors: usize,
    flags: Vec<FlagText>,
    metrics: Vec<MetricRow>,
}

#[derive(Serialize)]
struct FlagText {
    kind: String,
    message: String,
}

/// One metric's statistics in its shown unit; `ci` the 95% interval when there is one.
#[derive(Serialize)]
struct MetricRow {
    label: String,
    n: usize,
    mean: String,
    p50: String,
    p90: String,
    p99: String,
    min: String,
    max: String,
    ci: Option<[String; 2]>,
}

fn point_details(points: &[PointRecord]) -> Vec<PointDetails> {
    points
        .iter()
        .map(|p| PointDetails {
            id: p.id.clone(),
            values: super::format::values_text(&p.values),
            group: p.group.clone(),
            ok: p.ok,
            errors: p.errors,
            flags: p
                .flags
                .iter()
                .map(|f| FlagText {
                    kind: f.kind.name().to_string(),
                    message: f.message.clone(),
                })
                .collect(),
            metrics: p
                .metrics
                .iter()
                .map(|(name, s)| {
                    let m = Metric::from_name(name);
                    let v = |x: f64| servebench_model::text::metric_value(m, x);
                    MetricRow {
                        label: m.map_or(name.as_str(), |m| m.label()).to_string(),
                        n: s.count,
                        mean: v(s.mean),
                        p50: v(s.p50),
                        p90: v(s.p90),
                        p99: v(s.p99),
                        min: v(s.min),
                        max: v(s.max),
                        ci: s.ci95_low.zip(s.ci95_high).map(|(l, h)| [v(l), v(h)]),
                    }
                })
                .collect(),
        })
        .collect()
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
) -> Result<String, ReportError> {
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
    page(title, &content, &data, Some(&point_details(points)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_escaped_html_with_tables_lists_and_inlined_charts() {
        let md = "# Title <x>\n\nSome **bold** and `code|x`.\n\n| a | b \\| c |\n|---|---:|\n| 1 | 2 |\n\n- one\n- [two](https://example.com)\n- [notes](notes.md)\n\n> [!WARNING]\n> careful\n\n![chart](charts/a.svg)\n![other](charts/b.svg)\n";
        let html = markdown_to_html(md, &|p| {
            (p == "charts/a.svg").then(|| "<svg>A</svg>".into())
        });
        assert!(html.contains("<h1>Title &lt;x&gt;</h1>"), "{html}");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(html.contains("<code>code|x</code>"), "{html}");
        assert!(html.contains("<div class=\"sb-table\"><table>"), "{html}");
        assert!(html.contains("<th>a</th>"), "{html}");
        assert!(
            html.contains("<th style=\"text-align: right\">b | c</th>"),
            "{html}"
        );
        assert!(
            html.contains("<td style=\"text-align: right\">2</td>"),
            "{html}"
        );
        assert!(html.contains("</table>\n</div>"), "{html}");
        assert!(html.contains("<li>one</li>"), "{html}");
        assert!(
            html.contains("<a href=\"https://example.com\">two</a>"),
            "{html}"
        );
        // A file beside the report is named, not linked.
        assert!(
            html.contains("<li>notes (<code>notes.md</code>)</li>"),
            "{html}"
        );
        assert!(
            html.contains("<blockquote>\n<p><strong>Warning</strong> careful</p>"),
            "{html}"
        );
        assert!(
            html.contains("<figure class=\"sb-figure\"><svg>A</svg></figure>"),
            "{html}"
        );
        assert!(html.contains("<em>[other]</em>"), "{html}");
    }

    #[test]
    fn raw_html_in_the_markdown_is_text_never_markup() {
        // As a server's name, error or sweep value may put it into a report.
        let md = "# Run <script>alert(1)</script>\n\n<!--<script>\n\n| server | error |\n|---|---|\n| <img src=x onerror=alert(1)> | </table><script>x</script> |\n\n<details>\n<summary><b>p001</b></summary>\n\n[x](javascript:alert(1)) ![y](<javascript:alert(1)>)\n";
        let html = markdown_to_html(md, &|_| None);
        for tag in [
            "<script",
            "<!--",
            "<img",
            "<details",
            "<summary",
            "<b>",
            "javascript:alert(1)\"",
        ] {
            assert!(!html.contains(tag), "{tag} passed through: {html}");
        }
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("&lt;!--&lt;script&gt;"), "{html}");
        assert!(
            html.contains("<td>&lt;img src=x onerror=alert(1)&gt;</td>"),
            "{html}"
        );
        assert!(html.contains("&lt;details&gt;"), "{html}");
        // `<!--` opens no block that runs on: the table after it is still a table.
        assert!(html.contains("<p>&lt;!--&lt;script&gt;</p>"), "{html}");
        assert!(html.contains("<th>server</th>"), "{html}");
    }

    #[test]
    fn the_page_template_escapes_every_value_it_is_given() {
        let point: PointRecord = serde_json::from_value(json!({
            "id": "p<1>", "values": { "server": "<script>alert(1)</script>" }, "group": "g&",
            "ok": 1, "errors": 0, "flags": [], "incomplete": false,
            "metrics": { "<b>x</b>": { "count": 1, "mean": 0.1, "p50": 0.1, "p90": 0.1,
                "p99": 0.1, "min": 0.1, "max": 0.1 } }
        }))
        .unwrap();
        let html = page(
            "a </title><script>",
            "<p>content</p>",
            &json!({"charts": []}),
            Some(&point_details(&[point])),
        )
        .unwrap();
        assert!(
            html.contains("<title>a &lt;&#x2f;title&gt;&lt;script&gt;</title>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<b>p&lt;1&gt;</b> server=&lt;script&gt;alert(1)&lt;&#x2f;script&gt; · group g&amp;"
            ),
            "{html}"
        );
        assert!(
            html.contains("<td>&lt;b&gt;x&lt;&#x2f;b&gt;</td><td>1</td>"),
            "{html}"
        );
        // The content is HTML already (escaped when it was made), the template's own markup kept.
        assert!(html.contains("<p>content</p>"), "{html}");
        assert_eq!(
            html.matches("<script").count(),
            2,
            "the data's and the page's: {html}"
        );
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
            None,
        )
        .unwrap();
        assert!(!html.contains("src=\"http"), "no remote script");
        assert!(!html.contains("<link"), "no stylesheet link");
        assert!(
            html.contains("\\u003c/script\\u003e\\u003cb\\u003e"),
            "{html}"
        );
        // `<!--<script>` in a value would leave the script element open past its end.
        let html = page("t", "", &json!({"charts": [], "v": "<!--<script>"}), None).unwrap();
        let data = &html[html.find("id=\"sb-data\">").unwrap()..];
        let data = &data[..data.find("</script>").unwrap()];
        assert!(!data.contains('<'), "{data}");
        // The content (title, status, verdicts, summary) comes before the charts.
        let html = page("t", "<h1>Run</h1>", &json!({"charts": []}), Some(&[])).unwrap();
        let (content, charts, details) = (
            html.find("<h1>Run</h1>").unwrap(),
            html.find("sb-interactive").unwrap(),
            html.find("<h2>Point details</h2>").unwrap(),
        );
        assert!(content < charts && charts < details, "{html}");
    }
}
