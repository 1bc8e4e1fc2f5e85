//! The NBD server (placeholder: being written).
