//! Periods on the command line (`--consolidate-every 6h`): whole numbers with a unit — `d`, `h`,
//! `m`, `s` — alone or in a row (`1h30m`), at least one second.

use std::time::Duration;

const EXAMPLE: &str = "give a whole number with a unit (s, m, h or d), e.g. 6h, 30m or 90s";

/// Parses a period; the error says what is wrong and shows the form (clap names the flag).
pub(super) fn parse_period(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("empty; {EXAMPLE}"));
    }
    let mut secs: u64 = 0;
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return Err(format!("{text:?} is not a period: {EXAMPLE}")),
        };
        if digits.is_empty() {
            return Err(format!("{text:?} is not a period: {EXAMPLE}"));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("{text:?} is too long a period: {EXAMPLE}"))?;
        secs = n
            .checked_mul(unit)
            .and_then(|v| secs.checked_add(v))
            .ok_or_else(|| format!("{text:?} is too long a period: {EXAMPLE}"))?;
        digits.clear();
    }
    let zero = secs == 0 && digits.chars().all(|c| c == '0');
    if !digits.is_empty() && !zero {
        return Err(format!("{text:?} has no unit: {EXAMPLE}"));
    }
    if zero {
        return Err(format!(
            "{text:?} is no period at all: give at least 1s, e.g. 6h (leave the flag out to never consolidate on a schedule)"
        ));
    }
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_with_units_parse_and_anything_else_is_refused_with_an_example() {
        assert_eq!(parse_period("6h"), Ok(Duration::from_secs(21_600)));
        assert_eq!(parse_period("30m"), Ok(Duration::from_secs(1_800)));
        assert_eq!(parse_period("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_period("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_period(" 1h30m "), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_period("2d"), Ok(Duration::from_secs(172_800)));
        for bad in [
            "0", "0s", "0h0m", "", "6", "h", "6 h", "-1h", "1.5h", "6x", "soon",
        ] {
            let e = parse_period(bad).unwrap_err();
            assert!(e.contains("e.g. 6h"), "{bad:?}: {e}");
        }
        assert!(parse_period("99999999999999999999d").is_err());
        for zero in ["0", "0s", "00m"] {
            assert!(
                parse_period(zero).unwrap_err().contains("at least 1s"),
                "{zero}"
            );
        }
        assert!(parse_period("6").unwrap_err().contains("no unit"));
    }
}
