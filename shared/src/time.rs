//! Time as the product counts it: seconds (or milliseconds) since the Unix epoch. This crate reads
//! no clock; whoever does (the issuer's app layer, the filter adapters, the harness) turns the
//! reading into these numbers here, once, and passes them down.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long after the Unix epoch `t` is (`None` before it).
pub fn since_epoch(t: SystemTime) -> Option<Duration> {
    t.duration_since(UNIX_EPOCH).ok()
}

/// Whole seconds since the Unix epoch at `t` (0 before it).
pub fn unix_seconds(t: SystemTime) -> u64 {
    since_epoch(t).map_or(0, |d| d.as_secs())
}

/// Milliseconds since the Unix epoch at `t` (0 before it; `u64::MAX` past what that holds).
pub fn unix_millis(t: SystemTime) -> u64 {
    since_epoch(t).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_count_from_the_epoch_and_never_before_it() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(unix_seconds(t), 1_700_000_000);
        assert_eq!(unix_millis(t), 1_700_000_000_123);
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(
            (
                since_epoch(before),
                unix_seconds(before),
                unix_millis(before)
            ),
            (None, 0, 0)
        );
    }
}
