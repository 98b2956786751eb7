//! BurstGPT's CSV (HPMLL/BurstGPT, `data/BurstGPT_*.csv`): a header, then one request a row,
//! `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, the timestamp in
//! seconds from midnight of the trace's first day. Read as vLLM's `burstgpt` dataset and
//! AIPerf's `burst_gpt` loader read it: the columns by their header names, the request and
//! response token counts as the prompt's and the output's lengths (no text, no blocks).
//! Failed requests (`Response tokens` 0, in `BurstGPT_1.csv` and `_2.csv`) are refused at
//! their row, not dropped in silence: the publishers give `BurstGPT_without_fails_*.csv`.

use super::trace_line::{LineError, MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS, TraceEntry};

/// Where the columns servebench reads are in a row (0-based field indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Columns {
    timestamp: usize,
    request: usize,
    response: usize,
    /// Fields a row must have: one past the last column read.
    fields: usize,
}

/// The fix for a row that does not read.
const ROW_HINT: &str = "each row holds its `Timestamp` (seconds), `Request tokens` and `Response tokens` as numbers, in the header's columns, as BurstGPT writes them";

/// Most fields a row may have (BurstGPT has 6 to 8).
const MAX_FIELDS: usize = 64;

/// The header row: where `Timestamp`, `Request tokens` and `Response tokens` are.
pub(crate) fn header(text: &str) -> Result<Columns, LineError> {
    // A spreadsheet's export may open with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    refuse_quotes(text)?;
    let names: Vec<&str> = text.split(',').map(str::trim).collect();
    if names.len() > MAX_FIELDS {
        return Err(LineError::with_hint(
            format!(
                "the header has {} fields, more than {MAX_FIELDS}",
                names.len()
            ),
            1,
            ROW_HINT,
        ));
    }
    let find = |name: &str| names.iter().position(|n| *n == name);
    match (
        find("Timestamp"),
        find("Request tokens"),
        find("Response tokens"),
    ) {
        (Some(timestamp), Some(request), Some(response)) => Ok(Columns {
            timestamp,
            request,
            response,
            fields: timestamp.max(request).max(response) + 1,
        }),
        _ => Err(LineError::with_hint(
            format!(
                "the header `{}` does not name the columns `Timestamp`, `Request tokens` and `Response tokens`",
                cut(text)
            ),
            1,
            "a BurstGPT trace begins with its header row, `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`; for a JSONL trace set `load.trace.format: mooncake`",
        )),
    }
}

/// One row: its arrival (seconds) and lengths.
pub(crate) fn row(text: &str, columns: Columns) -> Result<TraceEntry, LineError> {
    refuse_quotes(text)?;
    // (byte offset, field) of each field, for the column of a problem.
    let mut fields = Vec::with_capacity(columns.fields);
    let mut start = 0;
    for field in text.split(',') {
        if fields.len() == columns.fields {
            break;
        }
        fields.push((start, field));
        start += field.len() + 1;
    }
    if fields.len() < columns.fields {
        return Err(LineError::with_hint(
            format!(
                "the row has only {} of the {} fields its header's columns need",
                fields.len(),
                columns.fields
            ),
            1,
            ROW_HINT,
        ));
    }
    let number = |index: usize, name: &str| -> Result<(f64, usize), LineError> {
        let (offset, field) = fields[index];
        let column = offset + 1 + (field.len() - field.trim_start().len());
        field
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| (v, column))
            .ok_or_else(|| LineError {
                message: format!(
                    "`{name}` is `{}`, not a number of 0 or more",
                    cut(field.trim())
                ),
                column,
                hint: Some(ROW_HINT),
            })
    };
    let (at_s, _) = number(columns.timestamp, "Timestamp")?;
    let whole = |index: usize, name: &str, max: u64| -> Result<u64, LineError> {
        let (v, column) = number(index, name)?;
        if v.fract() != 0.0 || v > max as f64 {
            return Err(LineError {
                message: format!("`{name}` is {v}: a whole number of tokens up to {max}"),
                column,
                hint: Some(ROW_HINT),
            });
        }
        Ok(v as u64)
    };
    let input = whole(columns.request, "Request tokens", MAX_INPUT_TOKENS)?;
    let output = whole(columns.response, "Response tokens", MAX_OUTPUT_TOKENS)?;
    let at_column = |index: usize| fields[index].0 + 1;
    if output == 0 {
        return Err(LineError::with_hint(
            "`Response tokens` is 0: the row records a failed request".into(),
            at_column(columns.response),
            "replay BurstGPT's `BurstGPT_without_fails_*.csv` (the same trace without its failed requests), or drop the rows whose `Response tokens` is 0",
        ));
    }
    if input == 0 {
        return Err(LineError::with_hint(
            "`Request tokens` is 0: the row asks for an empty prompt".into(),
            at_column(columns.request),
            "drop the rows whose `Request tokens` is 0",
        ));
    }
    Ok(TraceEntry {
        at_s,
        input_tokens: Some(input),
        output_tokens: Some(output as u32),
        blocks: None,
    })
}

/// Quoted fields are not read: BurstGPT writes none, and a quote may hide a comma.
fn refuse_quotes(text: &str) -> Result<(), LineError> {
    match text.find('"') {
        Some(i) => Err(LineError::with_hint(
            "a quoted field: servebench reads BurstGPT's unquoted CSV".into(),
            i + 1,
            "write the trace without quotes, as BurstGPT publishes it",
        )),
        None => Ok(()),
    }
}

/// The first 40 characters of a field, for a message.
fn cut(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type";

    #[test]
    fn rows_are_read_by_their_header_names() {
        let c = header(HEADER).unwrap();
        assert_eq!(header(&format!("\u{feff}{HEADER}")).unwrap(), c);
        let e = row("5,ChatGPT,472,18,490,Conversation log", c).unwrap();
        assert_eq!(
            (e.at_s, e.input_tokens, e.output_tokens),
            (5.0, Some(472), Some(18))
        );
        // BurstGPT_3's columns, with a session and elapsed time before them.
        let c = header("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type").unwrap();
        let e = row("12.5,ab-12,3.0,GPT-4,417,276,693,API log", c).unwrap();
        assert_eq!((e.at_s, e.input_tokens), (12.5, Some(417)));
    }

    #[test]
    fn hostile_rows_are_refused_at_their_column() {
        let c = header(HEADER).unwrap();
        let col = |text: &str| row(text, c).unwrap_err();
        assert_eq!(col("5,ChatGPT,472,0,472,API log").column, 15);
        assert!(
            col("5,ChatGPT,472,0,472,API log")
                .message
                .contains("failed request")
        );
        assert_eq!(col("5,ChatGPT,-3,18,490,x").column, 11);
        assert_eq!(col("5,ChatGPT,  4.5,18,490,x").column, 13);
        assert_eq!(col("nan,ChatGPT,4,18,490,x").column, 1);
        assert_eq!(col("inf,ChatGPT,4,18,490,x").column, 1);
        assert_eq!(col("5,ChatGPT,1e30,18,490,x").column, 11);
        assert_eq!(col("5,\"Chat,GPT\",4,18,490,x").column, 3);
        assert!(
            col("5,ChatGPT,4")
                .message
                .contains("only 3 of the 4 fields")
        );
        assert!(col("").message.contains("only 1 of the 4"));
        assert!(header("at,input,output").is_err());
        assert!(header(&",".repeat(100)).is_err());
    }
}
