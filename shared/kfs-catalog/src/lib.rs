//! Where the tables live: which catalog holds them and the handle of an opened one
//! with its pointer swap ([`catalog`]: SQL, the embedded default, REST and memory;
//! the AWS catalogs plug in from `kfs-aws`), where the bytes live ([`storage`]: the
//! warehouse and the S3 settings), and the kinds of the errors that enter through
//! iceberg-rust, opendal and the file system ([`fault`]), given once, where they
//! enter, never by message text.
//!
//! Modules, from the bottom up: `fault`, `storage`, `catalog`.

pub mod catalog;
pub mod fault;
pub mod storage;
