//! Heap allocations made while validating conversion events.
//!
//! Linking `allocation-counter` installs its counting global allocator in this
//! test binary only; it counts per thread, so the test harness's own threads
//! never enter a measurement.

use conversion_gateway::{ConversionLimits, validate_batch, validate_conversion};

use conversion_gateway_testkit::hostile;

/// The allocations made by `f` on this thread, and what it returned.
fn allocations_during<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let mut result = None;
    let info = allocation_counter::measure(|| result = Some(f()));
    match result {
        Some(result) => (info.count_total, result),
        None => unreachable!("measure runs its closure"),
    }
}

// The bodies the benchmark measures (benches/validation.rs).
const MINIMAL: &[u8] = include_bytes!("../../benches/data/minimal.json");
const TYPICAL: &[u8] = include_bytes!("../../benches/data/typical.json");
const FULL: &[u8] = include_bytes!("../../benches/data/full.json");
const INVALID: &[u8] = include_bytes!("../../benches/data/invalid.json");
const CUSTOM_FIELDS: &[&str] = &[
    "plan",
    "company_size",
    "industry",
    "lead_source_detail",
    "preferred_contact_time",
    "segment",
    "score",
];

// One test function: the counter is per thread, so this only keeps the
// warm-up below in front of every measurement.
#[test]
fn validation_allocates_nothing_for_valid_events_and_little_for_invalid_ones() {
    let limits = ConversionLimits::default();
    // The counter counts itself: a measurement that allocates must not pass.
    let (allocations, _) = allocations_during(|| std::hint::black_box(Box::new(1u8)));
    assert_eq!(allocations, 1, "the counting allocator is not installed");
    // Anything lazily initialised on first use is initialised here, uncounted.
    for body in [MINIMAL, TYPICAL, FULL, INVALID] {
        let _ = validate_conversion(body, CUSTOM_FIELDS, &limits);
    }

    // The full body's custom fields and legal bases are kept in one block
    // of their own (the event stays small to move); nothing else allocates.
    for (name, body, blocks) in [
        ("minimal", MINIMAL, 0),
        ("typical", TYPICAL, 0),
        ("full", FULL, 1),
    ] {
        let (validating, result) =
            allocations_during(|| validate_conversion(body, CUSTOM_FIELDS, &limits));
        let event = result.unwrap_or_else(|errors| panic!("{name} must be valid: {errors}"));
        assert_eq!(validating, blocks, "{name}: allocations while validating");
        // Reading the event back allocates nothing either (no escapes in it).
        let (reading, tags) = allocations_during(|| {
            let tags = event.tags().count();
            let fields = event.custom_fields().count() + event.legal_bases().count();
            tags + fields
        });
        assert_eq!(reading, 0, "{name}: allocations while reading the event");
        assert!(name == "minimal" || tags >= 3, "{name:?}");
        println!("{name}: {validating} allocations");
    }

    let (allocations, result) =
        allocations_during(|| validate_conversion(INVALID, CUSTOM_FIELDS, &limits));
    let errors = result.expect_err("the invalid body has three errors");
    assert_eq!(errors.errors().len(), 3, "{}", errors.to_body());
    assert!(
        allocations <= 3,
        "invalid event: {allocations} allocations for 3 errors"
    );
    println!("invalid (3 errors): {allocations} allocations");

    // A batch allocates its vector of events, and per event only the full
    // one's block.
    let batch = [&b"["[..], TYPICAL, b",", FULL, b",", MINIMAL, b"]"].concat();
    let (allocations, result) =
        allocations_during(|| validate_batch(&batch, CUSTOM_FIELDS, &limits));
    assert_eq!(result.map(|events| events.len()).ok(), Some(3));
    assert!(allocations <= 3, "batch of 3: {allocations} allocations");
    println!("batch of 3: {allocations} allocations");
}

/// The allocations and the peak of heap memory of validating `shape`.
fn memory_of(
    shape: &hostile::Hostile,
    limits: &ConversionLimits,
) -> allocation_counter::AllocationInfo {
    let custom_fields = shape.custom_field_names();
    allocation_counter::measure(|| match shape.entry {
        hostile::Entry::Single => {
            std::hint::black_box(validate_conversion(&shape.body, &custom_fields, limits).is_ok());
        }
        hostile::Entry::Batch => {
            std::hint::black_box(validate_batch(&shape.body, &custom_fields, limits).is_ok());
        }
    })
}

// A test of its own, with its own warm-up: the counter is per thread.
#[test]
fn hostile_bodies_take_memory_in_proportion_to_their_size() {
    let limits = ConversionLimits::default();
    let shapes = hostile::all();
    for shape in &shapes {
        memory_of(shape, &limits);
    }
    for shape in &shapes {
        let info = memory_of(shape, &limits);
        let size = shape.body.len() as u64;
        println!(
            "{}: {} allocations, {} bytes at most",
            shape.name, info.count_total, info.bytes_max
        );
        // At most one allocation per 16 bytes of body (escaped names and
        // tags are unescaped into strings of their own), and a peak of a few
        // times the body: the hash set of 25,000 dropped names, 40 bytes
        // each, while it grows (old and new tables), about what parsing the
        // body into a `serde_json::Value` takes.
        assert!(
            info.count_total <= size / 16,
            "{}: {} allocations for {size} bytes",
            shape.name,
            info.count_total
        );
        assert!(
            info.bytes_max <= 12 * size,
            "{}: {} bytes at most for {size} bytes",
            shape.name,
            info.bytes_max
        );
    }
    // Errors past the bound are counted, not kept: 18,000 of them take no
    // more memory than 100 (they took 18,606 error values and 1.9 MB of
    // answer before).
    for shape in [hostile::repeated_known_key(), hostile::empty_events()] {
        let info = memory_of(&shape, &limits);
        assert!(
            info.count_total <= 16 && info.bytes_max <= 64 * 1024,
            "{}: {} allocations, {} bytes at most",
            shape.name,
            info.count_total,
            info.bytes_max
        );
    }
    // An error naming a member of the body keeps a copy of the name: made
    // for the 100 errors kept, not for the ~15,000 past them.
    let shape = hostile::repeated_custom_field();
    let info = memory_of(&shape, &limits);
    let kept = limits.max_errors as u64;
    assert!(
        info.count_total <= kept + 16 && info.bytes_max <= 64 * 1024,
        "{}: {} allocations, {} bytes at most",
        shape.name,
        info.count_total,
        info.bytes_max
    );
}
