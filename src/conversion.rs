//! Conversion event validation (in progress).
