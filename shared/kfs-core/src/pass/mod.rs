//! One pass of the pipeline, as both the CLI and the Lambda functions run it, in
//! three stages read top to bottom in [`run_pass`]: the sweep lists the source and
//! gathers every complete segment the ledger has not seen (`sweep`), the
//! conversions turn them into pending files (`convert`), and each table's pending
//! segments are committed (`commit`).

mod commit;
mod convert;
mod sweep;
mod tables;

pub use convert::run_attempt;

mod config;
mod report;

use config::Pass;
pub use config::{CONVERSION_TIMEOUT, PipelineConfig, UNFINISHED_ATTEMPTS};
pub use report::{PassReport, Progress};

use crate::error::PipelineError;
use crate::ledger::Ledger;
use crate::source::SegmentSource;
use iceberg::Catalog;
use kfs_catalog::catalog::CatalogAccess;
use kfs_catalog::catalog::TableSwap;

/// Runs one pass: list, convert what is new, commit every table with pending work.
pub async fn run_pass(
    source: &impl SegmentSource,
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ledger: &impl Ledger,
    config: &PipelineConfig,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<PassReport, PipelineError> {
    config.naming.validate().map_err(PipelineError::Config)?;
    let access = CatalogAccess { catalog, swap };
    let pass = Pass {
        source,
        access,
        ledger,
        config,
        progress,
        sweep_deadline: config
            .deadline
            .map(|d| d.checked_sub(config.commit_reserve).unwrap_or(d)),
    };
    let mut report = PassReport::default();
    let mut tables = tables::Tables::new(
        access,
        &config.naming,
        ledger.identity(),
        config.schemas.clone(),
    );
    let sweep::Sweep {
        work,
        tables: mut swept,
    } = sweep::sweep(&pass, &mut tables, &mut report).await?;
    progress(&Progress::Listed {
        segments: report.segments,
        new: work.len(),
    });
    convert::convert_new(&pass, &mut tables, &work, &mut swept, &mut report).await?;
    commit::commit_swept(access, ledger, config, swept, &mut report, progress).await;
    tables.report_into(&mut report);
    report.unreadable.sort();
    report.unreadable.dedup();
    Ok(report)
}
