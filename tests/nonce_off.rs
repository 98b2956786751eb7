//! Item 16: calibration counts a prompt as it is sent. With `cache.nonce: false` (and under
//! `as-is`, which sends none) no nonce goes in front, so none is counted: prompts hit their
//! length (they were 115 tokens for 128, 498 for 512, 2,030 for 2,048).

use crate::common::*;

fn measured_prompt_tokens(dir: &std::path::Path) -> Vec<(String, u64)> {
    read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["role"] == "measure")
        .map(|r| {
            (
                r["point"].as_str().unwrap().to_string(),
                r["prompt_tokens"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn prompts_hit_their_length_with_the_nonce_on_off_and_under_as_is() {
    let ws = Workspace::new();
    for (name, cache) in [
        ("off", "{ policy: cold, nonce: false }"),
        ("asis", "{ policy: as-is }"),
        ("on", "{ policy: cold }"),
    ] {
        let spec = ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: nonce-{name}\nserver:\n  engine: sim\n  model: m\n  args: {{ profile: fast }}\n  ready_timeout: 30s\n\
                 workload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 2\n\
                 cache: {cache}\nsweep: {{ ctx: [128, 512, 2048] }}\nrequests: 1\n"
            ),
        );
        let (dir, points) = ws.run_ok(&spec);
        let got = measured_prompt_tokens(&dir);
        assert_eq!(got.len(), 3, "{got:?}");
        for ((point, tokens), target) in got.iter().zip([128u64, 512, 2048]) {
            let off = (*tokens as f64 / target as f64 - 1.0).abs();
            assert!(
                off <= 0.02,
                "{name}: {point} sent {tokens} tokens for {target}"
            );
        }
        assert!(
            points
                .iter()
                .all(|p| !p["flags"].to_string().contains("\"calibration\"")),
            "{points:?}"
        );
    }
}
