//! Converting a segment of a JSON table: its values scanned for the columns they
//! need, the table's schema grown to hold them, then the segment converted.

use kfs_segment::DecodeLimits;

use super::passes::{SegmentPasses, scanning};
use super::schema_race::{Attempt, Evolved, evolve, racing};
use super::target::{Conversion, TopicTable, open_dead_letter_table};
use crate::convert::{
    ConvertError, JsonReading, SegmentInput, ValueColumns, convert_segment, scan_json_segment,
};
use crate::error::PipelineError;
use crate::source::{SegmentSource, SourceObject};
use kfs_catalog::catalog::CatalogAccess;

/// Converts a segment of a JSON table: its values are scanned (streamed from the
/// source, never held whole) for the columns they need, which are added to (or widened
/// in) the table's schema through the catalog's swap (a concurrent change of the schema
/// makes it scan again), then the segment is read again and converted, values that fit
/// no column going to the dead-letter table. Returns the conversion with the tables it
/// wrote to, or the conversion's error.
pub(super) async fn convert_json_segment(
    access: CatalogAccess<'_>,
    target: &TopicTable,
    input: SegmentInput<'_>,
    (source, object): (&impl SegmentSource, &SourceObject),
    limits: DecodeLimits,
) -> Result<Conversion, PipelineError> {
    let mut passes = SegmentPasses::new(source, object);
    racing(&target.name, target.table.clone(), async |mut table| {
        let schema = table.metadata().current_schema().clone();
        let last_column_id = table.metadata().last_column_id();
        let reading = JsonReading::of(&table);
        let scanned_with = reading.clone();
        let scanned = {
            let reader = crate::convert::StreamReader::new(passes.open().await?);
            let key = input.key.clone();
            scanning(&target.name, move || {
                scan_json_segment(reader, &key, limits, &schema, last_column_id, reading)
            })
            .await?
        };
        let scan = match scanned {
            Ok(scan) => scan,
            Err(e) => return Ok(Attempt::Done(Err(e))),
        };
        if let Some(evolved) = &scan.evolved {
            match evolve(access, &target.name, &table, evolved.clone()).await? {
                // The table read anew (an operator may have changed its key meanwhile)
                // reads its values as the scan did, or it is scanned again: the scan's
                // count of refusals decides whether the dead-letter table is opened.
                Evolved::Updated(updated) if JsonReading::of(&updated) != scanned_with => {
                    return Ok(Attempt::Raced(Box::new(updated)));
                }
                Evolved::Updated(updated) => table = updated,
                // Another converter changed the schema first: scan against its schema.
                Evolved::Raced(now) => return Ok(Attempt::Raced(now)),
                // The table refuses the columns (e.g. a field named like a partition
                // field): the segment is quarantined.
                Evolved::Refused(e) => {
                    return Ok(Attempt::Done(Err(ConvertError::Unrepresentable {
                        segment: input.key.to_string(),
                        offset: input.key.base_offset,
                        reason: format!(
                            "table {} refuses the columns its values need: {e}",
                            target.name
                        ),
                    })));
                }
            }
        }
        let dead_letter_table = if scan.rejected > 0 {
            Some(open_dead_letter_table(access, &target.name, &table).await?)
        } else {
            None
        };
        let converted = convert_segment(
            &table,
            input,
            passes.open().await?,
            limits,
            ValueColumns::Json {
                dead_letters: dead_letter_table.as_ref(),
            },
        )
        .await;
        Ok(Attempt::Done(
            converted.map(|converted| (converted, table, dead_letter_table)),
        ))
    })
    .await
}
