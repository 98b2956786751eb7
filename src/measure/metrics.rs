//! STUB until the client branch lands.
use crate::results::records::*;
use indexmap::IndexMap;
pub fn aggregate(_records: &[&RequestRecord]) -> IndexMap<String, Stat> {
    todo!()
}
