//! Parsing of human-written byte sizes for `--memory` ("512M", "2G", "1.5GiB", "1048576").
//! Units are binary (K = 1024 bytes), as memory budgets usually are.

/// Parses a byte size; the error text is shown by clap after "invalid value '...'".
pub fn parse_size(text: &str) -> Result<usize, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => {
            return Err(format!(
                "unknown unit '{other}' (write a size such as 512M, 2G or 1048576)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| "not a size (write a size such as 512M, 2G or 1048576)".to_string())?;
    let bytes = value * (1u64 << shift) as f64;
    if bytes < 1.0 {
        return Err("the memory budget must be at least 1 byte".into());
    }
    if bytes > usize::MAX as f64 {
        return Err("the memory budget is larger than this machine can address".into());
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn accepts_units_and_plain_bytes() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2gib"), Ok(2 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size(" 7 "), Ok(7));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in ["", "M", "-1G", "0", "0.1", "12X", "1.2.3G", "abc", "1e9"] {
            assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
