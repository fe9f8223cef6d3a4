//! Room in a bounded table of counting windows, shared by the sign-in
//! throttle (`signin::throttle`) and the memory rate limiter
//! (`intake::rate_limit::memory`): both keep at most a fixed number of
//! keys, and both must never forget a key at its limit before its window
//! ends, or flooding the table with new keys would erase a lock.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// How many windows to drop from a table of `len` windows capped at `max`
/// so that `needed` new ones fit: down to three quarters of the cap (each
/// pass then frees a quarter of the table, so the cost per new key stays
/// constant on average), and at least to room for `needed` (a cap of a few
/// keys has no room at three quarters).
pub(crate) fn excess(len: usize, needed: usize, max: usize) -> usize {
    len.saturating_sub(max / 4 * 3)
        .max((len + needed).saturating_sub(max))
}

/// Drops `excess` windows of `windows` that are not locked, those with the
/// lowest `weight` (failures, units used) first, or every unlocked window
/// if there are no more than `excess` of them. A locked window is never
/// dropped: only its end frees its key.
pub(crate) fn drop_unlocked<K, W, S>(
    windows: &mut HashMap<K, W, S>,
    excess: usize,
    is_locked: impl Fn(&W) -> bool,
    weight: impl Fn(&W) -> u32,
) where
    K: Eq + Hash,
    S: BuildHasher,
{
    if excess == 0 {
        return;
    }
    let mut unlocked: Vec<u32> = windows
        .values()
        .filter(|w| !is_locked(w))
        .map(&weight)
        .collect();
    if unlocked.len() <= excess {
        windows.retain(|_, w| is_locked(w));
        return;
    }
    let (_, cutoff, _) = unlocked.select_nth_unstable(excess - 1);
    let cutoff = *cutoff;
    // Every unlocked window below the cutoff goes, and as many at the
    // cutoff as make up the excess.
    let below = unlocked.iter().filter(|&&w| w < cutoff).count();
    let mut at_cutoff = excess - below;
    windows.retain(|_, w| {
        if is_locked(w) || weight(w) > cutoff {
            return true;
        }
        if weight(w) < cutoff {
            return false;
        }
        if at_cutoff > 0 {
            at_cutoff -= 1;
            return false;
        }
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows as (weight, locked), keyed by their index.
    fn table(windows: &[(u32, bool)]) -> HashMap<u64, (u32, bool)> {
        (0u64..).zip(windows.iter().copied()).collect()
    }

    fn drop(windows: &mut HashMap<u64, (u32, bool)>, excess: usize) {
        drop_unlocked(windows, excess, |w| w.1, |w| w.0);
    }

    #[test]
    fn the_excess_goes_down_to_three_quarters_and_always_makes_room() {
        assert_eq!(excess(100, 1, 100), 25);
        assert_eq!(excess(75, 1, 100), 0);
        assert_eq!(excess(76, 1, 100), 1);
        // Three quarters of a cap of 2 is 0: all but what fits.
        assert_eq!(excess(2, 1, 2), 2);
        assert_eq!(excess(1, 1, 2), 1);
        // Room for many at once, beyond three quarters.
        assert_eq!(excess(70, 40, 100), 10);
        assert_eq!(excess(0, 1, 100), 0);
    }

    #[test]
    fn the_lightest_unlocked_windows_go_first_and_locked_ones_never() {
        let mut windows = table(&[(5, true), (1, false), (3, false), (2, false), (0, true)]);
        drop(&mut windows, 2);
        let mut left: Vec<(u32, bool)> = windows.values().copied().collect();
        left.sort_unstable();
        assert_eq!(left, [(0, true), (3, false), (5, true)]);
    }

    #[test]
    fn ties_at_the_cutoff_go_only_as_far_as_the_excess() {
        let mut windows = table(&[(1, false), (2, false), (2, false), (2, false), (9, false)]);
        drop(&mut windows, 3);
        let mut left: Vec<u32> = windows.values().map(|w| w.0).collect();
        left.sort_unstable();
        assert_eq!(left, [2, 9]);
    }

    #[test]
    fn with_no_more_unlocked_windows_than_the_excess_all_of_them_go() {
        let mut windows = table(&[(7, false), (1, true), (4, false)]);
        drop(&mut windows, 2);
        assert_eq!(windows.values().copied().collect::<Vec<_>>(), [(1, true)]);
        drop(&mut windows, 5);
        assert_eq!(
            windows.len(),
            1,
            "a locked window stays whatever the excess"
        );
    }

    #[test]
    fn no_excess_drops_nothing() {
        let mut windows = table(&[(0, false), (1, false)]);
        drop(&mut windows, 0);
        assert_eq!(windows.len(), 2);
    }
}
