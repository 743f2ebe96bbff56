//! What transformers gives chat templates beyond Jinja, as Python does it: the `tojson`
//! filter is `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`, so that `{{ tools | tojson }}` writes `{"type": "function", ...}`
//! (with the spaces, keys in the order given, no HTML escaping) as the model saw in
//! training (minijinja's own filter writes compact, HTML-escaped JSON); and
//! `strftime_now(format)` is today's date and time (UTC) through `strftime`.

use minijinja::value::Kwargs;
use minijinja::{Error, ErrorKind, Value};
use serde_json::Value as Json;

/// `value | tojson(indent=None, ensure_ascii=False, separators=None, sort_keys=False)`.
pub fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let (item, key) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair",
            ));
        }
        // Python's defaults: no space before a newline when indenting.
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    let style = Style {
        indent,
        item: &item,
        key: &key,
        ascii: ensure_ascii.unwrap_or(false),
        sort: sort_keys.unwrap_or(false),
    };
    write(&json, &style, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

struct Style<'a> {
    indent: Option<usize>,
    item: &'a str,
    key: &'a str,
    ascii: bool,
    sort: bool,
}

/// A newline and the indentation of `level` (nothing when not indenting).
fn newline(style: &Style, level: usize, out: &mut String) {
    if let Some(n) = style.indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', n * level));
    }
}

fn write(v: &Json, style: &Style, level: usize, out: &mut String) {
    match v {
        Json::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(style.item);
                }
                newline(style, level + 1, out);
                write(x, style, level + 1, out);
            }
            newline(style, level, out);
            out.push(']');
        }
        Json::Object(map) if !map.is_empty() => {
            let mut entries: Vec<(&String, &Json)> = map.iter().collect();
            if style.sort {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, x)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(style.item);
                }
                newline(style, level + 1, out);
                string(k, style.ascii, out);
                out.push_str(style.key);
                write(x, style, level + 1, out);
            }
            newline(style, level, out);
            out.push('}');
        }
        Json::String(s) => string(s, style.ascii, out),
        // Numbers, booleans, null, and empty containers as serde_json writes them.
        other => out.push_str(&other.to_string()),
    }
}

/// A JSON string as Python writes it (`ensure_ascii`: every non-ASCII character escaped,
/// as UTF-16 code units).
fn string(s: &str, ascii: bool, out: &mut String) {
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
            c if (c as u32) < 0x20 || (ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `strftime_now(format)`: the time now (UTC), formatted.
pub fn strftime_now(format: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(secs, format)
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
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];

/// `format` at `secs` after the Unix epoch (UTC): `%Y %y %m %d %e %B %b %A %a %H %M %S %j
/// %%`, and `%-d`, `%-m`, `%-H` without padding; anything else is written as it is.
fn strftime(secs: u64, format: &str) -> String {
    let days = (secs / 86_400) as i64;
    let (y, m, d) = civil(days);
    let (hh, mm, ss) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    let yday = days - civil_days(y, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        let pad = spec != Some('-');
        if !pad {
            spec = chars.next();
        }
        let num = |n: u64, out: &mut String| match pad {
            true => out.push_str(&format!("{n:02}")),
            false => out.push_str(&n.to_string()),
        };
        match spec {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => num((y.rem_euclid(100)) as u64, &mut out),
            Some('m') => num(m as u64, &mut out),
            Some('d') => num(d as u64, &mut out),
            Some('e') => out.push_str(&format!("{d:>2}")),
            Some('B') => out.push_str(MONTHS[m as usize - 1]),
            Some('b') => out.push_str(&MONTHS[m as usize - 1][..3]),
            Some('A') => out.push_str(DAYS[days.rem_euclid(7) as usize]),
            Some('a') => out.push_str(&DAYS[days.rem_euclid(7) as usize][..3]),
            Some('H') => num(hh, &mut out),
            Some('M') => num(mm, &mut out),
            Some('S') => num(ss, &mut out),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Year, month and day of `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
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

/// Days from 1970-01-01 to `y-m-d`.
fn civil_days(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, ctx: Json) -> String {
        let mut env = minijinja::Environment::new();
        env.add_filter("tojson", tojson);
        env.render_str(template, ctx).unwrap()
    }

    #[test]
    fn formats_dates_as_strftime_does() {
        // Values from Python's datetime.utcfromtimestamp(t).strftime(...).
        assert_eq!(
            strftime(1_722_394_309, "%Y-%m-%d %H:%M:%S"),
            "2024-07-31 02:51:49"
        );
        assert_eq!(
            strftime(1_721_999_109, "%d %b %Y, %A %B %-d %j %%"),
            "26 Jul 2024, Friday July 26 208 %"
        );
        assert_eq!(strftime(0, "%a %Y-%m-%d"), "Thu 1970-01-01");
        assert_eq!(civil_days(2024, 7, 26), 19_930);
    }

    #[test]
    fn writes_json_as_python_does() {
        let v = serde_json::json!({"type": "function", "a": [1, 2.5, true, null], "s": "é<\n", "e": {}});
        assert_eq!(
            render("{{ v | tojson }}", serde_json::json!({"v": v})),
            r#"{"type": "function", "a": [1, 2.5, true, null], "s": "é<\n", "e": {}}"#
        );
        assert_eq!(
            render(
                "{{ v | tojson(indent=2) }}",
                serde_json::json!({"v": {"a": [1], "b": "x"}})
            ),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": \"x\"\n}"
        );
        assert_eq!(
            render(
                "{{ v | tojson(ensure_ascii=True) }}",
                serde_json::json!({"v": "é😀"})
            ),
            r#""\u00e9\ud83d\ude00""#
        );
    }
}
