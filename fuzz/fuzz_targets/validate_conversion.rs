//! `validate_conversion` on arbitrary bytes, as a single conversion event body.
//!
//! Each input runs under the configurations of `conversion::configs()`
//! (defaults; `UnknownAttributes::Reject`; tight bounds with odd custom-field
//! names) and must never panic. An accepted event must hold every documented
//! rule when read back through its accessors (plausible non-blank e-mail,
//! non-blank identifier, bounds, lowercase unique tags, consent with a status,
//! only the account's custom fields, nothing dropped under `Reject`, no C0
//! control but tab, line feed and carriage return); its `to_payload_json()` must
//! re-serialise unchanged, be exactly the text `to_payload()` writes for the
//! stores, and, sent again as an event, be accepted and normalize to itself. A refusal must be well formed (413 exactly when the
//! body is over the bound, `BAD_REQUEST` alone at `$`, lowercase messages).
//! Validated as the only event of a batch, the body must give the same event,
//! or the same errors under `$[0]`.
#![no_main]

use conversion_gateway::validate_conversion;
use conversion_gateway_fuzz::conversion::{
    check_alone_as_in_a_batch, check_errors, check_event, configs,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    for config in configs() {
        let alone = validate_conversion(body, config.custom_fields, &config.limits);
        match &alone {
            Ok(event) => check_event(event, config),
            Err(errors) => check_errors(errors, body.len(), config, false),
        }
        check_alone_as_in_a_batch(body, &alone, config);
    }
});
