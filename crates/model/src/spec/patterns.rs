//! The string patterns the spec's JSON Schema states (`regex(pattern = ...)`): durations, hosts,
//! Slurm time limits. Below the types that carry them, so `validate` can recognise one and word
//! its message (`is not a duration`) without reaching up into `types`.

/// Durations as `humantime` 2.4 reads them: `90s`, `20m`, `20 minutes`, `1h 30m`, `1.5h`.
pub(crate) const DURATION_PATTERN: &str = r"^\s*([0-9]+(\.[0-9]+)?\s*(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\s*)+$";

/// A host written as a string: `local`, or an SSH URL.
pub(crate) const HOST_PATTERN: &str = r"^(local|ssh://([^@/\s]+@)?[^@/\s:]+(:[0-9]{1,5})?/?)$";

/// A Slurm time limit as `sbatch --time` reads it: `minutes`, `minutes:seconds`,
/// `hours:minutes:seconds`, `days-hours`, `days-hours:minutes`, `days-hours:minutes:seconds`.
pub(crate) const SLURM_TIME_PATTERN: &str =
    r"^([0-9]+(:[0-9]{1,2}){0,2}|[0-9]+-[0-9]{1,2}(:[0-9]{1,2}){0,2}|UNLIMITED|INFINITE)$";
