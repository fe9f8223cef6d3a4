//! Shared code of the fuzz targets in `fuzz_targets/`.
//!
//! - [`conversion`]: the validator configurations every conversion input runs
//!   under, and the properties an accepted event or a refusal must have.
//! - [`request`]: the text format of the OAuth targets' inputs (headers, a
//!   blank line, a body, with placeholders for the fixture's secrets), so that
//!   seeds are written by hand from the tests and crash files read as requests.
//! - [`fixture`]: the gateways the OAuth targets drive, one shared per process
//!   and fresh ones for inputs that spend a code or a token.
//! - [`answer`]: the properties every HTTP answer must have.

pub mod answer;
pub mod conversion;
pub mod fixture;
pub mod request;
