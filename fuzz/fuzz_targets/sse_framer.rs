#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| servebench_fuzz::sse_framer(data));
