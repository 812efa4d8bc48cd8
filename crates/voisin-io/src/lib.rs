//! Readers and writers for data and result files.
