//! (being written)

use crate::formats::InFormat;

/// The format of a source from its first bytes (up to 64 KiB) and its file name, if any.
pub fn detect(_head: &[u8], _file_name: Option<&str>) -> Option<InFormat> {
    None
}
