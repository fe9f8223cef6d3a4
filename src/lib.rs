//! conversion-gateway (crate docs are written as the core lands).
#![warn(missing_docs)]

// --- conversion validation (owned by the validation work) ---
mod conversion;
// --- end conversion validation ---
