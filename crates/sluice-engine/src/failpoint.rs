//! Fault injection for the resilience tests: `SLUICE_FAILPOINTS=engine-panic,handler-panic`
//! makes the engine thread (at prefill) or a handler (`/tokenize`) panic when the request's
//! text contains [`TRIGGER`]. Without the variable nothing here ever fires.

use std::sync::OnceLock;

/// The text that trips an enabled failpoint.
pub const TRIGGER: &str = "__sluice_failpoint__";

/// Whether failpoint `name` is enabled.
pub fn enabled(name: &str) -> bool {
    static SET: OnceLock<Vec<String>> = OnceLock::new();
    SET.get_or_init(|| {
        std::env::var("SLUICE_FAILPOINTS")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
    .iter()
    .any(|s| s == name)
}

/// Panics if failpoint `name` is enabled and `text` contains the trigger.
pub fn check(name: &str, text: &str) {
    if enabled(name) && text.contains(TRIGGER) {
        panic!("failpoint {name} fired");
    }
}
