//! The schedule: a cron expression with a seconds field, read the way the scheduler reads it
//! (croner). Its errors name the field and its range, and a schedule that never fires (the
//! 31st of February) is refused rather than leaving the daemon idle forever.

use chrono::Utc;
use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds};

/// One of the six fields: its name, its range, and what else it accepts.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    also: &'static str,
}

const FIELDS: [Field; 6] = [
    Field::new("second", 0, 59, ""),
    Field::new("minute", 0, 59, ""),
    Field::new("hour", 0, 23, ""),
    Field::new(
        "day-of-month",
        1,
        31,
        " (L: the last day; 15W: the weekday nearest the 15th)",
    ),
    Field::new("month", 1, 12, " or JAN-DEC"),
    Field::new(
        "day-of-week",
        0,
        7,
        " or SUN-SAT (0 and 7: Sunday; 5L: the last Friday; 1#2: the second Monday)",
    ),
];

impl Field {
    const fn new(name: &'static str, min: u32, max: u32, also: &'static str) -> Field {
        Field {
            name,
            min,
            max,
            also,
        }
    }
}

/// Checks a cron expression the way the scheduler will read it (6 fields, seconds first,
/// day-of-month and day-of-week both required to match when both are given), and that it
/// fires at all.
pub fn parse_cron(expr: &str) -> Result<Cron, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 6 {
        return Err(format!(
            "cron needs 6 fields (seconds minutes hours day-of-month month day-of-week), got {}; e.g. \"0 0 0 * * *\" for daily at midnight",
            fields.len()
        ));
    }
    let cron = parser().parse(expr).map_err(|e| explain(&fields, &e))?;
    if cron.find_next_occurrence(&Utc::now(), false).is_err() {
        return Err(never_fires(&fields));
    }
    Ok(cron)
}

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Required)
        .dom_and_dow(true)
        .build()
}

/// What is wrong, field by field: each field is tried on its own in an expression that is
/// otherwise valid.
fn explain(fields: &[&str], err: &CronError) -> String {
    let wrong: Vec<String> = FIELDS
        .iter()
        .zip(fields)
        .enumerate()
        .filter(|(i, (_, text))| {
            let mut probe = ["0", "0", "0", "*", "*", "*"];
            probe[*i] = text;
            parser().parse(&probe.join(" ")).is_err()
        })
        .map(|(_, (field, text))| field_problem(field, text))
        .collect();
    match wrong.is_empty() {
        true => format!("not a valid cron expression: {err}"),
        false => wrong.join("; "),
    }
}

/// `minute 61 is out of range 0-59`, or what the field may hold.
fn field_problem(f: &Field, text: &str) -> String {
    match out_of_range(f, text) {
        Some(n) => format!("{} {n} is out of range {}-{}", f.name, f.min, f.max),
        None => format!(
            "{} {text:?} is not valid: use {}-{}{}, *, a range a-b, a list a,b or a step */n",
            f.name, f.min, f.max, f.also
        ),
    }
}

/// The first value of the field outside its range (not counting steps and `#n`).
fn out_of_range(f: &Field, text: &str) -> Option<u64> {
    text.split(',')
        .flat_map(|part| {
            let value = part.split(['/', '#']).next().unwrap_or("");
            value.split('-').map(|v| v.trim_end_matches(['L', 'W']))
        })
        .filter_map(|v| v.parse::<u64>().ok())
        .find(|&n| n < u64::from(f.min) || n > u64::from(f.max))
}

/// A valid expression whose date fields never meet.
fn never_fires(fields: &[&str]) -> String {
    let dates: Vec<String> = FIELDS[3..]
        .iter()
        .zip(&fields[3..])
        .filter(|(_, text)| !matches!(**text, "*" | "?"))
        .map(|(f, text)| format!("{} {text}", f.name))
        .collect();
    let (last, rest) = dates
        .split_last()
        .map_or(("", &[][..]), |(l, r)| (l.as_str(), r));
    let named = match rest.is_empty() {
        true => last.to_string(),
        false => format!("{} and {last}", rest.join(", ")),
    };
    format!("never fires: no date matches {named} (cron finds no such time in any year ahead)")
}
