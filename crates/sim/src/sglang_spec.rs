//! SGLang's speculative flags resolved as its `server_args.py` resolves them
//! (`--speculative-algorithm`, `--speculative-num-steps`, `--speculative-eagle-topk`,
//! `--speculative-num-draft-tokens`), into the profile's speculative model.
//!
//! - Without `--speculative-algorithm` the other three are ignored (the profile's `enabled`
//!   model still applies).
//! - With it and none of the three, the profile's own draft shape is used. SGLang 0.5.23
//!   picks one per model architecture (`arg_groups/speculative_hook.py`
//!   `_auto_choose_speculative_params`, line 1430): `STANDALONE` -> `(3, 1, 4)`;
//!   `LlamaForCausalLM`, `Grok1ForCausalLM`, `Grok1VForCausalLM` -> `(5, 4, 8)`; every other
//!   architecture -> `(3, 1, 4)` (steps, topk, draft tokens). A profile without its own shape
//!   gets `(3, 1, 4)`'s: 4 draft tokens, a chain of 3 steps.
//! - `--speculative-eagle-topk` or `--speculative-num-draft-tokens` without
//!   `--speculative-num-steps` is refused with SGLang's bare `AssertionError`
//!   (`_handle_eagle_family`, speculative_hook.py lines 1159-1163):
//!   ```python
//!   if not cfg.speculative_adaptive and cfg.speculative_num_steps is None:
//!       assert (
//!           cfg.speculative_eagle_topk is None
//!           and cfg.speculative_num_draft_tokens is None
//!       )
//!   ```
//!   (`--speculative-adaptive` skips it; the simulator does not model adaptive drafting.)
//! - `--speculative-eagle-topk 1` forces `--speculative-num-draft-tokens` to
//!   `--speculative-num-steps` + 1, with SGLang's warning (lines 1255-1261):
//!   ```python
//!   if (
//!       cfg.speculative_eagle_topk == 1
//!       and cfg.speculative_num_draft_tokens != cfg.speculative_num_steps + 1
//!   ):
//!       logger.warning(
//!           "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
//!       )
//!   ```
//! - Values below 1 are refused (the simulator's bound: SGLang fails on them later, in the
//!   draft worker).

use super::args::SimArgError;
use super::profile::{Profile, SpecModel};

/// The three draft-shape flags as given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DraftFlags {
    pub num_steps: Option<i64>,
    pub eagle_topk: Option<i64>,
    pub num_draft_tokens: Option<i64>,
}

/// What the flags resolve to: the model (None = off) and the warning SGLang logs, if any.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub model: Option<SpecModel>,
    pub warning: Option<&'static str>,
}

/// SGLang's warning when `--speculative-eagle-topk 1` overrides the draft tokens.
pub(crate) const TOPK_ONE_WARNING: &str = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1";

/// What SGLang prints for draft flags without `--speculative-num-steps`: a bare assertion
/// (no message of its own) at the line that refuses them, which the simulator names.
pub(crate) const ASSERTION: &str = "AssertionError (sglang/srt/arg_groups/speculative_hook.py, line 1160, in _handle_eagle_family: `assert cfg.speculative_eagle_topk is None and cfg.speculative_num_draft_tokens is None` when --speculative-num-steps is not given)";

/// Resolves the flags against `profile`; `algorithm` is `--speculative-algorithm`'s value.
pub(crate) fn resolve(
    profile: &Profile,
    algorithm: Option<&str>,
    flags: DraftFlags,
) -> Result<Resolved, SimArgError> {
    let off = Resolved {
        model: profile.speculative.clone().filter(|s| s.enabled),
        warning: None,
    };
    if algorithm.is_none() {
        return Ok(off);
    }
    for (name, v) in [
        ("--speculative-num-steps", flags.num_steps),
        ("--speculative-eagle-topk", flags.eagle_topk),
        ("--speculative-num-draft-tokens", flags.num_draft_tokens),
    ] {
        if let Some(v) = v.filter(|v| *v < 1) {
            return Err(SimArgError::Invalid(format!(
                "{name} must be at least 1, got {v}"
            )));
        }
    }
    let mut model = profile.speculative.clone().unwrap_or_default();
    let Some(steps) = flags.num_steps else {
        if flags.eagle_topk.is_some() || flags.num_draft_tokens.is_some() {
            return Err(SimArgError::Invalid(ASSERTION.into()));
        }
        return Ok(Resolved {
            model: Some(model),
            warning: None,
        });
    };
    let steps = clamp_u32(steps);
    let topk = flags.eagle_topk.map_or(1, clamp_u32);
    let mut draft = flags
        .num_draft_tokens
        .map_or(steps.saturating_add(1), clamp_u32);
    let mut warning = None;
    if topk == 1 && draft != steps.saturating_add(1) {
        draft = steps.saturating_add(1);
        warning = Some(TOPK_ONE_WARNING);
    }
    model.num_steps = Some(steps);
    model.num_draft_tokens = draft;
    Ok(Resolved {
        model: Some(model),
        warning,
    })
}

fn clamp_u32(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX).min(MAX_DRAFT)
}

/// The most draft steps or tokens the simulator models (a bound on its per-step work).
const MAX_DRAFT: u32 = 64;

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(steps: Option<i64>, topk: Option<i64>, draft: Option<i64>) -> DraftFlags {
        DraftFlags {
            num_steps: steps,
            eagle_topk: topk,
            num_draft_tokens: draft,
        }
    }

    #[test]
    fn without_an_algorithm_the_draft_flags_are_ignored() {
        let r = resolve(&Profile::fast(), None, flags(Some(3), Some(1), Some(4))).unwrap();
        assert!(r.model.is_none());
    }

    #[test]
    fn topk_or_draft_tokens_without_steps_are_refused() {
        for f in [flags(None, Some(4), None), flags(None, None, Some(8))] {
            let e = resolve(&Profile::fast(), Some("EAGLE"), f).unwrap_err();
            assert!(e.to_string().contains("--speculative-num-steps"), "{e}");
            assert!(e.to_string().starts_with("AssertionError "), "{e}");
        }
    }

    #[test]
    fn topk_one_forces_steps_plus_one_draft_tokens_with_a_warning() {
        let r = resolve(
            &Profile::fast(),
            Some("EAGLE"),
            flags(Some(3), Some(1), Some(8)),
        )
        .unwrap();
        let m = r.model.unwrap();
        assert_eq!((m.num_draft_tokens, m.max_tokens()), (4, 4));
        assert_eq!(r.warning, Some(TOPK_ONE_WARNING));
    }

    #[test]
    fn a_tree_verifies_more_tokens_than_it_can_accept() {
        let r = resolve(
            &Profile::fast(),
            Some("EAGLE"),
            flags(Some(3), Some(4), Some(8)),
        )
        .unwrap();
        let m = r.model.unwrap();
        assert_eq!((m.num_draft_tokens, m.max_tokens()), (8, 4));
        assert!(r.warning.is_none());
    }

    #[test]
    fn values_below_one_are_refused() {
        let e = resolve(&Profile::fast(), Some("EAGLE"), flags(Some(0), None, None)).unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
    }
}
