//! Memory written once before it is needed, so that the kernel's first-touch
//! work happens where the caller chooses.
//!
//! Why: a fresh page of memory costs nothing until it is first written,
//! and then costs its page fault: the kernel zeroes it (a whole 2 MiB at
//! once for a transparent huge page), and on a virtual machine the host
//! may back it first. Measured under an intake flood on an AMD EPYC VM,
//! zeroing fresh pages was 9.7% of the memory server's CPU, about 5 ms
//! for each 2 MiB, and every fault was taken inside the memory sink's
//! lock, while each other request waited for it (`perf record -g`:
//! `clear_page_erms` under `do_huge_pmd_anonymous_page`, below the
//! allocation of a block of text and the copy into it). Touched here,
//! outside that lock, the same work no longer holds the other requests
//! up: side by side on that VM, the memory server's p99 under
//! `wrk -t1 -c64` fell from 5.5 to 6.3 ms to 4.6 to 5.6 ms (four
//! alternated pairs, lower in each) and the machine's idle time under the
//! intake bench by two to three points in five rounds of five; its
//! requests a second moved within the noise, since the zeroing itself
//! costs the same CPU wherever it is done.

/// A page of zero bytes, as text: what [`touched_string`] writes.
const ZERO_PAGE: &str = match std::str::from_utf8(&[0; 4096]) {
    Ok(zeros) => zeros,
    Err(_) => panic!("zero bytes are UTF-8"),
};

/// An empty string with room for `capacity` bytes, every byte of which
/// has been written once (so its pages are faulted in).
pub(super) fn touched_string(capacity: usize) -> String {
    let mut text = String::with_capacity(capacity);
    while text.capacity() - text.len() >= ZERO_PAGE.len() {
        text.push_str(ZERO_PAGE);
    }
    text.clear();
    text
}

/// An empty vector with room for `capacity` items, every one of which has
/// been written once (as `filler`).
pub(super) fn touched_vec<T: Clone>(capacity: usize, filler: T) -> Vec<T> {
    let mut items = Vec::with_capacity(capacity);
    items.resize(capacity, filler);
    items.clear();
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's resident memory, in bytes (Linux).
    #[cfg(target_os = "linux")]
    fn resident() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: usize = statm
            .split_whitespace()
            .nth(1)
            .and_then(|field| field.parse().ok())
            .expect("resident pages");
        pages * 4096
    }

    #[test]
    fn touched_memory_is_empty_with_the_room_asked_for() {
        let text = touched_string(1 << 20);
        assert!(text.is_empty());
        assert!(text.capacity() >= 1 << 20);
        let items = touched_vec(1000, 7_u64);
        assert!(items.is_empty());
        assert!(items.capacity() >= 1000);
    }

    /// The point of touching: the memory is resident when it is handed
    /// over, where untouched room would not be.
    #[cfg(target_os = "linux")]
    #[test]
    fn touched_memory_is_resident() {
        const SIZE: usize = 64 << 20;
        let before = resident();
        let text = touched_string(SIZE);
        let items = touched_vec(SIZE / 8, 0_u64);
        let grown = resident().saturating_sub(before);
        assert!(grown >= SIZE * 3 / 2, "{grown} bytes resident more");
        drop((text, items));
    }
}
