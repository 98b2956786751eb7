//! Seeded mutations of small valid inputs, for the readers' fuzz tests: each input is one of
//! the seeds with one to three flipped bits, cuts or inserted tokens (bytes that mean
//! something to a parser), the same every run for the same state.

/// `count` mutated inputs, numbered: input `i` starts from `seeds[i % seeds.len()]`. `state`
/// seeds the generator (xorshift64*), so a failure names an input that comes back.
pub fn mutations<'a>(
    seeds: &'a [&'a [u8]],
    tokens: &'a [&'a [u8]],
    mut state: u64,
    count: usize,
) -> impl Iterator<Item = (usize, Vec<u8>)> + 'a {
    let mut next = move |n: usize| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1) as u64) as usize
    };
    (0..count).map(move |i| {
        let mut bytes = seeds[i % seeds.len()].to_vec();
        for _ in 0..=next(3) {
            let at = next(bytes.len() + 1);
            match next(3) {
                0 if at < bytes.len() => bytes[at] ^= 1 << next(8),
                1 => bytes.truncate(at),
                _ => {
                    let t = tokens[next(tokens.len())];
                    bytes.splice(at..at, t.iter().copied());
                }
            }
        }
        (i, bytes)
    })
}

/// Asserts that an error's `line:column` stands within `bytes` (a column may be one past the
/// line's end: the place a missing value was due).
pub fn assert_within(bytes: &[u8], line: usize, column: usize) {
    let text = bytes
        .split(|b| *b == b'\n')
        .nth(line.saturating_sub(1))
        .unwrap_or(&[]);
    assert!(
        line >= 1 && column >= 1 && column <= text.len() + 1,
        "{line}:{column} of {text:?}"
    );
}
