//! `mnemograph model …`: making the built-in static embedding model. `model distill` runs the
//! all-MiniLM-L6-v2 transformer and so exists only in builds with `--features minilm`; other
//! builds say how to get one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub(super) enum ModelAction {
    /// Distil a static embedding table (model2vec format) from all-MiniLM-L6-v2: every token run
    /// through the transformer, PCA, Zipf/SIF weights, f16. Needs `--features minilm`.
    Distill {
        /// The transformer's folder, as `data/model/fetch-minilm.sh DIR` makes it.
        #[arg(long)]
        from: PathBuf,
        /// Where to write model.safetensors, tokenizer.json and config.json.
        #[arg(long)]
        out: PathBuf,
        /// Dimensions of the table (PCA components; at most the transformer's 384).
        #[arg(long, default_value_t = 256)]
        dims: usize,
    },
}

pub(super) fn run(action: ModelAction) -> anyhow::Result<ExitCode> {
    match action {
        ModelAction::Distill { from, out, dims } => distill(from, out, dims),
    }
}

#[cfg(not(feature = "minilm"))]
fn distill(from: PathBuf, out: PathBuf, dims: usize) -> anyhow::Result<ExitCode> {
    let _ = (from, out, dims);
    anyhow::bail!(
        "this build has no MiniLM transformer: rebuild with `cargo build --release --features minilm`"
    )
}

#[cfg(feature = "minilm")]
fn distill(from: PathBuf, out: PathBuf, dims: usize) -> anyhow::Result<ExitCode> {
    use std::io::Write;

    use anyhow::Context;

    use crate::embed::distill::{DistillOptions, distill};

    let opts = DistillOptions {
        dims,
        ..DistillOptions::default()
    };
    let mut err = std::io::stderr();
    let mut batches = 0usize;
    let mut progress = |done: usize, total: usize| {
        batches += 1;
        if batches.is_multiple_of(10) || done == total {
            let _ = writeln!(err, "encoded {done}/{total} tokens");
        }
    };
    let r = distill(&from, &out, &opts, &mut progress)
        .with_context(|| format!("cannot distil {} into {}", from.display(), out.display()))?;
    let mut o = std::io::stdout().lock();
    writeln!(
        o,
        "distilled {} tokens into {} dimensions ({:.1}% of the variance kept)",
        r.vocab_size,
        r.dims,
        r.explained_variance * 100.0
    )?;
    writeln!(
        o,
        "encoding {:.1} s, PCA and weighting {:.1} s, total {:.1} s",
        r.encode_time.as_secs_f64(),
        r.reduce_time.as_secs_f64(),
        r.total_time.as_secs_f64()
    )?;
    writeln!(
        o,
        "wrote {} (model.safetensors {} bytes, tokenizer.json, config.json)",
        out.display(),
        r.model_bytes
    )?;
    Ok(ExitCode::SUCCESS)
}
