//! The checks every flag's value passes at start-up, and the error naming the flag.

use std::time::Duration;

/// A flag's value outside its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A number outside its range (or NaN).
    #[error("--{flag} {value}: must be {range}")]
    Range {
        /// The flag, without dashes.
        flag: &'static str,
        /// The value given.
        value: String,
        /// The range in words.
        range: String,
    },
    /// Another problem with a flag's value.
    #[error("--{flag}: {reason}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Parses `--quantize`.
pub fn quantize(v: &str) -> Result<sluice_engine::Quantize, ConfigError> {
    sluice_engine::Quantize::parse(v).ok_or_else(|| ConfigError::Invalid {
        flag: "quantize",
        reason: format!("`{v}` is not one of q8_0, q4_0, q4_k, none"),
    })
}

pub(super) fn int(
    flag: &'static str,
    v: usize,
    lo: usize,
    hi: usize,
) -> Result<usize, ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(ConfigError::Range {
            flag,
            value: v.to_string(),
            range: format!("between {lo} and {hi}"),
        })
    }
}

pub(super) fn seconds(flag: &'static str, v: f64, hi: f64) -> Result<Duration, ConfigError> {
    if v.is_finite() && (0.0..=hi).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(ConfigError::Range {
            flag,
            value: v.to_string(),
            range: format!("a number of seconds between 0 and {hi}"),
        })
    }
}

/// A connection timeout: between 0.1 s and an hour.
pub(super) fn at_least_100ms(flag: &'static str, v: f64) -> Result<Duration, ConfigError> {
    match seconds(flag, v, 3600.0)? {
        d if d < Duration::from_millis(100) => Err(ConfigError::Range {
            flag,
            value: v.to_string(),
            range: "a number of seconds between 0.1 and 3600".into(),
        }),
        d => Ok(d),
    }
}
