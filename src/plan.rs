//! Ordering points into server groups.
