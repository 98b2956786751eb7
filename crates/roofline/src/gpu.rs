//! GPUs by their datasheets: peak memory bandwidth and dense tensor FLOP/s per precision.
//!
//! Every figure is the vendor's, for one GPU, **without sparsity** (datasheets print the 2:4
//! sparse figure first; it is halved here) and where a system datasheet gives only the
//! system's figure, divided by its GPUs. `source` names the document and says when a figure is
//! derived rather than printed. A spec can override any of them (`hardware:`), for a card
//! clocked or configured differently.

use std::sync::LazyLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A precision the tensor cores compute in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    Bf16,
    Fp8,
    Fp4,
}

/// One GPU's peak figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Short name (`h100-sxm`).
    pub id: String,
    /// The marketing name.
    pub name: String,
    /// Memory per GPU, GB (10^9 bytes).
    pub memory_gb: f64,
    /// Peak memory bandwidth, GB/s (10^9 bytes per second).
    pub bandwidth_gb_s: f64,
    /// Dense BF16/FP16 tensor TFLOP/s.
    pub bf16_tflops: f64,
    /// Dense FP8 tensor TFLOP/s; None where the GPU has no FP8 tensor cores.
    #[serde(default)]
    pub fp8_tflops: Option<f64>,
    /// Dense FP4 tensor TFLOP/s; None where it has none.
    #[serde(default)]
    pub fp4_tflops: Option<f64>,
    /// Where the figures come from.
    pub source: String,
}

impl GpuSpec {
    /// Peak dense FLOP/s at `precision`, falling back to the next wider precision the GPU has.
    pub fn peak_flops(&self, precision: Precision) -> f64 {
        let tflops = match precision {
            Precision::Fp4 => self
                .fp4_tflops
                .or(self.fp8_tflops)
                .unwrap_or(self.bf16_tflops),
            Precision::Fp8 => self.fp8_tflops.unwrap_or(self.bf16_tflops),
            Precision::Bf16 => self.bf16_tflops,
        };
        tflops * 1e12
    }

    /// Peak bandwidth, bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.bandwidth_gb_s * 1e9
    }
}

/// Names as `nvidia-smi --query-gpu=name` and `amd-smi` print them, lowercased: a GPU's name
/// must be one of them exactly (spaces collapsed), so `NVIDIA L40` is not taken for the L4 nor
/// `NVIDIA H100 PCIe` for the SXM part.
struct Entry {
    names: &'static [&'static str],
    spec: fn() -> GpuSpec,
}

#[allow(clippy::too_many_arguments)]
fn spec(
    id: &str,
    name: &str,
    memory_gb: f64,
    bandwidth_gb_s: f64,
    bf16: f64,
    fp8: Option<f64>,
    fp4: Option<f64>,
    source: &str,
) -> GpuSpec {
    GpuSpec {
        id: id.into(),
        name: name.into(),
        memory_gb,
        bandwidth_gb_s,
        bf16_tflops: bf16,
        fp8_tflops: fp8,
        fp4_tflops: fp4,
        source: source.into(),
    }
}

const H100_DS: &str = "NVIDIA H100 Tensor Core GPU datasheet (sparse figures halved)";
const H200_DS: &str = "NVIDIA H200 Tensor Core GPU datasheet (sparse figures halved)";
const A100_DS: &str = "NVIDIA A100 Tensor Core GPU datasheet (dense figures)";

static ENTRIES: &[Entry] = &[
    Entry {
        names: &["nvidia gb200"],
        spec: || {
            spec(
                "gb200",
                "NVIDIA GB200 (one Blackwell GPU)",
                186.0,
                8000.0,
                2500.0,
                Some(5000.0),
                Some(10000.0),
                "NVIDIA GB200 NVL72 datasheet: system figures / 72 GPUs, sparse figures halved",
            )
        },
    },
    Entry {
        names: &["nvidia b200"],
        spec: || {
            spec(
                "b200",
                "NVIDIA B200",
                180.0,
                8000.0,
                2250.0,
                Some(4500.0),
                Some(9000.0),
                "NVIDIA HGX B200 datasheet: 8-GPU figures / 8, sparse figures halved",
            )
        },
    },
    Entry {
        names: &[
            "nvidia gh200 480gb",
            "nvidia gh200 144g hbm3e",
            "nvidia gh200",
        ],
        spec: || {
            spec(
                "gh200",
                "NVIDIA GH200 (H100 96 GB)",
                96.0,
                4000.0,
                989.5,
                Some(1979.0),
                None,
                "NVIDIA GH200 Grace Hopper Superchip datasheet (sparse figures halved)",
            )
        },
    },
    Entry {
        names: &["nvidia h200 nvl"],
        spec: || {
            spec(
                "h200-nvl",
                "NVIDIA H200 NVL",
                141.0,
                4800.0,
                835.5,
                Some(1671.0),
                None,
                H200_DS,
            )
        },
    },
    Entry {
        names: &["nvidia h200", "nvidia h200 141gb hbm3e"],
        spec: || {
            spec(
                "h200",
                "NVIDIA H200 SXM",
                141.0,
                4800.0,
                989.5,
                Some(1979.0),
                None,
                H200_DS,
            )
        },
    },
    Entry {
        names: &["nvidia h100 nvl"],
        spec: || {
            spec(
                "h100-nvl",
                "NVIDIA H100 NVL",
                94.0,
                3900.0,
                835.5,
                Some(1671.0),
                None,
                H100_DS,
            )
        },
    },
    Entry {
        names: &["nvidia h100 pcie"],
        spec: || {
            spec(
                "h100-pcie",
                "NVIDIA H100 PCIe",
                80.0,
                2000.0,
                756.5,
                Some(1513.0),
                None,
                H100_DS,
            )
        },
    },
    Entry {
        names: &[
            "nvidia h100 80gb hbm3",
            "nvidia h100 sxm5 80gb",
            "nvidia h100",
        ],
        spec: || {
            spec(
                "h100-sxm",
                "NVIDIA H100 SXM",
                80.0,
                3350.0,
                989.5,
                Some(1979.0),
                None,
                H100_DS,
            )
        },
    },
    Entry {
        names: &["nvidia a100-sxm4-80gb"],
        spec: || {
            spec(
                "a100-sxm-80gb",
                "NVIDIA A100 SXM 80GB",
                80.0,
                2039.0,
                312.0,
                None,
                None,
                A100_DS,
            )
        },
    },
    Entry {
        names: &["nvidia a100 80gb pcie", "nvidia a100-pcie-80gb"],
        spec: || {
            spec(
                "a100-pcie-80gb",
                "NVIDIA A100 PCIe 80GB",
                80.0,
                1935.0,
                312.0,
                None,
                None,
                A100_DS,
            )
        },
    },
    Entry {
        names: &["nvidia a100-sxm4-40gb"],
        spec: || {
            spec(
                "a100-sxm-40gb",
                "NVIDIA A100 SXM 40GB",
                40.0,
                1555.0,
                312.0,
                None,
                None,
                A100_DS,
            )
        },
    },
    Entry {
        names: &["nvidia a100-pcie-40gb", "nvidia a100 pcie 40gb"],
        spec: || {
            spec(
                "a100-pcie-40gb",
                "NVIDIA A100 PCIe 40GB",
                40.0,
                1555.0,
                312.0,
                None,
                None,
                A100_DS,
            )
        },
    },
    Entry {
        names: &["nvidia l40s"],
        spec: || {
            spec(
                "l40s",
                "NVIDIA L40S",
                48.0,
                864.0,
                362.05,
                Some(733.0),
                None,
                "NVIDIA L40S datasheet (sparse figures halved)",
            )
        },
    },
    Entry {
        names: &["nvidia l4"],
        spec: || {
            spec(
                "l4",
                "NVIDIA L4",
                24.0,
                300.0,
                121.0,
                Some(242.5),
                None,
                "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved)",
            )
        },
    },
    Entry {
        names: &["nvidia rtx pro 6000 blackwell max-q workstation edition"],
        spec: || {
            spec(
                "rtx-pro-6000-maxq",
                "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                96.0,
                1792.0,
                438.9,
                Some(877.8),
                Some(1755.5),
                "NVIDIA RTX PRO 6000 Blackwell Max-Q datasheet: 3,511 AI TOPS (FP4, sparse); FP4 dense is half, FP8 a quarter and BF16 an eighth (derived)",
            )
        },
    },
    Entry {
        names: &[
            "nvidia rtx pro 6000 blackwell server edition",
            "nvidia rtx pro 6000 blackwell workstation edition",
        ],
        spec: || {
            spec(
                "rtx-pro-6000",
                "NVIDIA RTX PRO 6000 Blackwell (Server / Workstation Edition)",
                96.0,
                1792.0,
                500.0,
                Some(1000.0),
                Some(2000.0),
                "NVIDIA RTX PRO 6000 Blackwell datasheet: 1,792 GB/s, 4,000 AI TOPS (FP4, sparse); FP4 dense is half, FP8 a quarter and BF16 an eighth (derived)",
            )
        },
    },
    Entry {
        names: &["amd instinct mi325x"],
        spec: || {
            spec(
                "mi325x",
                "AMD Instinct MI325X",
                256.0,
                6000.0,
                1307.4,
                Some(2614.9),
                None,
                "AMD Instinct MI325X datasheet (dense figures)",
            )
        },
    },
    Entry {
        names: &["amd instinct mi300x"],
        spec: || {
            spec(
                "mi300x",
                "AMD Instinct MI300X",
                192.0,
                5300.0,
                1307.4,
                Some(2614.9),
                None,
                "AMD Instinct MI300X datasheet (dense figures)",
            )
        },
    },
];

static CATALOGUE: LazyLock<Vec<GpuSpec>> =
    LazyLock::new(|| ENTRIES.iter().map(|e| (e.spec)()).collect());

/// Every GPU the catalogue knows.
pub fn catalogue() -> &'static [GpuSpec] {
    &CATALOGUE
}

/// The catalogue's entry for a GPU named exactly as `nvidia-smi` or `amd-smi` print it
/// (`NVIDIA H100 80GB HBM3`, `NVIDIA RTX PRO 6000 Blackwell Server Edition`; case and runs of
/// spaces aside), or by its `id`; None for any other name.
pub fn find(name: &str) -> Option<&'static GpuSpec> {
    let lower = name
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase();
    if let Some(s) = catalogue().iter().find(|s| s.id == lower) {
        return Some(s);
    }
    ENTRIES
        .iter()
        .zip(catalogue())
        .find(|(e, _)| e.names.contains(&lower.as_str()))
        .map(|(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_names_find_their_entries() {
        let id = |n: &str| find(n).map(|s| s.id.as_str());
        assert_eq!(id("NVIDIA H100 80GB HBM3"), Some("h100-sxm"));
        assert_eq!(id("NVIDIA H100 PCIe"), Some("h100-pcie"));
        assert_eq!(id("NVIDIA H100 NVL"), Some("h100-nvl"));
        assert_eq!(id("NVIDIA H200"), Some("h200"));
        assert_eq!(id("NVIDIA B200"), Some("b200"));
        assert_eq!(id("NVIDIA GB200"), Some("gb200"));
        assert_eq!(id("NVIDIA A100-SXM4-80GB"), Some("a100-sxm-80gb"));
        assert_eq!(id("NVIDIA A100-SXM4-40GB"), Some("a100-sxm-40gb"));
        assert_eq!(id("NVIDIA A100 80GB PCIe"), Some("a100-pcie-80gb"));
        assert_eq!(id("NVIDIA L4"), Some("l4"));
        assert_eq!(id("NVIDIA L40S"), Some("l40s"));
        assert_eq!(
            id("NVIDIA RTX PRO 6000 Blackwell Server Edition"),
            Some("rtx-pro-6000")
        );
        assert_eq!(
            id("NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
            Some("rtx-pro-6000")
        );
        assert_eq!(
            id("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"),
            Some("rtx-pro-6000-maxq")
        );
        assert_eq!(id("AMD Instinct MI300X"), Some("mi300x"));
        assert_eq!(id("h200"), Some("h200"));
        assert_eq!(id("Tesla T4"), None);
        // Exact names only: a name that contains another entry's is not that entry.
        assert_eq!(id("NVIDIA L40"), None);
        assert_eq!(id("NVIDIA L4"), Some("l4"));
        assert_eq!(id("NVIDIA H100 PCIe 96GB"), None);
        assert_eq!(id("NVIDIA H800"), None);
        assert_eq!(id("  nvidia   h100 80gb hbm3 "), Some("h100-sxm"));
    }

    #[test]
    fn every_entry_is_whole_and_sourced() {
        for s in catalogue() {
            assert!(
                s.bandwidth_gb_s > 100.0 && s.bf16_tflops > 50.0 && s.memory_gb >= 16.0,
                "{s:?}"
            );
            assert!(!s.source.is_empty());
            // Lower precisions are never slower than wider ones.
            if let Some(f8) = s.fp8_tflops {
                assert!(f8 >= s.bf16_tflops);
            }
            assert!(catalogue().iter().filter(|o| o.id == s.id).count() == 1);
        }
    }
}
