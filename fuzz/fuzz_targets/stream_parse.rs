#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| servebench_fuzz::stream_parse(data));
