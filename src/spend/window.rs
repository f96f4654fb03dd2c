//! The windows a budget counts spend in (docs/budgets.md#windows): `hour`, `day`, `week` (ISO
//! weeks, from Monday 00:00) and `month`, all on the UTC calendar. A window is a pure function of
//! a Unix time: the counters are keyed by the window's start, so a clock stepped back across an
//! edge counts in the earlier window again, and one stepped forward in the later.

use std::fmt;

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// A budget's window, `window = "hour" | "day" | "week" | "month"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Window {
    /// From each hour's :00:00.
    Hour,
    /// From each day's 00:00 UTC.
    Day,
    /// From each Monday's 00:00 UTC (ISO 8601 weeks).
    Week,
    /// From each calendar month's first day, 00:00 UTC.
    Month,
}

/// Where one window starts and ends, in seconds since the Unix epoch: `start <= t < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// The window's first second.
    pub(crate) start: u64,
    /// The next window's first second.
    pub(crate) end: u64,
}

/// Unix seconds as RFC 3339, UTC, to the second: how windows' edges are shown.
pub(crate) fn rfc3339(unix: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix);
    humantime::format_rfc3339_seconds(time).to_string()
}

impl Bounds {
    /// Whole seconds from `now` until the window ends, at least 1 (a `retry-after`).
    pub(crate) fn seconds_left(&self, now: u64) -> u64 {
        self.end.saturating_sub(now).max(1)
    }
}

impl Window {
    /// Every window, in the order the docs list them.
    pub(crate) const ALL: [Window; 4] = [Window::Hour, Window::Day, Window::Week, Window::Month];

    /// The name `window` is written with.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Week => "week",
            Window::Month => "month",
        }
    }

    /// The window named `name`, if there is one.
    pub(crate) fn parse(name: &str) -> Option<Window> {
        Window::ALL.into_iter().find(|window| window.as_str() == name)
    }

    /// The window holding the Unix time `unix`. A week that would start before the epoch (the
    /// first four days of 1970) starts at 0.
    pub(crate) fn bounds(self, unix: u64) -> Bounds {
        match self {
            Window::Hour => aligned(unix, HOUR),
            Window::Day => aligned(unix, DAY),
            Window::Week => {
                let days = unix / DAY;
                // 1970-01-01 was a Thursday: three days after a Monday.
                let monday = (days + 3) / 7 * 7;
                Bounds {
                    start: monday.saturating_sub(3) * DAY,
                    end: (monday + 4) * DAY,
                }
            }
            Window::Month => {
                let (year, month, _) = civil_from_days(unix / DAY);
                let (next_year, next_month) = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                Bounds {
                    start: days_from_civil(year, month, 1) * DAY,
                    end: days_from_civil(next_year, next_month, 1) * DAY,
                }
            }
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The window of length `len` holding `unix`, windows starting at multiples of `len`.
fn aligned(unix: u64, len: u64) -> Bounds {
    let start = unix - unix % len;
    Bounds {
        start,
        end: start + len,
    }
}

/// Days in the 400 years of a Gregorian cycle.
const DAYS_PER_CYCLE: u64 = 146_097;
/// Days from 0000-03-01 to 1970-01-01 (proleptic Gregorian).
const EPOCH_FROM_YEAR_ZERO_MARCH: u64 = 719_468;

/// The date (year, month 1-12, day 1-31) of `days` since 1970-01-01.
///
/// Years are counted from March, so that February's leap day ends a year: within a 400-year
/// cycle, a year of the cycle has 365 days plus one every 4th year, minus one every 100th, plus
/// one every 400th; and from March on the months' first days fall at `(153 * m + 2) / 5`.
fn civil_from_days(days: u64) -> (u64, u32, u32) {
    let from_zero = days + EPOCH_FROM_YEAR_ZERO_MARCH;
    let cycle = from_zero / DAYS_PER_CYCLE;
    let day_of_cycle = from_zero % DAYS_PER_CYCLE;
    let year_of_cycle =
        (day_of_cycle - day_of_cycle / 1460 + day_of_cycle / 36_524 - day_of_cycle / 146_096) / 365;
    let day_of_year = day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
    // Months counted from March = 0.
    let march_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    };
    let year = cycle * 400 + year_of_cycle + u64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// Days since 1970-01-01 of the date (year, month 1-12, day 1-31), from 1970 on.
fn days_from_civil(year: u64, month: u32, day: u32) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let cycle = year / 400;
    let year_of_cycle = year % 400;
    let march_month = u64::from(if month > 2 { month - 3 } else { month + 9 });
    let day_of_year = (153 * march_month + 2) / 5 + u64::from(day) - 1;
    let day_of_cycle = year_of_cycle * 365 + year_of_cycle / 4 - year_of_cycle / 100 + day_of_year;
    cycle * DAYS_PER_CYCLE + day_of_cycle - EPOCH_FROM_YEAR_ZERO_MARCH
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Unix time of a UTC date and time, counted the slow way: day by day from 1970.
    fn at(year: u64, month: u32, day: u32, hour: u64, minute: u64, second: u64) -> u64 {
        let days: u64 = (1970..year).map(|y| 365 + u64::from(is_leap(y))).sum::<u64>()
            + (1..month).map(|m| u64::from(month_len(year, m))).sum::<u64>()
            + u64::from(day - 1);
        days * DAY + hour * HOUR + minute * 60 + second
    }

    fn is_leap(year: u64) -> bool {
        year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
    }

    fn month_len(year: u64, month: u32) -> u32 {
        match month {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    #[test]
    fn names_round_trip_and_nothing_else_is_a_window() {
        for window in Window::ALL {
            assert_eq!(Window::parse(window.as_str()), Some(window));
            assert_eq!(window.to_string(), window.as_str());
        }
        for name in ["", "Day", "days", "daily", "year", "minute", " day"] {
            assert_eq!(Window::parse(name), None, "{name:?}");
        }
    }

    #[test]
    fn dates_convert_both_ways_for_every_day_of_five_centuries() {
        let mut days = 0;
        for year in 1970..2470 {
            for month in 1..=12 {
                for day in 1..=month_len(year, month) {
                    assert_eq!(civil_from_days(days), (year, month, day), "day {days}");
                    assert_eq!(days_from_civil(year, month, day), days, "{year}-{month}-{day}");
                    days += 1;
                }
            }
        }
    }

    #[test]
    fn hours_and_days_start_on_the_hour_and_at_midnight() {
        let t = at(2026, 3, 15, 13, 45, 10);
        assert_eq!(
            Window::Hour.bounds(t),
            Bounds {
                start: at(2026, 3, 15, 13, 0, 0),
                end: at(2026, 3, 15, 14, 0, 0)
            }
        );
        assert_eq!(
            Window::Day.bounds(t),
            Bounds {
                start: at(2026, 3, 15, 0, 0, 0),
                end: at(2026, 3, 16, 0, 0, 0)
            }
        );
        // The last day of a leap year ends at the next year's first midnight.
        assert_eq!(
            Window::Day.bounds(at(2024, 12, 31, 23, 59, 59)).end,
            at(2025, 1, 1, 0, 0, 0)
        );
    }

    #[test]
    fn weeks_run_from_monday_to_monday() {
        // 2026-03-15 is a Sunday, 2026-03-09 and 2026-03-16 Mondays.
        let week = Bounds {
            start: at(2026, 3, 9, 0, 0, 0),
            end: at(2026, 3, 16, 0, 0, 0),
        };
        assert_eq!(Window::Week.bounds(at(2026, 3, 15, 23, 59, 59)), week);
        assert_eq!(Window::Week.bounds(at(2026, 3, 9, 0, 0, 0)), week);
        assert_eq!(
            Window::Week.bounds(at(2026, 3, 16, 0, 0, 0)).start,
            at(2026, 3, 16, 0, 0, 0)
        );
        // A week across a year's end: 2024-12-30 (Monday) to 2025-01-06.
        assert_eq!(
            Window::Week.bounds(at(2025, 1, 1, 12, 0, 0)),
            Bounds {
                start: at(2024, 12, 30, 0, 0, 0),
                end: at(2025, 1, 6, 0, 0, 0)
            }
        );
        // The first Monday after the epoch, and the days before it.
        assert_eq!(
            Window::Week.bounds(at(1970, 1, 5, 0, 0, 0)).start,
            at(1970, 1, 5, 0, 0, 0)
        );
        assert_eq!(
            Window::Week.bounds(0),
            Bounds {
                start: 0,
                end: at(1970, 1, 5, 0, 0, 0)
            }
        );
        // Every week is seven days, from a Monday (1970-01-05 + 7n).
        for n in 0..3000u64 {
            let t = at(1970, 1, 5, 0, 0, 0) + n * 7 * DAY + (n * 7919) % (7 * DAY);
            let bounds = Window::Week.bounds(t);
            assert_eq!(bounds.end - bounds.start, 7 * DAY);
            assert_eq!((bounds.start / DAY + 3) % 7, 0, "not a Monday: {bounds:?}");
            assert!(bounds.start <= t && t < bounds.end);
        }
    }

    #[test]
    fn months_follow_the_calendar_with_its_leap_years() {
        for (year, month, len) in [
            (2026, 1, 31),
            (2026, 2, 28),
            (2024, 2, 29),
            (2000, 2, 29),
            (2100, 2, 28),
            (2026, 4, 30),
            (2026, 12, 31),
        ] {
            let (next_year, next_month) = if month == 12 {
                (year + 1, 1)
            } else {
                (year, month + 1)
            };
            let expected = Bounds {
                start: at(year, month, 1, 0, 0, 0),
                end: at(next_year, next_month, 1, 0, 0, 0),
            };
            assert_eq!(expected.end - expected.start, u64::from(len) * DAY);
            for t in [
                expected.start,
                at(year, month, len / 2, 12, 30, 0),
                at(year, month, len, 23, 59, 59),
            ] {
                assert_eq!(Window::Month.bounds(t), expected, "{year}-{month}: {t}");
            }
            assert_eq!(Window::Month.bounds(expected.end).start, expected.end);
        }
        assert_eq!(
            Window::Month.bounds(0),
            Bounds {
                start: 0,
                end: at(1970, 2, 1, 0, 0, 0)
            }
        );
    }

    #[test]
    fn a_clock_stepped_back_and_forth_across_an_edge_moves_between_the_two_windows() {
        // Each window's edge after the last second of February 2024 (a leap day): 2024-03-01
        // 00:00 for the hour, the day and the month, Monday 2024-03-04 for the week.
        for window in Window::ALL {
            let edge = window.bounds(at(2024, 2, 29, 23, 59, 59)).end;
            let before = window.bounds(edge - 1);
            let after = window.bounds(edge);
            assert_eq!(before.end, edge, "{window}");
            assert_eq!(after.start, edge, "{window}");
            assert!(after.end > after.start, "{window}");
            // Back across the edge, then forward again: the same two windows, as often as the
            // clock steps.
            for _ in 0..3 {
                assert_eq!(window.bounds(edge - 1), before, "{window}");
                assert_eq!(window.bounds(edge), after, "{window}");
            }
            assert_eq!(before.seconds_left(edge - 1), 1);
            assert_eq!(after.seconds_left(edge), after.end - edge);
            // A clock already past the end still waits a second.
            assert_eq!(before.seconds_left(edge + 10), 1);
        }
    }
}
