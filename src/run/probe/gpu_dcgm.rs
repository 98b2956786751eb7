//! A DCGM exporter's `/metrics` read as one reading per GPU: the exporter writes one
//! Prometheus series per GPU and field (`DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-...",
//! modelName="NVIDIA H200",Hostname="node-1"} 612.5`), and each field it exports becomes the
//! reading's field nvidia-smi would fill. A field it does not export (its default counters
//! leave out the total memory, the power limit and the clock event reasons) stays absent,
//! as do DCGM's "blank" values (a field the GPU does not support).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::client::Client;

use super::gpu_error::DcgmError;
use crate::client::prometheus::{self, Series};
use servebench_model::results::gpu::GpuReading;

/// The most GPUs one scrape gives.
const MAX_GPUS: usize = 256;
/// The most series kept from one scrape (the fields below for every GPU, and MIG instances).
const MAX_SERIES: usize = 16 * 1024;
/// DCGM writes a field it has no value for as a large sentinel (`DCGM_INT32_BLANK`,
/// 0x7ffffff0, and the 64-bit and float ones above it); no reading mapped here comes near.
const BLANK: f64 = 2_147_483_632.0;

/// The fields read, each into its place in a reading.
const FIELDS: &[(&str, Field)] = &[
    ("DCGM_FI_DEV_FB_USED", Field::MemoryUsed),
    ("DCGM_FI_DEV_FB_FREE", Field::MemoryFree),
    ("DCGM_FI_DEV_FB_TOTAL", Field::MemoryTotal),
    ("DCGM_FI_DEV_SM_CLOCK", Field::SmClock),
    ("DCGM_FI_DEV_MEM_CLOCK", Field::MemClock),
    ("DCGM_FI_DEV_GPU_UTIL", Field::Util),
    ("DCGM_FI_DEV_POWER_USAGE", Field::Power),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", Field::PowerLimit),
    ("DCGM_FI_DEV_GPU_TEMP", Field::Temp),
    // The same NVML bitmask as nvidia-smi's clocks_event_reasons, under its newer and older
    // names.
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", Field::Throttle),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", Field::Throttle),
];

#[derive(Debug, Clone, Copy)]
enum Field {
    MemoryUsed,
    MemoryFree,
    MemoryTotal,
    SmClock,
    MemClock,
    Util,
    Power,
    PowerLimit,
    Temp,
    Throttle,
}

/// The exporter `telemetry.dcgm_url` names.
pub(crate) struct DcgmExporter {
    client: Client,
    /// The path (and query) read, `/metrics` when the URL has none.
    path: String,
    /// The URL as given, for messages (`Client::new` refuses credentials in it).
    url: String,
    /// `host:port`, where the GPUs are.
    host: String,
}

impl DcgmExporter {
    /// The exporter at `url` (`http://host:port[/path]`); Err says why it cannot be read.
    pub(crate) fn new(url: &str) -> Result<DcgmExporter, DcgmError> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| DcgmError::NotAUrl(e.to_string()))?;
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or(DcgmError::NoHost)?;
        let scheme = uri.scheme_str().ok_or(DcgmError::NotAbsolute)?;
        let client =
            Client::new(&format!("{scheme}://{authority}"), None).map_err(DcgmError::Unusable)?;
        let path = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("" | "/") => "/metrics".to_string(),
            Some(p) => p.to_string(),
        };
        Ok(DcgmExporter {
            client,
            path,
            url: url.to_string(),
            host: authority,
        })
    }

    /// Where the GPUs are: the exporter's `host:port`.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// One scrape, every GPU it lists; Err says what failed (the exporter did not answer,
    /// answered another status, sent something else, or listed no GPU).
    pub(crate) async fn read(&self, timeout: Duration) -> Result<Vec<GpuReading>, DcgmError> {
        let url = || self.url.clone();
        let text = prometheus::fetch(&self.client, &self.path, timeout)
            .await
            .map_err(|e| DcgmError::NoAnswer {
                url: url(),
                why: e.to_string(),
            })?;
        let gpus = readings(&text).map_err(|e| DcgmError::NoMetrics {
            url: url(),
            why: e.to_string(),
        })?;
        if gpus.is_empty() {
            return Err(DcgmError::NoGpu { url: url() });
        }
        Ok(gpus)
    }
}

/// The GPUs of one scrape's text, in index order.
pub(crate) fn readings(text: &str) -> Result<Vec<GpuReading>, prometheus::ScrapeError> {
    let series = prometheus::series(text, |n| field(n).is_some(), MAX_SERIES)?;
    let mut gpus: BTreeMap<u32, GpuReading> = BTreeMap::new();
    for s in &series {
        let (Some(f), Some(index)) = (
            field(&s.name),
            s.label("gpu").and_then(|g| g.parse::<u32>().ok()),
        ) else {
            continue;
        };
        if !gpus.contains_key(&index) && gpus.len() >= MAX_GPUS {
            continue;
        }
        let r = gpus.entry(index).or_insert_with(|| GpuReading {
            index,
            ..GpuReading::default()
        });
        put(r, f, s);
    }
    Ok(gpus.into_values().collect())
}

fn field(name: &str) -> Option<Field> {
    FIELDS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// Fills `f` from `s` unless it is already filled (a MIG instance's series repeats its GPU's
/// device fields: the first is kept).
fn put(r: &mut GpuReading, f: Field, s: &Series) {
    if r.uuid.is_none() {
        r.uuid = s
            .label("UUID")
            .filter(|u| !u.is_empty())
            .map(str::to_string);
    }
    if r.name.is_none() {
        r.name = s
            .label("modelName")
            .filter(|u| !u.is_empty())
            .map(str::to_string);
    }
    let v = Some(s.value).filter(|v| v.is_finite() && *v >= 0.0 && *v < BLANK);
    let slot = match f {
        Field::MemoryUsed => &mut r.memory_used_mib,
        Field::MemoryFree => &mut r.memory_free_mib,
        Field::MemoryTotal => &mut r.memory_total_mib,
        Field::SmClock => &mut r.sm_mhz,
        Field::MemClock => &mut r.mem_mhz,
        Field::Util => &mut r.util_pct,
        Field::Power => &mut r.power_w,
        Field::PowerLimit => &mut r.power_limit_w,
        Field::Temp => &mut r.temp_c,
        Field::Throttle => {
            if r.throttle.is_none() {
                r.throttle = v.map(|v| v as u64);
            }
            return;
        }
    };
    if slot.is_none() {
        *slot = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape dcgm-exporter 3.x/4.x writes with its default counters
    /// (etc/default-counters.csv): HELP and TYPE lines, the labels `gpu`, `UUID`,
    /// `pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, fields it
    /// reads beside those mapped, and a blank memory temperature.
    const SCRAPE: &str = r#"# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3",pci_bus_id="00000000:0D:00.0",device="nvidia0",modelName="NVIDIA H200",Hostname="node-1",DCGM_FI_DRIVER_VERSION="570.124.06"} 1980
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-72ad4d20-cfed-f08d-c894-f620962ca3e4",pci_bus_id="00000000:B4:00.0",device="nvidia1",modelName="NVIDIA H200",Hostname="node-1",DCGM_FI_DRIVER_VERSION="570.124.06"} 1755
# HELP DCGM_FI_DEV_MEM_CLOCK Memory clock frequency (in MHz).
# TYPE DCGM_FI_DEV_MEM_CLOCK gauge
DCGM_FI_DEV_MEM_CLOCK{gpu="0", UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3", device="nvidia0", modelName="NVIDIA H200", Hostname="node-1"} 3201
# HELP DCGM_FI_DEV_MEMORY_TEMP Memory temperature (in C).
# TYPE DCGM_FI_DEV_MEMORY_TEMP gauge
DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3",modelName="NVIDIA H200",Hostname="node-1"} 9223372036854775794
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3",modelName="NVIDIA H200",Hostname="node-1"} 61
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-72ad4d20-cfed-f08d-c894-f620962ca3e4",modelName="NVIDIA H200",Hostname="node-1"} 9223372036854775794
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3",modelName="NVIDIA H200",Hostname="node-1"} 612.500000
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-72ad4d20-cfed-f08d-c894-f620962ca3e4",modelName="NVIDIA H200",Hostname="node-1"} 98.25
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3"} 112233445566
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3"} 87
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3"} 40960
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3"} 102300
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-72ad4d20-cfed-f08d-c894-f620962ca3e4"} 512
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="1",UUID="GPU-72ad4d20-cfed-f08d-c894-f620962ca3e4"} 4
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3",err_code="0",err_msg="No Error"} 0
"#;

    #[test]
    fn an_exporters_scrape_becomes_one_reading_per_gpu() {
        let gpus = readings(SCRAPE).unwrap();
        assert_eq!(gpus.len(), 2);
        let (g0, g1) = (&gpus[0], &gpus[1]);
        assert_eq!(g0.index, 0);
        assert_eq!(
            g0.uuid.as_deref(),
            Some("GPU-a8affe7e-7930-ae20-3fc6-4b0edf3ebbf3")
        );
        assert_eq!(g0.name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(g0.sm_mhz, Some(1980.0));
        assert_eq!(g0.mem_mhz, Some(3201.0));
        assert_eq!(g0.temp_c, Some(61.0));
        assert_eq!(g0.power_w, Some(612.5));
        assert_eq!(g0.util_pct, Some(87.0));
        assert_eq!(g0.memory_free_mib, Some(40960.0));
        assert_eq!(g0.memory_used_mib, Some(102300.0));
        // Not among the default counters: absent, never 0.
        assert_eq!(g0.memory_total_mib, None);
        assert_eq!(g0.power_limit_w, None);
        assert_eq!(g0.throttle, None);
        assert_eq!(g1.index, 1);
        assert_eq!(g1.temp_c, None, "a blank is absent");
        assert_eq!(g1.power_w, Some(98.25));
        assert_eq!(g1.memory_free_mib, Some(512.0));
        assert_eq!(g1.throttle, Some(4));
        assert_eq!(g1.util_pct, None);
    }

    #[test]
    fn the_newer_reasons_field_and_the_limits_are_read_when_exported() {
        let text = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu=\"3\"} 72\n\
            DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu=\"3\"} 700\n\
            DCGM_FI_DEV_FB_TOTAL{gpu=\"3\"} 143771\n\
            DCGM_FI_DEV_GPU_TEMP{gpu=\"x\"} 50\n\
            DCGM_FI_DEV_GPU_TEMP 50\n";
        let gpus = readings(text).unwrap();
        assert_eq!(gpus.len(), 1, "series without a GPU index are skipped");
        assert_eq!(gpus[0].index, 3);
        assert_eq!(gpus[0].throttle, Some(0x48));
        assert_eq!(gpus[0].power_limit_w, Some(700.0));
        assert_eq!(gpus[0].memory_total_mib, Some(143771.0));
        assert!(readings("<html>\n").is_err());
        assert!(readings("up 1\n").unwrap().is_empty());
    }

    #[test]
    fn the_url_gives_the_host_and_the_path() {
        let e = DcgmExporter::new("http://gpu-box:9400/metrics").unwrap();
        assert_eq!(e.host(), "gpu-box:9400");
        assert_eq!(e.path, "/metrics");
        assert_eq!(DcgmExporter::new("http://h:9400").unwrap().path, "/metrics");
        assert_eq!(
            DcgmExporter::new("http://h:9400/dcgm/metrics?x=1")
                .unwrap()
                .path,
            "/dcgm/metrics?x=1"
        );
        assert!(DcgmExporter::new("https://h:9400/metrics").is_err());
        assert!(DcgmExporter::new("h:9400").is_err());
    }
}
