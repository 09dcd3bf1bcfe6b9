//! `mnemograph migrate --from SOURCE --to TARGET`: copies a whole memory database between SQLite
//! and PostgreSQL (`store::copy` does the copying). Progress goes to stderr, a bar on a terminal
//! and a plain line every few seconds otherwise; stdout gets one summary line.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;

use super::transfer::Progress;
use crate::config::Config;
use crate::engine::control::group;
use crate::store::Store;
use crate::store::copy::{self, Source, Start, Step};

/// Copies the database of `from` into the one of `to`, `batch` rows per transaction.
#[allow(clippy::print_stderr)]
pub(super) fn run(from: &Config, to: &Config, batch: usize) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let source = Source::open(from)?;
    let target = Store::open(to).with_context(|| match &to.postgres {
        Some(_) => "cannot open the target database".to_owned(),
        None => format!("cannot open the target database {}", to.db_path.display()),
    })?;
    let job = copy::begin(&source, &target, batch)?;
    let total = job.total_rows();
    let (from_name, to_name) = (source.describe().to_owned(), target.describe());
    let before = match job.start() {
        Start::AlreadyCopied => {
            writeln!(
                std::io::stdout().lock(),
                "{to_name} is already a complete copy of {from_name}: nothing to do"
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        Start::Fresh => {
            let _ = writeln!(
                std::io::stderr(),
                "copying {} rows from {from_name} to {to_name}",
                group(total)
            );
            0
        }
        Start::Resumed { rows } => {
            let _ = writeln!(
                std::io::stderr(),
                "going on with the migration from {from_name} to {to_name}: {} of {} rows were copied before",
                group(rows),
                group(total)
            );
            rows
        }
    };
    let progress = Progress::new();
    let done = job.run(&mut |s: &Step<'_>| {
        progress.show(|| {
            let rate =
                s.done.saturating_sub(before) as f64 / started.elapsed().as_secs_f64().max(1e-3);
            Progress::bar(
                s.done,
                s.total,
                &format!(
                    "{} · {} / {} rows · {} rows/s",
                    s.table,
                    group(s.done),
                    group(s.total),
                    group(rate as u64)
                ),
            )
        });
    });
    progress.finish();
    let summary = done.with_context(|| {
        format!("the migration from {from_name} to {to_name} stopped; run the same command again to go on")
    })?;
    let secs = started.elapsed().as_secs_f64();
    let tables: Vec<String> = summary
        .tables
        .iter()
        .map(|(name, n)| format!("{name} {}", group(*n)))
        .collect();
    writeln!(
        std::io::stdout().lock(),
        "migrated {from_name} to {to_name}: {} rows in {secs:.1} s ({} rows/s) · {}",
        group(summary.copied_now),
        group((summary.copied_now as f64 / secs.max(1e-3)) as u64),
        tables.join(" · ")
    )?;
    Ok(ExitCode::SUCCESS)
}
