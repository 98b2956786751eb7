//! Where things stand in a JSON text already parsed (a key's start, an object's keys, an
//! array's items), so a refusal can name the line and column of what it refuses: the file
//! readers of conversations share it.

/// Back from a value's start to its key's opening quote.
pub(super) fn key_start(b: &[u8], value: usize) -> usize {
    let colon = b[..value].iter().rposition(|&c| c == b':').unwrap_or(0);
    let close = b[..colon].iter().rposition(|&c| c == b'"').unwrap_or(0);
    b[..close].iter().rposition(|&c| c == b'"').unwrap_or(0)
}

pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The end of the string whose opening quote is at `i` (just past its closing quote).
fn skip_string(b: &[u8], mut i: usize) -> usize {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The end of the value starting at `i` (the line parsed as JSON already).
fn skip_value(b: &[u8], i: usize) -> usize {
    match b.get(i) {
        Some(b'"') => skip_string(b, i),
        Some(b'{') | Some(b'[') => {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            b.len()
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']') {
                j += 1;
            }
            j
        }
    }
}

/// The keys of the object at `i` and where each one's value starts.
pub(super) fn object_keys(b: &[u8], i: usize) -> Vec<(&[u8], usize)> {
    let mut out = Vec::new();
    if b.get(i) != Some(&b'{') {
        return out;
    }
    let mut j = skip_ws(b, i + 1);
    while j < b.len() && b[j] == b'"' {
        let end = skip_string(b, j);
        let key = &b[j + 1..end.saturating_sub(1).max(j + 1)];
        j = skip_ws(b, end);
        if b.get(j) != Some(&b':') {
            break;
        }
        let v = skip_ws(b, j + 1);
        out.push((key, v));
        j = skip_ws(b, skip_value(b, v));
        if b.get(j) != Some(&b',') {
            break;
        }
        j = skip_ws(b, j + 1);
    }
    out
}

/// Where each item of the array at `i` starts.
pub(super) fn array_items(b: &[u8], i: usize) -> Vec<usize> {
    let mut out = Vec::new();
    if b.get(i) != Some(&b'[') {
        return out;
    }
    let mut j = skip_ws(b, i + 1);
    while j < b.len() && b[j] != b']' {
        out.push(j);
        j = skip_ws(b, skip_value(b, j));
        if b.get(j) != Some(&b',') {
            break;
        }
        j = skip_ws(b, j + 1);
    }
    out
}
