//! Pure planning logic of kfs-iceberg: no I/O, no async, no clock.
//!
//! - [`keys`]: which objects of a bucket are segments, and what their keys say.
//! - [`naming`]: the Iceberg table a topic lands in, and how it is partitioned.
//! - [`formats`]: how a table stores its records' values and reads their keys.
//! - [`layout`]: partition specs as operators write them (`day(timestamp)`).
//! - [`offsets`]: the per-partition offset map carried in every snapshot summary.
//! - [`progress`]: the same progress kept in table properties, and whether the
//!   current snapshot still descends from it.
//! - [`events`]: what S3, SQS and EventBridge events announce.
//! - [`crosscheck`]: what etcd's offsets allow a commit to take.
//! - [`sweep`]: which listed segments a sweep must look up, and which came too late.
//! - [`compaction`]: which small files to rewrite together, which snapshots to expire.
//! - [`lfs`]: large-file claim-check records: detected, checked, verified.
//! - [`duration`]: durations as operators write them (`0s`, `5d`).
//! - [`etcd_transport`]: how etcd endpoints are reached; credentials never in the clear.
//! - [`secret_url`]: URLs that may carry credentials, never printed with them.
//! - [`fault`]: the one error taxonomy (transient, conflict, invalid data, config).
//! - [`shard`]: which committer schedule handles which topic.
//! - [`hash`]: the stable hash behind file names, commit ids and shards.
//! - [`commit`]: which pending segments a commit may take, in what order, and what
//!   the table's watermarks become.
//! - [`wakeup`]: what the converter announces to the committer, which tables a
//!   batch of announcements asks to commit, and how long an early one is held.
//! - [`mode`]: whether a table appends its records or mirrors their keys.
//! - [`changes`]: what a keyed record or a Debezium envelope asks of a mirrored
//!   table, and the last change per key a batch folds into.
//! - [`field_key`]: the key of a mirror keyed by value fields, from a row's fields or
//!   a tombstone's record key.
//!
//! The hosts (the CLI, the Lambda functions, tests) read the world, hand it to these
//! functions as data, and carry out the plans they return.

pub mod changes;
pub mod commit;
pub mod compaction;
pub mod crosscheck;
pub mod duration;
pub mod etcd_transport;
pub mod events;
pub mod fault;
pub mod field_key;
pub mod formats;
pub mod hash;
pub mod key_index;
pub mod keys;
pub mod layout;
pub mod lfs;
pub mod mode;
pub mod naming;
pub mod offsets;
pub mod progress;
pub mod secret_url;
pub mod shard;
pub mod sweep;
pub mod value_columns;
pub mod wakeup;
