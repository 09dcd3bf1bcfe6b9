//! (being written)

use std::io::BufRead;

use crate::formats::Sink;

pub fn read(_input: &mut dyn BufRead, _sink: &mut Sink<'_>) -> crate::Result<()> {
    Err(crate::Error::Internal("format not implemented yet".into()))
}
