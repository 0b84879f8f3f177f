//! How times are written for people and JSON: RFC 3339 in UTC to the second, and the short
//! date of reasons. Shared by the core (reasons, alarms) and the CLI.

use time::{OffsetDateTime, UtcOffset};

/// RFC 3339 in UTC with a `Z`, seconds precision (`2026-11-21T00:10:03Z`).
pub fn rfc3339(t: OffsetDateTime) -> String {
    let f = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.to_offset(UtcOffset::UTC).format(&f).unwrap_or_default()
}

/// The date and minute in UTC, for reasons (`2026-11-21 00:10 UTC`).
pub fn utc_minute(t: OffsetDateTime) -> String {
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
    t.to_offset(UtcOffset::UTC).format(&f).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn both_forms_are_utc_whatever_the_offset() {
        let t = datetime!(2026-11-21 01:10:03.5 +01:00);
        assert_eq!(rfc3339(t), "2026-11-21T00:10:03Z");
        assert_eq!(utc_minute(t), "2026-11-21 00:10 UTC");
    }
}
