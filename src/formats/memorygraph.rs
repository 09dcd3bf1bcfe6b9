//! (being written)

use std::io::BufRead;

use crate::formats::{Flow, Sink};

pub fn read(_input: &mut dyn BufRead, _sink: &mut Sink<'_>) -> crate::Result<()> {
    let _ = Flow::Continue;
    Err(crate::Error::Internal("format not implemented yet".into()))
}
