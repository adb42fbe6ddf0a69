//! Harness for the cross-binary tests.
