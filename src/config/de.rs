//! Field deserializers shared by the configuration tables.

use std::time::Duration;

use serde::de::{Deserialize, Deserializer, Error};

/// A number of milliseconds as a [`Duration`]; zero is allowed.
pub(super) fn millis<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_millis)
}

/// A number of milliseconds as a [`Duration`]; zero is rejected because a
/// zero timeout would fail every request.
pub(super) fn positive_millis<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    match u64::deserialize(deserializer)? {
        0 => Err(D::Error::custom("a timeout must be at least 1 millisecond")),
        ms => Ok(Duration::from_millis(ms)),
    }
}

/// A count that must be at least 1.
pub(super) fn positive_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    match usize::deserialize(deserializer)? {
        0 => Err(D::Error::custom("must be at least 1")),
        count => Ok(count),
    }
}

/// A number of hours that must be at least 1.
pub(super) fn positive_hours<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    match u32::deserialize(deserializer)? {
        0 => Err(D::Error::custom("must be at least 1 hour")),
        hours => Ok(hours),
    }
}
