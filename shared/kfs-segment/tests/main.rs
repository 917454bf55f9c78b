//! The integration tests of kfs-segment, one binary: golden segments, the malformed
//! corpus, and round-trip properties.

mod corpus;
mod golden;
mod roundtrip;
