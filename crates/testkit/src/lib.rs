//! What the workspace's tests share, in one place: servebench's integration tests
//! (`tests/`), the simulator's behaviour tests (`crates/sim/tests/`) and the report crate's
//! (`crates/report/tests/`). A dev-dependency only: no library or binary links it.
//!
//! - [`http`]: a small blocking HTTP/1.1 client that keeps every header and stamps each SSE
//!   event with the time it arrived.
//! - [`mutate`]: seeded mutations of small valid inputs, for the readers' fuzz tests.
//! - [`process`]: the turn timing-sensitive tests take, servers started in their own process
//!   group and awaited, a process's output for an assertion's message.
//! - `runs` (feature `runs`): synthetic runs with known differences to compare, and the report
//!   crate's fixture runs opened and modelled.

pub mod http;
pub mod mutate;
pub mod process;
#[cfg(feature = "runs")]
pub mod runs;
