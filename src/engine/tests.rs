use super::*;

fn server(engine: &str, args: &[(&str, ArgValue)]) -> Server {
    let yaml = format!("engine: {engine}\nmodel: m\n");
    let mut s: Server = serde_saphyr::from_str(&yaml).unwrap();
    s.args = args
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    s
}

#[test]
fn flags_follow_sglang_conventions() {
    let s = server(
        "sglang",
        &[
            ("tp-size", ArgValue::Int(8)),
            ("mem-fraction-static", ArgValue::Float(0.93)),
            ("enable-metrics", ArgValue::Bool(true)),
            ("disable-radix-cache", ArgValue::Bool(false)),
            ("attention-backend", ArgValue::Str("fa3".into())),
        ],
    );
    let c = launch_command(&s, "/bin/servebench", 30001).unwrap();
    assert_eq!(c.program, "python");
    assert_eq!(
        c.args.join(" "),
        "-m sglang.launch_server --model-path m --host 127.0.0.1 --port 30001 --tp-size 8 \
         --mem-fraction-static 0.93 --enable-metrics --attention-backend fa3"
    );
}

#[test]
fn vllm_takes_the_model_positionally_and_false_as_no_flag() {
    let s = server(
        "vllm",
        &[
            ("max-model-len", ArgValue::Int(32768)),
            ("enable-prefix-caching", ArgValue::Bool(false)),
            ("-tp", ArgValue::Int(2)),
        ],
    );
    let c = launch_command(&s, "/bin/servebench", 8001).unwrap();
    assert_eq!(
        c.argv().join(" "),
        "vllm serve m --host 127.0.0.1 --port 8001 --max-model-len 32768 \
         --no-enable-prefix-caching -tp 2"
    );
}

#[test]
fn llama_cpp_takes_dash_m_and_short_flags_verbatim() {
    let s = server(
        "llama.cpp",
        &[
            ("-np", ArgValue::Int(4)),
            ("ctx-size", ArgValue::Int(8192)),
            ("kv-unified", ArgValue::Bool(true)),
        ],
    );
    let c = launch_command(&s, "/bin/servebench", 8081).unwrap();
    assert_eq!(
        c.argv().join(" "),
        "llama-server -m m --host 127.0.0.1 --port 8081 -np 4 --ctx-size 8192 --kv-unified"
    );
}

#[test]
fn simulate_runs_the_simulator_in_the_engines_mode() {
    let mut s = server("vllm", &[("max-model-len", ArgValue::Int(4096))]);
    s.simulate = true;
    let c = launch_command(&s, "/bin/servebench", 9).unwrap();
    assert_eq!(
        c.argv().join(" "),
        "/bin/servebench sim --api vllm m --host 127.0.0.1 --port 9 --max-model-len 4096"
    );
    // The plain simulator speaks SGLang.
    let c = launch_command(&server("sim", &[]), "/bin/servebench", 9).unwrap();
    assert_eq!(
        c.argv().join(" "),
        "/bin/servebench sim --model-path m --host 127.0.0.1 --port 9"
    );
}

#[test]
fn a_command_is_a_template() {
    let mut s = server("command", &[("max-batch", ArgValue::Int(8))]);
    s.launcher = Some(vec![
        "text-generation-launcher".into(),
        "--model-id".into(),
        "{model}".into(),
        "--port={port}".into(),
        "--hostname".into(),
        "{host}".into(),
    ]);
    let c = launch_command(&s, "x", 7).unwrap();
    assert_eq!(
        c.argv().join(" "),
        "text-generation-launcher --model-id m --port=7 --hostname 127.0.0.1 --max-batch 8"
    );
    s.launcher = Some(vec!["my-server".into()]);
    assert_eq!(
        launch_command(&s, "x", 7).unwrap_err(),
        LaunchError::NoPortPlaceholder
    );
}

#[test]
fn engine_args_are_merged_for_their_engine_only() {
    let yaml = "engine: vllm\nmodel: m\nargs: { max-model-len: 4096 }\nengine_args:\n  vllm: { gpu-memory-utilization: 0.8 }\n  sglang: { mem-fraction-static: 0.8 }\n";
    let s: Server = serde_saphyr::from_str(yaml).unwrap();
    let c = launch_command(&s, "x", 1).unwrap();
    assert_eq!(
        c.args[4..].join(" "),
        "--port 1 --max-model-len 4096 --gpu-memory-utilization 0.8"
    );
}

#[test]
fn hostile_values_stay_single_arguments() {
    let s = server(
        "sglang",
        &[(
            "served-model-name",
            ArgValue::Str("a b; $(rm -rf /)".into()),
        )],
    );
    let c = launch_command(&s, "x", 1).unwrap();
    assert_eq!(c.args.last().unwrap(), "a b; $(rm -rf /)");
}

#[test]
fn reserved_and_bad_flags_are_refused() {
    let s = server("sglang", &[("port", ArgValue::Int(1))]);
    assert!(
        launch_command(&s, "x", 1)
            .unwrap_err()
            .to_string()
            .contains("server.port")
    );
    let s = server("llama.cpp", &[("m", ArgValue::Str("x".into()))]);
    assert!(launch_command(&s, "x", 1).is_err());
    let s = server("sglang", &[("chunked-prefill-size ", ArgValue::Int(1))]);
    assert_eq!(
        launch_command(&s, "x", 1).unwrap_err(),
        LaunchError::BadFlagName("chunked-prefill-size ".into())
    );
}

#[test]
fn crash_causes_by_engine() {
    assert_eq!(
        classify(
            Engine::Sglang,
            "Scheduler hit an exception: Traceback\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB"
        ),
        Failure::OutOfMemory
    );
    assert_eq!(
        classify(
            Engine::Sglang,
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
        ),
        Failure::KvPoolTooSmall
    );
    assert_eq!(
        classify(Engine::Sglang, "OSError: [Errno 98] Address already in use"),
        Failure::PortInUse
    );
    assert_eq!(
        classify(
            Engine::Vllm,
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
        ),
        Failure::KvPoolTooSmall
    );
    assert_eq!(
        classify(
            Engine::Vllm,
            "ValueError: Invalid repository ID or local directory specified: 'nope'."
        ),
        Failure::ModelNotFound
    );
    assert_eq!(
        classify(
            Engine::LlamaCpp,
            "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\nsrv    load_model: failed to load model, '/m.gguf'"
        ),
        Failure::KvPoolTooSmall
    );
    assert_eq!(
        classify(
            Engine::LlamaCpp,
            "gguf_init_from_file: failed to open GGUF file '/nope.gguf'\nsrv    load_model: failed to load model"
        ),
        Failure::ModelNotFound
    );
    assert_eq!(
        classify(
            Engine::LlamaCpp,
            "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080"
        ),
        Failure::PortInUse
    );
    assert_eq!(classify(Engine::Vllm, "bye"), Failure::Unknown);
    assert!(explain(Engine::Vllm, Failure::OutOfMemory).contains("--gpu-memory-utilization"));
    assert!(explain(Engine::LlamaCpp, Failure::KvPoolTooSmall).contains("--ctx-size"));
}

#[test]
fn flags_are_checked_per_engine() {
    assert_eq!(check_flag(Engine::Vllm, "max-model-len"), FlagCheck::Known);
    assert_eq!(check_flag(Engine::Vllm, "max_model_len"), FlagCheck::Known);
    assert_eq!(
        check_flag(Engine::Vllm, "no-enable-prefix-caching"),
        FlagCheck::Known
    );
    assert_eq!(
        check_flag(Engine::Vllm, "disable-prefix-caching"),
        FlagCheck::Known
    );
    assert_eq!(check_flag(Engine::Vllm, "-tp"), FlagCheck::Known);
    assert!(matches!(
        check_flag(Engine::Vllm, "max-model-lenght"),
        FlagCheck::Typo { suggestion, .. } if suggestion == "max-model-len"
    ));
    assert!(matches!(
        check_flag(Engine::Vllm, "some-flag-from-the-future"),
        FlagCheck::Unlisted { .. }
    ));
    assert_eq!(
        check_flag(Engine::Sglang, "mem-fraction-static"),
        FlagCheck::Known
    );
    assert!(matches!(
        check_flag(Engine::Sglang, "mem-fraction-statik"),
        FlagCheck::Typo { suggestion, .. } if suggestion == "mem-fraction-static"
    ));
    assert_eq!(check_flag(Engine::LlamaCpp, "-np"), FlagCheck::Known);
    assert_eq!(check_flag(Engine::LlamaCpp, "ctx-size"), FlagCheck::Known);
    assert_eq!(check_flag(Engine::Command, "anything"), FlagCheck::Known);
}

#[test]
fn ready_lines_by_engine() {
    let s = server("vllm", &[]);
    assert!(is_ready_line(
        &s,
        "(APIServer pid=1) INFO:     Application startup complete."
    ));
    assert!(!is_ready_line(
        &s,
        "The server is fired up and ready to roll!"
    ));
    let mut c = server("command", &[]);
    assert!(!is_ready_line(&c, "Listening"));
    c.ready_line = Some("Listening".into());
    assert!(is_ready_line(&c, "... Listening on 8000"));
}

/// Each list says which engine version it is from, and the flags that version has or refuses
/// (issue 18 items 9 and 21).
#[test]
fn flag_lists_follow_the_engine_versions_they_name() {
    let ambiguous = |e, f| matches!(check_flag(e, f), FlagCheck::Ambiguous { candidates, .. } if candidates.len() > 1);
    assert!(ambiguous(Engine::Sglang, "pp"));
    assert!(ambiguous(Engine::Sglang, "cuda-graph-max-bs"));
    assert!(ambiguous(Engine::Sim, "pp"));
    for known in [
        "tp",
        "tp-size",
        "tensor-parallel-size",
        "ep",
        "dp",
        "cuda-graph-max-bs-decode",
        "model",
    ] {
        assert_eq!(
            check_flag(Engine::Sglang, known),
            FlagCheck::Known,
            "{known}"
        );
    }
    assert!(!matches!(
        check_flag(Engine::Sglang, "stream-output"),
        FlagCheck::Known
    ));
    // llama.cpp has no prefix matching, and its list is the whole build's.
    assert_eq!(
        check_flag(Engine::LlamaCpp, "slot-save-path"),
        FlagCheck::Known
    );
    assert_eq!(check_flag(Engine::LlamaCpp, "no-slots"), FlagCheck::Known);
    assert_eq!(check_flag(Engine::LlamaCpp, "load-mode"), FlagCheck::Known);
    assert_eq!(check_flag(Engine::LlamaCpp, "-kvu"), FlagCheck::Known);
    for gone in ["mlock", "no-mmap", "slot-save"] {
        assert!(
            !matches!(check_flag(Engine::LlamaCpp, gone), FlagCheck::Known),
            "{gone}"
        );
    }
    let names = |list: &str| {
        list.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count()
    };
    let llama = adapter(Engine::LlamaCpp).flags.unwrap();
    assert!(names(llama.0) >= 400, "{}", names(llama.0));
    assert!(llama.1.contains("0.3.36"), "{}", llama.1);
    assert!(adapter(Engine::Sglang).flags.unwrap().1.contains("0.5.23"));
    assert!(adapter(Engine::Vllm).flags.unwrap().1.contains("0.34"));
    // vLLM 0.34's new flags are known (issue 35 item 14).
    for new in [
        "cache-aware-admission-window",
        "checkpoint-prepare-on-startup",
        "max-num-inflight-kv-loads",
        "shuffle-safetensors-files",
    ] {
        assert_eq!(check_flag(Engine::Vllm, new), FlagCheck::Known, "{new}");
    }
    for (_, (list, _)) in
        [Engine::Sglang, Engine::Vllm, Engine::LlamaCpp].map(|e| (e, adapter(e).flags.unwrap()))
    {
        let header: String = list.lines().take_while(|l| l.starts_with('#')).collect();
        assert!(header.contains("from"), "{header}");
    }
}
