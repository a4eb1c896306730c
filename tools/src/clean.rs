//! `seglog clean`: retention and compaction once, now (what the engine's cleaner does on its
//! schedule), printing per partition what each did.

use anyhow::Context;
use seglog::engine::Engine;

use crate::Outcome;
use crate::args::CleanArgs;
use crate::engine_open::{open_existing, with_engine};

pub fn run(args: &CleanArgs) -> anyhow::Result<Outcome> {
    let engine = open_existing(&args.dir)?;
    with_engine(engine, |engine| clean(engine, args.topic.as_deref()))
}

fn clean(engine: &Engine, topic: Option<&str>) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::Clean;
    for report in engine.apply_retention(topic).context("retention failed")? {
        match report.outcome {
            Ok(done) if done.segments_deleted > 0 => println!(
                "retention {}: deleted {} segments ({} bytes), log start offset {}{}",
                report.topic_partition,
                done.segments_deleted,
                done.bytes_deleted,
                done.log_start_offset,
                if done.rolled {
                    ", rolled a new active segment"
                } else {
                    ""
                },
            ),
            Ok(_) => {}
            Err(error) => {
                eprintln!("retention {}: failed: {error}", report.topic_partition);
                outcome = Outcome::Findings;
            }
        }
    }
    for report in engine.compact(topic).context("compaction failed")? {
        match report.outcome {
            Ok(done) => println!(
                "compaction {}: cleaned {} segments into {}, {} bytes before, {} after, \
                 {} of {} records kept, first dirty offset {}",
                report.topic_partition,
                done.segments_cleaned,
                done.segments_written,
                done.bytes_before,
                done.bytes_after,
                done.records_kept,
                done.records_before,
                done.first_dirty_offset,
            ),
            Err(error) => {
                eprintln!("compaction {}: failed: {error}", report.topic_partition);
                outcome = Outcome::Findings;
            }
        }
    }
    Ok(outcome)
}
