//! The figures a point is graded with against the hardware (the report's "Against the
//! hardware" section, from `roofline`): not measured per request but derived from a point's
//! means, the model's config and the GPU's datasheet. `expect:` and `compare` name them like
//! metrics. They are the model's figures: a simulator run's steps are already divided by its
//! time scale, so published values are compared as they are.

/// One graded figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Graded {
    /// The name `expect:` and templates use.
    pub name: &'static str,
    pub label: &'static str,
    pub unit: &'static str,
    pub definition: &'static str,
    /// True when a larger value is better.
    pub higher_is_better: bool,
}

/// In report order.
pub(crate) const GRADED: &[Graded] = &[
    Graded {
        name: "step_s",
        label: "decode step",
        unit: "s",
        definition: "Seconds per decode step: tokens per step (1 without speculative decoding) over the per-request decode tok/s.",
        higher_is_better: false,
    },
    Graded {
        name: "step_floor_s",
        label: "step floor",
        unit: "s",
        definition: "Seconds the step's bytes per GPU (weights it reads + KV cache at the point's context and batch) take at the GPU's peak bandwidth: no kernel can be faster.",
        higher_is_better: false,
    },
    Graded {
        name: "effective_bandwidth_gbs",
        label: "effective bandwidth",
        unit: "GB/s",
        definition: "The step's bytes per GPU over its measured time.",
        higher_is_better: true,
    },
    Graded {
        name: "decode_bw_fraction",
        label: "of peak bandwidth",
        unit: "fraction",
        definition: "Effective over peak bandwidth: the floor over the step time (1.0: at the floor).",
        higher_is_better: true,
    },
    Graded {
        name: "prefill_tflops",
        label: "prefill TFLOP/s",
        unit: "TFLOP/s",
        definition: "The mean prompt's prefill FLOPs per GPU (2 per active parameter per token, plus causal attention) over its time (prompt tokens / prefill tok/s).",
        higher_is_better: true,
    },
    Graded {
        name: "prefill_flops_fraction",
        label: "of peak FLOP/s",
        unit: "fraction",
        definition: "Prefill TFLOP/s over the GPU's dense peak at the precision the weights are multiplied in.",
        higher_is_better: true,
    },
];

impl Graded {
    /// Every graded figure, in report order.
    pub fn all() -> &'static [Graded] {
        GRADED
    }

    /// The entry named `name`.
    pub fn from_name(name: &str) -> Option<&'static Graded> {
        GRADED.iter().find(|g| g.name == name)
    }
}
