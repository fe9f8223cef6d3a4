//! `validate_batch` on arbitrary bytes, as a batch body.
//!
//! Each input runs under the configurations of `conversion::configs()` and
//! must never panic. An accepted batch holds 1 to `max_batch_events` events,
//! each with every property `validate_conversion`'s target checks; the
//! events rebuilt from their normalized payloads make a batch that is
//! accepted with the same payloads. A refusal must be well formed, every
//! path `$` or under `$[i]`.
#![no_main]

use conversion_gateway::validate_batch;
use conversion_gateway_fuzz::conversion::{
    check_batch_round_trip, check_errors, check_event, configs,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    for config in configs() {
        match validate_batch(body, config.custom_fields, &config.limits) {
            Ok(events) => {
                assert!(
                    (1..=config.limits.max_batch_events).contains(&events.len()),
                    "{}: a batch of {} events accepted",
                    config.name,
                    events.len()
                );
                for event in &events {
                    check_event(event, config);
                }
                check_batch_round_trip(&events, config);
            }
            Err(errors) => check_errors(&errors, body.len(), config, true),
        }
    }
});
