//! A dispatched page of webhook deliveries cut into runs that each fit one
//! statement ([`DISPATCH_STATEMENT_BYTES`]), for PostgreSQL to insert one
//! after the other in the dispatch's transaction. (SQLite's writer binds a
//! page row by row, one prepared statement on its own thread.)
//!
//! A page is [`crate::DISPATCH_PAGE`] events, each delivered to every
//! webhook that wants it, with bodies up to the intake's
//! `max_body_bytes`: without a bound, one statement could pass what the
//! database takes in one message (PostgreSQL's 1 GB allocation limit,
//! SQLite's `SQLITE_MAX_LENGTH`), fail the same way on every try, and stop
//! the dispatcher at that page for good.
//!
//! 8 MiB is far below those limits, and large enough that a statement's
//! own cost is small beside its rows'. Both stores bind the rows' values
//! as parameters, so a byte of a body is a byte of the message. A delivery
//! larger than that is a run of its own, bounded by the intake's
//! `max_body_bytes` (200 KB by default) and, as one value, by the
//! database's own limit on a value (1 GB in both).

use crate::records::webhook::Delivery;
use crate::store::webhooks::DISPATCH_STATEMENT_BYTES;

/// What a delivery counts for besides its texts: its three uuids and its
/// instant, and the statement's framing of a row.
const ROW_BYTES: usize = 160;

/// The bytes `delivery` adds to a statement, by the measure of
/// [`DISPATCH_STATEMENT_BYTES`]: its body and contact key and a fixed share
/// for the rest of its row.
fn row_bytes(delivery: &Delivery) -> usize {
    delivery
        .body
        .len()
        .saturating_add(delivery.contact_key.len())
        .saturating_add(ROW_BYTES)
}

/// `deliveries` cut into consecutive runs, in order, of at most
/// [`DISPATCH_STATEMENT_BYTES`] each. A delivery larger than that on its
/// own is a run of its own. No run is empty.
pub(crate) fn statement_runs(deliveries: &[Delivery]) -> StatementRuns<'_> {
    runs_within(deliveries, DISPATCH_STATEMENT_BYTES)
}

/// [`statement_runs`] for any budget.
fn runs_within(deliveries: &[Delivery], budget: usize) -> StatementRuns<'_> {
    StatementRuns {
        rest: deliveries,
        budget,
    }
}

/// The iterator of [`statement_runs`].
pub(crate) struct StatementRuns<'a> {
    /// What the runs so far have not taken.
    rest: &'a [Delivery],
    /// The most bytes of a run of more than one delivery.
    budget: usize,
}

impl<'a> Iterator for StatementRuns<'a> {
    type Item = &'a [Delivery];

    fn next(&mut self) -> Option<&'a [Delivery]> {
        if self.rest.is_empty() {
            return None;
        }
        let mut bytes = 0_usize;
        let mut taken = 0;
        for delivery in self.rest {
            bytes = bytes.saturating_add(row_bytes(delivery));
            // The first delivery is always taken, whatever its size: a
            // statement of its own is the least it needs.
            if taken > 0 && bytes > self.budget {
                break;
            }
            taken += 1;
        }
        let (run, rest) = self.rest.split_at(taken);
        self.rest = rest;
        Some(run)
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;
    use uuid::Uuid;

    use super::*;
    use crate::records::webhook::{DeliveryId, WebhookId};

    /// A delivery whose row counts for exactly `bytes` (at least
    /// `ROW_BYTES + 1`).
    fn weighing(bytes: usize) -> Delivery {
        let delivery = Delivery {
            id: DeliveryId(Uuid::from_u128(bytes as u128)),
            webhook_id: WebhookId(Uuid::from_u128(1)),
            event_uuid: Uuid::from_u128(2),
            contact_key: "k".into(),
            body: "b".repeat(bytes - ROW_BYTES - 1),
            created_at: datetime!(2026-03-01 12:00 UTC),
        };
        assert_eq!(row_bytes(&delivery), bytes);
        delivery
    }

    /// The runs' lengths.
    fn lengths(deliveries: &[Delivery], budget: usize) -> Vec<usize> {
        runs_within(deliveries, budget).map(<[_]>::len).collect()
    }

    #[test]
    fn an_empty_page_is_no_run() {
        assert_eq!(lengths(&[], 1_000), Vec::<usize>::new());
    }

    #[test]
    fn a_page_within_the_budget_is_one_run() {
        let page = vec![weighing(200), weighing(300), weighing(500)];
        assert_eq!(lengths(&page, 1_000), [3], "exactly the budget fits");
    }

    #[test]
    fn a_run_ends_before_the_delivery_that_would_pass_the_budget() {
        let page = vec![weighing(200), weighing(300), weighing(501), weighing(499)];
        assert_eq!(lengths(&page, 1_000), [2, 2]);
    }

    #[test]
    fn a_delivery_larger_than_the_budget_is_a_run_of_its_own() {
        let page = vec![weighing(200), weighing(5_000), weighing(300)];
        assert_eq!(lengths(&page, 1_000), [1, 1, 1]);
        assert_eq!(lengths(&page[1..], 1_000), [1, 1], "also when first");
    }

    #[test]
    fn the_runs_are_the_page_in_order_each_as_long_as_the_budget_allows() {
        let page: Vec<Delivery> = (0..40).map(|n| weighing(170 + n % 9 * 111)).collect();
        let runs: Vec<&[Delivery]> = runs_within(&page, 1_200).collect();
        assert!(runs.len() > 5, "{} runs", runs.len());
        assert_eq!(runs.concat(), page);
        let bytes = |run: &[Delivery]| run.iter().map(row_bytes).sum::<usize>();
        for (n, run) in runs.iter().enumerate() {
            assert!(bytes(run) <= 1_200, "run {n} is {} bytes", bytes(run));
            if let Some(next) = runs.get(n + 1) {
                // The run with the next delivery added would not fit.
                let start: usize = runs[..n].iter().map(|run| run.len()).sum();
                let longer = &page[start..=start + run.len()];
                assert!(
                    bytes(longer) > 1_200,
                    "run {n} stopped short of {} deliveries (next run starts with {:?})",
                    longer.len(),
                    next[0].id
                );
            }
        }
    }

    #[test]
    fn the_stores_cut_at_the_statement_budget() {
        let page = vec![
            weighing(DISPATCH_STATEMENT_BYTES / 2),
            weighing(DISPATCH_STATEMENT_BYTES / 2),
            weighing(ROW_BYTES + 1),
        ];
        let runs: Vec<usize> = statement_runs(&page).map(<[_]>::len).collect();
        assert_eq!(runs, [2, 1]);
    }
}
