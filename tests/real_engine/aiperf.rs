//! AIPerf 0.13's own pydantic models (`MetricRecordInfo`, `JsonExportData`), metric registry
//! and JSONL loader read servebench's AIPerf export of real simulator runs
//! (`scripts/aiperf/validate_export.py`, in the tier's `aiperf-venv`).

use std::process::Command;

use super::*;
use crate::common::*;
use crate::export::exported_runs;

#[test]
fn aiperf_s_own_models_load_servebench_s_aiperf_export() {
    let Some(tier) = tier(Part::Aiperf) else {
        return;
    };
    let ws = Workspace::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/aiperf/validate_export.py");
    for dir in exported_runs(&ws) {
        let folders: Vec<PathBuf> = std::fs::read_dir(dir.join("export/aiperf"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(!folders.is_empty());
        let out = Command::new(tier.aiperf_python())
            .arg(&script)
            .args(&folders)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("aiperf 0.13.0"), "{text}");
        assert_eq!(
            text.matches("aggregate ok").count(),
            folders.len(),
            "{text}"
        );
    }
}
