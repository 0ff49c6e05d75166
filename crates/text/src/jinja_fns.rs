//! Functions and filters that Hugging Face's chat-template environment provides and plain
//! Jinja lacks: `raise_exception`, `strftime_now`, and a `tojson` that writes what Python's
//! `json.dumps` writes.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// `raise_exception(message)`: fails the render with the template's message.
pub(crate) fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("the template raised an exception: {message}"),
    ))
}

/// `strftime_now(format)`: the current time formatted like C's `strftime`. Time is UTC (the
/// server's zone is not the user's anyway). Supported: `%Y %y %m %d %e %H %I %M %S %p %j %A %a
/// %B %b %h %%`; `%-d`-style flags drop padding; anything else is kept as written.
pub(crate) fn strftime_now(format: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    strftime(&format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Formats `secs` since the Unix epoch (UTC).
///
/// Example: `strftime("%d %b %Y", 1_700_000_000)` is `"14 Nov 2023"`.
pub fn strftime(format: &str, secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let weekday = (days + 4).rem_euclid(7) as usize; // 1970-01-01 was a Thursday.
    let year_day = days - days_from_civil(year, 1, 1) + 1;

    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let no_pad = chars.peek() == Some(&'-');
        if no_pad {
            chars.next();
        }
        let num = |out: &mut String, v: i64, width: usize| {
            let _ = if no_pad {
                write!(out, "{v}")
            } else {
                write!(out, "{v:0width$}")
            };
        };
        match chars.next() {
            Some('Y') => num(&mut out, year, 4),
            Some('y') => num(&mut out, year.rem_euclid(100), 2),
            Some('m') => num(&mut out, month as i64, 2),
            Some('d') => num(&mut out, day as i64, 2),
            Some('e') => {
                let _ = write!(out, "{day:>2}");
            }
            Some('H') => num(&mut out, hour as i64, 2),
            Some('I') => num(&mut out, ((hour + 11) % 12 + 1) as i64, 2),
            Some('M') => num(&mut out, minute as i64, 2),
            Some('S') => num(&mut out, second as i64, 2),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('j') => num(&mut out, year_day, 3),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('B') => out.push_str(MONTHS[month as usize - 1]),
            Some('b') | Some('h') => out.push_str(&MONTHS[month as usize - 1][..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if no_pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (year, month 1..=12, day 1..=31).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `tojson(indent=None, separators=None, sort_keys=False, ensure_ascii=False)`, written the way
/// Python's `json.dumps` writes it (Hugging Face's filter): `", "` and `": "` between items by
/// default, `","` between items when indenting, non-ASCII kept unless `ensure_ascii`, and no
/// HTML escaping.
/// `from_json`: the value a JSON text stands for (DeepSeek-V4's template reads tool-call
/// arguments given as a string this way); text that is not JSON is a render error.
pub(crate) fn from_json(text: &str) -> Result<Value, Error> {
    let parsed: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("from_json: {e}")))?;
    Ok(Value::from_serialize(&parsed))
}

pub(crate) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(usize::try_from(v)?)),
        },
    };
    let separators: Option<Value> = kwargs.get("separators")?;
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() && !v.is_undefined() => {
            let item = v.get_item_by_index(0)?;
            let key = v.get_item_by_index(1)?;
            match (item.as_str(), key.as_str()) {
                (Some(i), Some(k)) => (i.to_string(), k.to_string()),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ))
                }
            }
        }
        _ => (
            if indent.is_some() { "," } else { ", " }.to_string(),
            ": ".to_string(),
        ),
    };
    let style = JsonStyle {
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    style.write(&mut out, value, 0)?;
    Ok(Value::from(out))
}

struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl JsonStyle {
    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    fn write(&self, out: &mut String, value: &Value, depth: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => write_number(out, value),
            ValueKind::String => self.write_str(out, value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.write_container(out, depth, '[', ']', &items, |out, item| {
                    self.write(out, item, depth + 1)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                self.write_container(out, depth, '{', '}', &keys, |out, key| {
                    match key.as_str() {
                        Some(s) => self.write_str(out, s),
                        None => self.write_str(out, &key.to_string()),
                    }
                    out.push_str(&self.key_sep);
                    self.write(out, &value.get_item(key)?, depth + 1)
                })?;
            }
            _ => self.write_str(out, &value.to_string()),
        }
        Ok(())
    }

    fn write_container<T>(
        &self,
        out: &mut String,
        depth: usize,
        open: char,
        close: char,
        items: &[T],
        mut write_item: impl FnMut(&mut String, &T) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            self.newline(out, depth + 1);
            write_item(out, item)?;
        }
        if !items.is_empty() {
            self.newline(out, depth);
        }
        out.push(close);
        Ok(())
    }

    fn write_str(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Numbers as Python writes them: integers plainly, floats with a fraction or exponent.
fn write_number(out: &mut String, value: &Value) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
        return;
    }
    let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        let _ = write!(out, "{f:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_known_dates() {
        assert_eq!(strftime("%d %b %Y", 1_700_000_000), "14 Nov 2023");
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S", 0), "1970-01-01 00:00:00");
        assert_eq!(
            strftime("%A %B %-d, %j %%", 951_782_400),
            "Tuesday February 29, 060 %"
        );
        assert_eq!(strftime("%I %p %q", 13 * 3600), "01 PM %q");
    }

    #[test]
    fn from_json_reads_what_tojson_writes_and_refuses_other_text() {
        let mut env = minijinja::Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("from_json", from_json);
        env.add_filter("tojson", tojson);
        let t = "{% set a = s | from_json %}{% for k, v in a.items() %}{{ k }}={{ v | tojson }};{% endfor %}";
        let out = env
            .render_str(
                t,
                minijinja::context! { s => r#"{"city": "Paris", "days": [1, 2]}"# },
            )
            .unwrap();
        assert_eq!(out, r#"city="Paris";days=[1, 2];"#);
        let err = env
            .render_str(
                "{{ s | from_json }}",
                minijinja::context! { s => "{not json" },
            )
            .unwrap_err();
        assert!(err.to_string().contains("from_json"), "{err}");
    }

    #[test]
    fn civil_round_trips() {
        for days in [-1_000_000i64, -1, 0, 59, 60, 11_016, 19_675, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
