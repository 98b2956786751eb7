//! Activation memory during prefill, and the CUDA out-of-memory crash it can cause.
//!
//! SGLang reserves `--mem-fraction-static` of each GPU for weights and the KV pool; what is left,
//! minus the runtime's own use (CUDA context, CUDA graphs, NCCL buffers), is all a forward pass
//! has for its temporary tensors. A prefill chunk's activation spike grows with its new tokens
//! (hidden states, MoE dispatch buffers) and with new tokens x context (attention workspace).
//!
//! PyTorch's caching allocator keeps freed blocks reserved. Without
//! `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` the model assumes the largest earlier
//! spike stays reserved but fragmented (a later, larger request cannot reuse it), so the next
//! spike needs `spike + retained <= free`; with expandable segments segments grow and shrink in
//! place and nothing is retained. `/flush_cache` frees KV slots, not these blocks, so the
//! retained reserve survives it. A spike that does not fit crashes the server like SGLang does.

use super::profile::{ActivationModel, MemoryModel};

const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;

/// Whether a `PYTORCH_CUDA_ALLOC_CONF` value turns on expandable segments
/// (`expandable_segments:True`, among comma-separated options; PyTorch accepts only `True`).
pub(crate) fn expandable_segments(conf: Option<&str>) -> bool {
    conf.is_some_and(|c| {
        c.split(',').any(|opt| {
            opt.split_once(':')
                .is_some_and(|(k, v)| k.trim() == "expandable_segments" && v.trim() == "True")
        })
    })
}

/// Reads the allocator setting from this process's environment: `PYTORCH_ALLOC_CONF` (PyTorch
/// 2.9+) or the older `PYTORCH_CUDA_ALLOC_CONF`, which the runner sets from `server.env`.
pub(crate) fn expandable_segments_from_env() -> bool {
    ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"]
        .iter()
        .any(|k| expandable_segments(std::env::var(k).ok().as_deref()))
}

/// One GPU's memory outside the static pool, tracked across prefill chunks.
#[derive(Debug, Clone)]
pub(crate) struct ActivationMemory {
    model: ActivationModel,
    /// Total capacity of one GPU in MiB.
    total_mib: f64,
    /// MiB reserved for weights and the KV pool (`--mem-fraction-static`).
    static_mib: f64,
    /// MiB a forward pass may use for activations.
    free_mib: f64,
    /// MiB of earlier spikes still reserved (fragmented); 0 with expandable segments.
    retained_mib: f64,
    expandable: bool,
}

/// A spike that did not fit: the numbers PyTorch's error message gives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OutOfMemory {
    /// MiB the failing allocation asked for.
    pub tried_mib: f64,
    /// MiB the driver reports free.
    pub free_mib: f64,
    /// GiB of total capacity.
    pub total_gib: f64,
    /// GiB the process holds.
    pub in_use_gib: f64,
    /// GiB allocated by PyTorch (the static pool).
    pub allocated_gib: f64,
    /// MiB reserved by PyTorch but unallocated (the fragmented reserve).
    pub reserved_unallocated_mib: f64,
}

impl OutOfMemory {
    /// PyTorch's error line, as the scheduler's traceback ends with it.
    pub(crate) fn torch_message(&self) -> String {
        format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} MiB. GPU 0 has a total \
             capacity of {:.2} GiB of which {} MiB is free. Including non-PyTorch memory, this process \
             has {:.2} GiB memory in use. Of the allocated memory {:.2} GiB is allocated by PyTorch, \
             and {} MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is \
             large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  \
             See documentation for Memory Management  \
             (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            fmt2(self.tried_mib),
            self.total_gib,
            fmt2(self.free_mib),
            self.in_use_gib,
            self.allocated_gib,
            fmt2(self.reserved_unallocated_mib),
        )
    }
}

fn fmt2(x: f64) -> String {
    format!("{:.2}", x.max(0.0))
}

impl ActivationMemory {
    /// The budget for a profile's memory model at `mem_fraction_static`; None when the
    /// profile has no activation model (spikes never crash).
    pub(crate) fn new(
        memory: &MemoryModel,
        mem_fraction_static: f64,
        expandable: bool,
    ) -> Option<ActivationMemory> {
        let model = memory.activation.clone()?;
        let total_mib = memory.gpu_gb * 1e9 / MIB;
        let static_mib = total_mib * mem_fraction_static;
        Some(ActivationMemory {
            free_mib: total_mib - static_mib - model.runtime_overhead_mib,
            model,
            total_mib,
            static_mib,
            retained_mib: 0.0,
            expandable,
        })
    }

    /// MiB left for activations after the static pool and the runtime.
    pub(crate) fn free_mib(&self) -> f64 {
        self.free_mib
    }

    /// MiB of one prefill iteration's spike. `segments` lists, per request, the context position
    /// of its first new token and how many new tokens it computes.
    pub(crate) fn spike_mib(&self, segments: &[(u64, u64)]) -> f64 {
        let m = &self.model;
        segments
            .iter()
            .map(|&(start, n)| {
                let (n, end) = (n as f64, (start + n) as f64);
                m.bytes_per_token * n + m.bytes_per_token_ctx * n * end
            })
            .sum::<f64>()
            / MIB
    }

    /// Allocates a prefill iteration's spike; Err when it does not fit.
    pub(crate) fn prefill(&mut self, segments: &[(u64, u64)]) -> Result<(), OutOfMemory> {
        let spike = self.spike_mib(segments);
        if spike + self.retained_mib > self.free_mib {
            let driver_free = (self.free_mib - self.retained_mib).max(0.0);
            return Err(OutOfMemory {
                tried_mib: spike,
                free_mib: driver_free,
                total_gib: self.total_mib * MIB / GIB,
                in_use_gib: (self.total_mib - driver_free) * MIB / GIB,
                allocated_gib: self.static_mib * MIB / GIB,
                reserved_unallocated_mib: self.retained_mib,
            });
        }
        if !self.expandable {
            self.retained_mib = self.retained_mib.max(spike);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

    fn kimi(frac: f64, expandable: bool) -> ActivationMemory {
        let p = Profile::load("kimi-k2.6-8x-rtxpro6000").unwrap();
        ActivationMemory::new(&p.memory, frac, expandable).unwrap()
    }

    /// Prefill of `len` tokens from position 0 in chunks of `chunk`.
    fn prefill(m: &mut ActivationMemory, len: u64, chunk: u64) -> Result<(), OutOfMemory> {
        let mut start = 0;
        while start < len {
            let n = chunk.min(len - start);
            m.prefill(&[(start, n)])?;
            start += n;
        }
        Ok(())
    }

    #[test]
    fn free_memory_at_the_published_fractions() {
        let free = kimi(0.94, false).free_mib();
        assert!((free - 893.0).abs() < 3.0, "{free}");
        let free = kimi(0.93, true).free_mib();
        assert!((free - 1865.0).abs() < 5.0, "{free}");
    }

    #[test]
    fn spike_grows_with_chunk_and_context() {
        let m = kimi(0.94, false);
        let last_full = m.spike_mib(&[(32768, 8192)]);
        assert!((last_full - 448.0).abs() < 1.0, "{last_full}");
        let first = m.spike_mib(&[(0, 8192)]);
        assert!(first > 400.0 && first < last_full, "{first}");
        // Halving the chunk halves the spike at the same context.
        let half = m.spike_mib(&[(32768, 4096)]);
        assert!(half < last_full / 2.0, "{half}");
        // A cache hit computes one token: a negligible spike even at 45k context.
        assert!(m.spike_mib(&[(45506, 1)]) < 1.0);
    }

    #[test]
    fn second_cold_45k_prefill_crashes_without_expandable_segments() {
        let mut m = kimi(0.94, false);
        for len in [1424, 1424, 11405, 11405, 45507] {
            prefill(&mut m, len, 8192).unwrap();
        }
        let oom = prefill(&mut m, 45507, 8192).unwrap_err();
        // The double spike is ~896 MiB against ~893 MiB free.
        let double = oom.tried_mib + oom.reserved_unallocated_mib;
        assert!((double - 896.0).abs() < 2.0, "{oom:?}");
        assert!((oom.free_mib + oom.reserved_unallocated_mib - 893.0).abs() < 3.0);
        let msg = oom.torch_message();
        assert!(msg.contains("Tried to allocate 448.00 MiB"), "{msg}");
        assert!(msg.contains("total capacity of 94.97 GiB"), "{msg}");
    }

    #[test]
    fn cache_hits_and_the_fix_survive() {
        // Step 1: each prompt prefilled once; the repeat computes one token.
        let mut m = kimi(0.94, false);
        for len in [1407u64, 11382, 45507] {
            prefill(&mut m, len, 8192).unwrap();
            m.prefill(&[(len - 1, 1)]).unwrap();
        }
        // The fix: 0.93, chunks of 4096, expandable segments, a sweep to 180k.
        let mut m = kimi(0.93, true);
        for len in [1024, 8192, 32768, 65536, 131072, 180_000] {
            prefill(&mut m, len, 4096).unwrap();
        }
        // Without the fix a single sweep dies past ~45k.
        let mut m = kimi(0.94, false);
        let died = [1024u64, 8192, 32768, 65536]
            .iter()
            .any(|&len| prefill(&mut m, len, 8192).is_err());
        assert!(died);
    }

    #[test]
    fn alloc_conf_parsing() {
        assert!(expandable_segments(Some("expandable_segments:True")));
        assert!(expandable_segments(Some(
            "max_split_size_mb:128, expandable_segments:True"
        )));
        assert!(!expandable_segments(Some("expandable_segments:False")));
        assert!(!expandable_segments(Some("expandable_segments:true")));
        assert!(!expandable_segments(None));
    }
}
