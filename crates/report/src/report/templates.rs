//! The one template environment every rendered file comes from: `report.md` and comparisons
//! ([`render_named`], templates a spec or `--template` may choose, values written as they
//! are), and servebench's own `history.md` and pages ([`render_own`]; `page.html.j2` escapes
//! every value for HTML unless marked `safe`). Each rendering has a budget of steps and of
//! output bytes; errors name the template and its line.

use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};

use super::ReportError;
use super::format;

/// `history.md`'s template (servebench's own, not chosen by a spec).
pub(crate) const HISTORY_TEMPLATE: (&str, &str) = (
    "history.md.j2",
    include_str!("../../templates/history.md.j2"),
);

/// The template of `report.html` and `history.html`: HTML, every value escaped by default.
pub(crate) const PAGE_TEMPLATE: (&str, &str) =
    ("page.html.j2", include_str!("../../templates/page.html.j2"));

/// Largest template file read, in bytes. The built-in templates are 5 to 14 KB; a template is
/// written by hand, so past this it is not a template (and is not read into memory).
pub(crate) const MAX_TEMPLATE_BYTES: u64 = 1024 * 1024;

/// Steps (minijinja instructions) one rendering may take. The default template takes about
/// 1,000 per point, so a report of the most points a spec may have (10,000) takes 10 million;
/// this is five times that, for templates that do more per point. A loop that never ends, or
/// one over far more items than a report has, stops here with an error instead of hanging the
/// end of a run: after a few seconds (minijinja runs some 10 to 20 million steps a second).
pub(crate) const TEMPLATE_FUEL: u64 = 50_000_000;

/// Largest rendered report or comparison, in bytes. The default template writes about 1 KB
/// per point (10 MB at 10,000 points); past this the template is writing something else.
pub(crate) const MAX_RENDERED_BYTES: usize = 64 * 1024 * 1024;

/// Renders a model (the report's, or another such as the comparison's) with a template given by
/// name (used in error messages) and source.
pub(crate) fn render_named<M: serde::Serialize>(
    model: &M,
    name: &str,
    source: &str,
) -> Result<String, ReportError> {
    render_within(
        model,
        name,
        source,
        Budget {
            fuel: TEMPLATE_FUEL,
            output_bytes: MAX_RENDERED_BYTES,
        },
    )
}

/// What one rendering may spend.
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// Steps, as minijinja counts them.
    fuel: u64,
    /// Bytes of output.
    output_bytes: usize,
}

fn render_within<M: serde::Serialize>(
    model: &M,
    name: &str,
    source: &str,
    budget: Budget,
) -> Result<String, ReportError> {
    render_escaped(model, name, source, budget, AutoEscape::None)
}

/// One of servebench's own templates (`history.md.j2`, `page.html.j2`), over data of any size
/// its inputs allow: its values escaped as its file's kind asks (an `.html.j2` escapes every
/// value for HTML unless the template marks it `safe`), within [`OWN_BUDGET`].
pub(crate) fn render_own<M: serde::Serialize>(
    model: &M,
    name: &str,
    source: &str,
) -> Result<String, ReportError> {
    render_escaped(
        model,
        name,
        source,
        OWN_BUDGET,
        minijinja::default_auto_escape_callback(name),
    )
}

/// What one of servebench's own templates may spend. Its data is bounded by the inputs' own
/// budgets (a page's timeline keeps 8,000 requests, a run 1,000,000 spans), not by a
/// template's: this stops a defect of ours, not a user's loop, so it is twenty times a report's.
const OWN_BUDGET: Budget = Budget {
    fuel: 20 * TEMPLATE_FUEL,
    output_bytes: 16 * MAX_RENDERED_BYTES,
};

fn render_escaped<M: serde::Serialize>(
    model: &M,
    name: &str,
    source: &str,
    budget: Budget,
    escape: AutoEscape,
) -> Result<String, ReportError> {
    let env = environment(name, source, budget, escape)?;
    let err = |e: minijinja::Error| template_error(name, e, budget, source);
    let template = env.get_template(name).map_err(err)?;
    let mut out = CappedOutput {
        bytes: Vec::new(),
        limit: budget.output_bytes,
    };
    template
        .render_captured_to(
            minijinja::Value::from(minijinja::value::Serde(model)),
            &mut out,
        )
        .map_err(err)?;
    // Only what minijinja wrote: text, cut nowhere (the writer refuses whole writes).
    String::from_utf8(out.bytes).map_err(|e| ReportError::Template {
        name: name.to_string(),
        line: None,
        message: format!("the output is not UTF-8 text: {e}"),
    })
}

/// An environment holding the template `name`, compiled: the one place templates are set up,
/// so `validate` parses a template exactly as the report renders it.
fn environment<'s>(
    name: &'s str,
    source: &'s str,
    budget: Budget,
    escape: AutoEscape,
) -> Result<Environment<'s>, ReportError> {
    let err = |e: minijinja::Error| template_error(name, e, budget, source);
    if source.len() as u64 > MAX_TEMPLATE_BYTES {
        return Err(ReportError::Template {
            name: name.to_string(),
            line: None,
            message: format!(
                "the template is {} bytes; templates are limited to {MAX_TEMPLATE_BYTES} bytes (1 MiB)",
                source.len()
            ),
        });
    }
    let mut env = Environment::new();
    // A template that never ends, or runs long, stops with an error naming the budget.
    env.set_fuel(Some(budget.fuel));
    // Strict: a misspelt field is an error with a line number, not a silently empty cell.
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Markdown is written as is; a page escapes every value for HTML unless marked `safe`.
    env.set_auto_escape_callback(move |_| escape.clone());
    // Block tags on lines of their own leave no blank lines behind; the file's last newline stays.
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
        .map_err(err)?;
    env.set_syntax(syntax);
    format::register(&mut env);
    env.add_template(name, source).map_err(err)?;
    Ok(env)
}

/// Whether a template parses (syntax, size), without rendering it.
pub(crate) fn check_template(name: &str, source: &str) -> Result<(), ReportError> {
    environment(
        name,
        source,
        Budget {
            fuel: TEMPLATE_FUEL,
            output_bytes: MAX_RENDERED_BYTES,
        },
        AutoEscape::None,
    )
    .map(drop)
}

/// Collects the rendered text, refusing to grow past `limit` bytes.
struct CappedOutput {
    bytes: Vec<u8>,
    limit: usize,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            return Err(std::io::Error::other("rendered output budget"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn template_error(name: &str, e: minijinja::Error, budget: Budget, source: &str) -> ReportError {
    // The expression the error is about (`tables[0].titel`), from its span in the source: an
    // undefined field is named, not only "undefined value".
    let expression = e
        .range()
        .and_then(|r| source.get(r))
        .map(|x| x.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|x| !x.is_empty() && x.len() <= 200)
        // A syntax error's span is the token that broke it: the message already names it.
        .filter(|_| e.kind() != minijinja::ErrorKind::SyntaxError);
    let message = match e.kind() {
        minijinja::ErrorKind::OutOfFuel => format!(
            "the template used up its budget of {} steps: a loop that never ends, or one over far more items than the report has",
            budget.fuel
        ),
        minijinja::ErrorKind::WriteFailure => format!(
            "the template wrote more than {} bytes, the limit of a report",
            budget.output_bytes
        ),
        minijinja::ErrorKind::UndefinedError => {
            let what = match &expression {
                Some(x) => format!("`{x}` is undefined"),
                None => "a value is undefined".to_string(),
            };
            let detail = e.detail().map(|d| format!(" ({d})")).unwrap_or_default();
            format!(
                "{what}{detail}: the report model has no such field (see `servebench schema report-model`, or `schemas/report-model.schema.json`); check its spelling, or guard it with `is defined`"
            )
        }
        kind => match (e.detail(), &expression) {
            (Some(detail), Some(x)) => format!("{kind}: {detail} (in `{x}`)"),
            (Some(detail), None) => format!("{kind}: {detail}"),
            (None, Some(x)) => format!("{kind} (in `{x}`)"),
            (None, None) => kind.to_string(),
        },
    };
    ReportError::Template {
        name: name.to_string(),
        line: e.line(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(fuel: u64, output_bytes: usize) -> Budget {
        Budget { fuel, output_bytes }
    }

    fn message(e: ReportError) -> String {
        match e {
            ReportError::Template { message, .. } => message,
            other => panic!("not a template error: {other}"),
        }
    }

    #[test]
    fn a_loop_stops_at_the_step_budget() {
        let loops =
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        let e = render_within(&(), "t", loops, small(100_000, MAX_RENDERED_BYTES)).unwrap_err();
        assert!(message(e).contains("used up its budget of 100000 steps"));
        // Enough fuel: the same engine renders.
        let out = render_within(&(), "t", "{{ 1 + 1 }}", small(100, 10)).unwrap();
        assert_eq!(out, "2");
    }

    #[test]
    fn output_stops_at_the_byte_budget() {
        let t = "{% for i in range(1000) %}0123456789{% endfor %}";
        let e = render_within(&(), "t", t, small(TEMPLATE_FUEL, 5_000)).unwrap_err();
        assert!(message(e).contains("wrote more than 5000 bytes"));
        let out = render_within(&(), "t", t, small(TEMPLATE_FUEL, 10_000)).unwrap();
        assert_eq!(out.len(), 10_000);
    }

    #[test]
    fn ranges_past_minijinjas_own_limit_fail_at_once() {
        // The template: minijinja refuses a range of more than 100,000 items.
        let t =
            "{% for i in range(10000000) %}{% for j in range(10000000) %}x{% endfor %}{% endfor %}";
        let e = render_named(&(), "t", t).unwrap_err();
        assert!(message(e).contains("range has too many elements"));
    }
}
