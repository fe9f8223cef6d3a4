//! Model-based tests: random sequences of operations, applied both to a
//! real [`conversion_gateway::Gateway`] and to a reference model in plain
//! Rust, with every answer compared, and after every step, which tokens
//! work. Time jumps from seconds to weeks, purges and restarts are among
//! the operations, so what only shows over weeks (a purge deleting what a
//! policy still honours) shows here.
//!
//! - `reference.rs`: the model of the token lifecycle and the operations;
//! - `system.rs`: the gateway driven by the same operations;
//! - `events.rs`: the same for idempotent intake, at a smaller scale.
//!
//! Each store's test binary calls [`model_lifecycle`] and
//! [`model_idempotency`] with its [`crate::restartable::Restartable`]
//! stores. Failures are shrunk to a shortest sequence and kept as
//! regression seeds under `proptest-regressions/`, run first every time.

mod events;
mod reference;
mod system;

use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};

use crate::restartable::Restartable;

pub use events::IdempotencyTest;
pub use reference::LifecycleModel;
pub use system::LifecycleTest;

/// What every system under test starts from: a runtime of its own (the
/// state machine's steps are synchronous), fresh stores, and a manual
/// clock at the tests' epoch.
fn start<R: Restartable>() -> (
    tokio::runtime::Runtime,
    R,
    std::sync::Arc<conversion_gateway::ManualClock>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let stores = runtime.block_on(R::start());
    let clock = std::sync::Arc::new(conversion_gateway::ManualClock::at_epoch_of_tests());
    (runtime, stores, clock)
}

/// How many random sequences each test runs: `PROPTEST_CASES` when set
/// (to run more by hand), otherwise `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}

/// Runs the state machine `T` for `cases` sequences of up to `steps`
/// operations, with failures kept in `regressions` (a path from the
/// repository's root, where `cargo test` runs). Panics with the shrunk
/// sequence when the system and the model disagree.
fn run<T>(name: &str, default_cases: u32, steps: usize, regressions: &'static str)
where
    T: StateMachineTest,
{
    let config = Config {
        cases: cases(default_cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        // Each case opens its own stores: no forking, and few shrink steps
        // (each replays a whole sequence).
        max_shrink_iters: 2_000,
        ..Config::default()
    };
    let strategy = T::Reference::sequential_strategy(1..steps);
    let mut runner = TestRunner::new(config.clone());
    let result = runner.run(&strategy, |(initial, transitions, seen)| {
        T::test_sequential(config.clone(), initial, transitions, seen);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{name}: {failure}");
    }
}

/// The token lifecycle's model test on `R`'s stores: `cases` sequences
/// (`PROPTEST_CASES` overrides it) of up to `steps` operations.
pub fn model_lifecycle<R: Restartable>(cases: u32, steps: usize, regressions: &'static str) {
    run::<LifecycleTest<R>>(
        &format!("model_lifecycle_on_{}", R::NAME),
        cases,
        steps,
        regressions,
    );
}

/// The idempotent intake's model test on `R`'s stores.
pub fn model_idempotency<R: Restartable>(cases: u32, steps: usize, regressions: &'static str) {
    run::<IdempotencyTest<R>>(
        &format!("model_idempotency_on_{}", R::NAME),
        cases,
        steps,
        regressions,
    );
}
