//! How servebench writes numbers, units, plurals and cut text: one set of rules for the console
//! and the report (the report's template filters call these).
//!
//! A leaf module: it depends only on the catalogue (for how each metric is shown).

use crate::catalog::{Display, Metric};

/// Shown for a value that was not measured.
pub const MISSING: &str = "—";

/// Three significant digits without exponent notation; values of 100 and more as integers.
pub fn sig3(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        return "0".to_string();
    }
    if a >= 100.0 {
        return format!("{:.0}", x);
    }
    // Round to three significant digits first, so a carry (0.09996 -> 0.1) picks the decimals.
    let scale = 10f64.powi(2 - a.log10().floor() as i32);
    let r = (x * scale).round() / scale;
    if r.abs() >= 100.0 {
        return format!("{:.0}", r);
    }
    let decimals = (2 - r.abs().log10().floor() as i32).max(0) as usize;
    format!("{:.*}", decimals, r)
}

/// `digits` significant digits (at least 1) without exponent notation: `sig(0.3125, 4)` is
/// `0.3125`; values with more integer digits than `digits` as integers.
pub fn sig(x: f64, digits: usize) -> String {
    let digits = digits.max(1) as i32;
    let a = x.abs();
    if a == 0.0 || !a.is_finite() {
        return if a == 0.0 { "0".into() } else { format!("{x}") };
    }
    if a >= 10f64.powi(digits - 1) {
        return format!("{x:.0}");
    }
    let scale = 10f64.powi(digits - 1 - a.log10().floor() as i32);
    let r = (x * scale).round() / scale;
    let decimals = (digits - 1 - r.abs().log10().floor() as i32).max(0) as usize;
    format!("{:.*}", decimals, r)
}

/// The fewest significant digits (3 to 8) that write every value of `values` apart:
/// 0.3125, 0.28125 and 0.265625 need 3 (`0.313`, `0.281`, `0.266`), 10.02 and 10.04 need 4.
pub fn distinguishing_digits(values: &[f64]) -> usize {
    (3..=8)
        .find(|&d| {
            let mut seen: Vec<(f64, String)> = Vec::new();
            values.iter().all(|&v| {
                let text = sig(v, d);
                let clash = seen.iter().any(|(w, t)| *t == text && *w != v);
                seen.push((v, text));
                !clash
            })
        })
        .unwrap_or(8)
}

/// Seconds with three significant digits: `0.0123`, `0.512`, `12.3`, `1234`.
pub fn seconds(x: f64) -> String {
    sig3(x)
}

/// Token rates: no decimals from 100 tok/s up, one below.
pub fn rate(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{:.0}", x)
    } else {
        format!("{:.1}", x)
    }
}

/// Token counts: integers as integers, means with one decimal (`1024`, `1023.5`).
pub fn tokens(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{:.0}", x)
    } else {
        format!("{:.1}", x)
    }
}

/// A duration in seconds for people: `42.1 s`, `12m 05s`, `1h 02m 03s`.
pub fn duration(x: f64) -> String {
    if x < 60.0 {
        return format!("{} s", sig3(x));
    }
    let total = x.round() as u64;
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else {
        format!("{m}m {s:02}s")
    }
}

/// A value of `metric` in its display unit (ITL in ms, rates, counts, seconds), no unit suffix.
pub fn metric_value(metric: Option<Metric>, x: f64) -> String {
    match metric.map(Metric::display) {
        Some(Display::Millis) => sig3(x * 1000.0),
        Some(Display::Rate) => rate(x),
        Some(Display::Tokens) => tokens(x),
        Some(Display::Seconds) => seconds(x),
        Some(Display::Share) => format!("{x:.2}"),
        Some(Display::Sig3) | None => sig3(x),
    }
}

/// A number checked against a published one: more digits than a table shows, so a verdict's
/// percentage can be read from the two numbers (`0.4603`, `3.889`, `3073.3`).
pub fn precise(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.4}")
    }
}

/// A number as a person wrote it: `5`, `2.5` (no trailing `.0`).
pub fn plain(x: f64) -> String {
    let s = format!("{x}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// `1 point`, `2 points`; `plural(n, "launch", "launches")` for irregular ones.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `count` for words whose plural adds an `s`.
pub fn count_s(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// At most `max_bytes` of `s`, cut at a character boundary, with `…` when cut.
pub fn truncate(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        return s.to_string();
    }
    format!("{}…", &s[..floor_char_boundary(s, max_bytes)])
}

/// At most `max_chars` characters of `s`, cut at a space where one is near (within the last
/// quarter kept), with `…` when cut: a warning never ends mid-word.
pub fn cut_words(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        return s.to_string();
    }
    let kept: String = s.chars().take(max_chars).collect();
    let at_space = kept
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_whitespace())
        .map(|(i, _)| i)
        .filter(|&i| kept[..i].chars().count() >= max_chars * 3 / 4);
    let head = match at_space {
        Some(i) => kept[..i].trim_end_matches([',', ';', ':', ' ']),
        None => kept.as_str(),
    };
    format!("{head}…")
}

/// The largest character boundary of `s` at or below `index`.
pub fn floor_char_boundary(s: &str, index: usize) -> usize {
    let mut cut = index.min(s.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// The smallest character boundary of `s` at or above `index`.
pub fn ceil_char_boundary(s: &str, index: usize) -> usize {
    let mut cut = index.min(s.len());
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    cut
}

/// The first line of `s` (all of it when it has one line).
pub fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// The last `n` lines of `s`.
pub fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Joins argv into one line a shell would split back the same way.
pub fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significant_digits() {
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(0.5123), "0.512");
        assert_eq!(sig3(1.2345), "1.23");
        assert_eq!(sig3(12.345), "12.3");
        assert_eq!(sig3(123.45), "123");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(0.09996), "0.100");
    }

    #[test]
    fn digits_that_tell_values_apart() {
        assert_eq!(sig(0.3125, 4), "0.3125");
        assert_eq!(sig(1234.4, 3), "1234");
        assert_eq!(sig(12.0, 4), "12.00");
        let bisected = [0.3125, 0.28125, 0.265625];
        let d = distinguishing_digits(&bisected);
        let shown: Vec<String> = bisected.iter().map(|&v| sig(v, d)).collect();
        assert_eq!(shown, ["0.313", "0.281", "0.266"]);
        assert_eq!(distinguishing_digits(&[10.02, 10.04]), 4);
        assert_eq!(distinguishing_digits(&[100.25, 100.5]), 4);
        // The same value twice is not a clash.
        assert_eq!(distinguishing_digits(&[2.0, 2.0]), 3);
    }

    #[test]
    fn rates_tokens_durations() {
        assert_eq!(rate(12345.6), "12346");
        assert_eq!(rate(98.76), "98.8");
        assert_eq!(tokens(1024.0), "1024");
        assert_eq!(tokens(1023.5), "1023.5");
        assert_eq!(duration(42.13), "42.1 s");
        assert_eq!(duration(725.0), "12m 05s");
        assert_eq!(duration(3723.0), "1h 02m 03s");
    }

    #[test]
    fn metric_values_follow_the_catalogue() {
        assert_eq!(metric_value(Some(Metric::Itl), 0.0123), "12.3");
        assert_eq!(metric_value(Some(Metric::Decode), 98.76), "98.8");
        assert_eq!(metric_value(Some(Metric::PromptTokens), 1023.5), "1023.5");
        assert_eq!(metric_value(Some(Metric::Ttft), 0.5123), "512");
        assert_eq!(metric_value(None, 0.5123), "0.512");
        assert_eq!(precise(0.46031), "0.4603");
        assert_eq!(precise(24.1262), "24.126");
        assert_eq!(precise(3073.33), "3073.3");
        assert_eq!(plain(5.0), "5");
        assert_eq!(plain(2.5), "2.5");
    }

    #[test]
    fn plurals_and_cuts() {
        assert_eq!(count_s(1, "point"), "1 point");
        assert_eq!(count_s(0, "point"), "0 points");
        assert_eq!(count(2, "launch", "launches"), "2 launches");
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(
            cut_words("the server answered slowly", 22),
            "the server answered…"
        );
        assert_eq!(cut_words("short", 22), "short");
        // No space near the end: cut where the limit falls.
        assert_eq!(cut_words("abcdefghij", 4), "abcd…");
        assert_eq!(ceil_char_boundary("héllo", 2), 3);
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(first_line("a\nb"), "a");
        assert_eq!(
            shell_join(&["echo".into(), "a b".into(), "it's".into()]),
            r"echo 'a b' 'it'\''s'"
        );
    }
}
