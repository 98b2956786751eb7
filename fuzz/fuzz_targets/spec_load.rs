#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| servebench_fuzz::spec_load(data));
