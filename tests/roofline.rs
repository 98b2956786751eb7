//! `servebench bound`: a context sweep on the simulator, whose profile reads the KV cache at a
//! known bandwidth, graded against Llama 3.1 8B's bytes on an H100; the bandwidth it recovers
//! is the profile's, within 10%.

use std::path::Path;

use crate::common::*;

/// A profile that declares its decode reads: Llama 3.1 8B's 131,072 KV bytes per token at
/// 19.564% of an H100's 3,350 GB/s, 655.4 GB/s (200 ns per token of context), and 6.7 GB of
/// weights at 100%, 2 ms a step: less than Llama's 16 GB, so the grade must call the fixed part
/// faster than its floor. Prefill is kept cheap so the sweep is quick.
const PROFILE: &str = "name: kv-655\ndescription: KV read at 655 GB/s\ntime_scale: 1.0\nwarmup_s: 0.05\n\
context_length: 65536\nmax_running_requests: 16\nchunked_prefill_size: 8192\n\
memory: { gpu_gb: 80.0, weight_gb: 16.0, kv_bytes_per_token: 131072, mem_fraction_static: 0.88, graph_gb: 1.0 }\n\
prefill: { base_ms: 0.3, per_token_us: 0.5, attention_ns: 0.0 }\n\
decode: { per_seq_us: 0.0, bandwidth: { peak_gb_s: 3350, weight_bytes: 6.7e9, weight_efficiency: 1.0, kv_bytes_per_token: 131072, kv_efficiency: 0.195640 } }\nseed: 0\n";

/// Six requests a point: with three, one slow stream in a point widened the 95% interval of
/// the bandwidth past one verdict about one run in six (the tool says so, and gives none).
#[test]
fn bound_recovers_the_simulators_kv_bandwidth_from_a_context_sweep() {
    let ws = Workspace::new();
    let profile = ws.write("kv-655.yaml", PROFILE);
    let spec = ws.write(
        "bound.yaml",
        &format!(
            "name: bound\nserver:\n  engine: sim\n  model: llama\n  args: {{ profile: {}, context-length: 65536 }}\n  ready_timeout: 30s\n\
             workload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 24\n  ignore_eos: true\n\
             cache: {{ policy: cold }}\nsweep: {{ ctx: [1024, 4096, 8192, 16384, 24576] }}\nrequests: 6\n",
            profile.display()
        ),
    );
    let (dir, _) = ws.run_ok(&spec);
    let config = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/roofline/tests/fixtures/configs/llama-3.1-8b.json");
    let out = servebench()
        .args([
            "bound",
            dir.to_str().unwrap(),
            "--model-config",
            config.to_str().unwrap(),
            "--gpu",
            "NVIDIA H100 80GB HBM3",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // One row per point, and the sweep's line.
    assert_eq!(
        text.lines().filter(|l| l.starts_with("| p00")).count(),
        5,
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("At batch 1, over 5 contexts"))
        .unwrap_or_else(|| panic!("{text}"));
    let slope_us: f64 = line
        .split(" ms + ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    // 200 ns per context token, within 10%.
    assert!(
        (slope_us - 0.2).abs() < 0.02,
        "slope {slope_us} us per token:\n{text}"
    );
    let finding = text
        .lines()
        .find(|l| l.contains("context-dependent part runs at"))
        .unwrap();
    let gb_s: f64 = finding
        .split("runs at ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!((gb_s - 655.36).abs() < 65.5, "{gb_s} GB/s:\n{text}");
    assert!(finding.contains("% of peak): below bandwidth"), "{finding}");
    // The 2 ms fixed part reads Llama's 15 GB of weights at 4.48 / 2.0 = 224% of peak: faster
    // than the floor, and said so.
    assert!(
        text.contains("the model facts, the layout or the GPU entry are wrong"),
        "{text}"
    );

    // Nonsense layout figures are refused, not clamped, each naming what is wrong.
    for (args, says) in [
        (["--tokens-per-step", "0"], "from 1 to 256 tokens"),
        (["--tokens-per-step", "1e308"], "from 1 to 256 tokens"),
        (["--tp", "0"], "at least 1"),
        (
            ["--tp", "1000000"],
            "tp 1000000: GPUs are counted from 1 to 4096",
        ),
        (["--tp", "64"], "more than the model's 32 attention heads"),
        (
            ["--pp", "1000"],
            "pipeline parallelism 1000 is more than the model's 32 layers",
        ),
        (
            ["--kv-cache-dtype", "banana"],
            "the KV cache dtype `banana` is not known: one of auto, bf16",
        ),
    ] {
        let out = servebench()
            .args([
                "bound",
                dir.to_str().unwrap(),
                "--model-config",
                config.to_str().unwrap(),
                "--gpu",
                "h100-sxm",
            ])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // A model config no model has names its field, and nothing is allocated from it.
    let huge = ws.write(
        "huge.json",
        &std::fs::read_to_string(&config).unwrap().replace(
            "\"num_hidden_layers\": 32",
            "\"num_hidden_layers\": 1000000000000",
        ),
    );
    let out = servebench()
        .args(["bound", dir.to_str().unwrap(), "--model-config"])
        .arg(&huge)
        .args(["--gpu", "h100-sxm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("huge.json: the config's `num_hidden_layers` is 1000000000000: a whole number from 1 to 1024 is needed"),
        "{err}"
    );
    // nvidia-smi's names match exactly: the L40 is not the L4.
    let out = servebench()
        .args(["bound", dir.to_str().unwrap(), "--model-config"])
        .arg(&config)
        .args(["--gpu", "NVIDIA L40"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`NVIDIA L40` is not in the GPU catalogue"),
        "{}",
        show(&out)
    );

    // The same sweep at sim-time-scale 2 (every step twice as long) grades the model's steps.
    let scaled = ws.write(
        "bound2.yaml",
        &std::fs::read_to_string(&spec)
            .unwrap()
            .replace(
                "context-length: 65536 }",
                "context-length: 65536, sim-time-scale: 2 }",
            )
            .replace("name: bound", "name: bound2"),
    );
    let (dir2, _) = ws.run_ok(&scaled);
    let out = servebench()
        .args([
            "bound",
            dir2.to_str().unwrap(),
            "--model-config",
            config.to_str().unwrap(),
            "--gpu",
            "h100-sxm",
        ])
        .output()
        .unwrap();
    let text2 = String::from_utf8_lossy(&out.stdout);
    assert!(
        text2.contains(
            "assumed: the simulator ran at sim-time-scale 2: measured steps are divided by 2"
        ),
        "{text2}"
    );
    let line = text2
        .lines()
        .find(|l| l.starts_with("At batch 1, over 5 contexts"))
        .unwrap_or_else(|| panic!("{text2}"));
    let slope_us: f64 = line
        .split(" ms + ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (slope_us - 0.2).abs() < 0.02,
        "scaled slope {slope_us} us per token:\n{text2}"
    );

    // A GPU the catalogue lacks is a usage error naming the choices.
    let out = servebench()
        .args([
            "bound",
            dir.to_str().unwrap(),
            "--model-config",
            config.to_str().unwrap(),
            "--gpu",
            "Tesla T4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("`Tesla T4` is not in the GPU catalogue: use one of")
    );
}

#[test]
fn bound_refuses_a_model_config_that_is_not_a_small_regular_file_at_once() {
    let ws = Workspace::new();
    let run_dir = ws.path().join("no-run");
    let bound = |config: &Path| {
        servebench()
            .args([
                "bound",
                run_dir.to_str().unwrap(),
                "--model-config",
                config.to_str().unwrap(),
            ])
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap()
    };
    // A FIFO nobody writes to would block a plain open for ever.
    let fifo = ws.path().join("config.json");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let out = bound(&fifo);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("config.json: a FIFO (named pipe), not a regular file"),
        "{err}"
    );
    // Past the 4 MiB budget: refused by its size, not read.
    let big = ws.path().join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 * 1024 * 1024 + 1)
        .unwrap();
    let out = bound(&big);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("4194305 bytes; a config.json is read up to 4194304 bytes"),
        "{err}"
    );
}

/// Every shipped simulator profile that says what it models (`facts:`) is physical: at batch
/// 1, no decode step at any context up to its context length is shorter than the bytes it
/// must read per GPU (the roofline's, at the profile's verify width under speculation) over the
/// GPU's peak bandwidth. The Kimi profile's fitted line (0.2 ms + 17.8 us x context) was under
/// its floor below about 400 tokens.
#[test]
fn every_shipped_profile_with_facts_is_never_faster_than_its_floor() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/sim/profiles");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let profile = sim::Profile::load(path.to_str().unwrap()).unwrap();
        let Some(facts) = &profile.facts else {
            continue;
        };
        let model = roofline::ModelFacts::from_hf_config(&serde_json::Value::Object(
            facts.model_config.clone(),
        ))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let gpu = roofline::gpu::find(&facts.gpu).unwrap();
        let layout = roofline::step::Layout {
            tp: facts.tp,
            ..Default::default()
        };
        layout.check(&model).unwrap();
        let spec = profile.speculative.as_ref().filter(|s| s.enabled);
        let verify = spec.map_or(1.0, |s| f64::from(s.num_draft_tokens));
        let overhead = spec.map_or(0.0, |s| s.verify_overhead_ms(1));
        let mut ctx = 0u64;
        while ctx <= profile.context_length {
            let step = roofline::step::decode_step(&model, &layout, 1.0, ctx as f64, verify);
            let floor_s = step.bytes() / gpu.bandwidth();
            let step_s = profile.decode_time(1, ctx, overhead).as_secs_f64() / profile.time_scale;
            assert!(
                step_s >= floor_s,
                "{}: at {ctx} tokens of context a step takes {:.3} ms, under its floor of {:.3} ms",
                path.display(),
                step_s * 1e3,
                floor_s * 1e3
            );
            ctx += 64;
        }
        checked.push(profile.name.clone());
    }
    checked.sort();
    assert_eq!(
        checked,
        ["h100-llama8b", "kimi-k2.6-8x-rtxpro6000", "l4-qwen2.5-0.5b"],
        "the profiles that say what they model"
    );
}
