//! Unit tests of `config/mod.rs`: flag ranges and where the values land.

use std::time::Duration;

use clap::Parser;

use super::*;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    args: ServeArgs,
}

fn config(flags: &[&str]) -> Result<Config, String> {
    let mut argv = vec!["sluice"];
    argv.extend_from_slice(flags);
    let w = Wrap::try_parse_from(argv).map_err(|e| e.to_string())?;
    w.args.config().map_err(|e| e.to_string())
}

#[test]
fn out_of_range_values_name_their_flag() {
    for (flags, needle) in [
        (&["--shutdown-grace=-1"][..], "--shutdown-grace -1"),
        (&["--shutdown-grace", "NaN"], "--shutdown-grace NaN"),
        (&["--request-timeout", "1e300"], "--request-timeout"),
        (&["--request-timeout", "inf"], "--request-timeout"),
        (&["--slots", "0"], "--slots 0"),
        (&["--context", "1"], "--context 1"),
        (
            &["--max-new-tokens", "5000", "--context", "4096"],
            "--max-new-tokens 5000",
        ),
        (&["--min-bucket", "0"], "--min-bucket"),
        (&["--max-n", "0"], "--max-n"),
        (&["--max-body-bytes", "10"], "--max-body-bytes"),
        (&["--device", "cuda"], "--device"),
    ] {
        let e = config(flags).expect_err(needle);
        assert!(e.contains(needle), "{flags:?}: {e}");
    }
    assert!(
        config(&["--slots=-3"]).is_err(),
        "clap refuses negative counts"
    );
}

#[test]
fn the_batch_budget_must_hold_every_decode_row_and_a_prompt_chunk() {
    let e = config(&["--slots", "40", "--max-batch-tokens", "50"]).unwrap_err();
    assert!(e.contains("--max-batch-tokens") && e.contains("50") && e.contains("40 slots"));
    assert!(e.contains("at least 56"), "{e}");
    let c = config(&["--slots", "40"]).unwrap();
    assert_eq!(
        c.engine.max_batch_tokens, 72,
        "the default grows with the slots"
    );
    let c = config(&["--slots", "8", "--max-batch-tokens", "24"]).unwrap();
    assert_eq!(c.engine.max_batch_tokens, 24);
    assert!(c.engine.prefix_reuse);
    let c = config(&["--no-prefix-reuse", "--min-prefix-reuse", "64"]).unwrap();
    assert!(!c.engine.prefix_reuse);
    assert_eq!(c.engine.min_prefix_reuse, 64);
}

#[test]
fn zero_means_the_context_and_limits_land_in_their_sections() {
    let c = config(&["--context", "512", "--max-new-tokens", "16"]).unwrap();
    assert_eq!(c.limits.max_new_tokens, 16);
    assert_eq!(c.limits.max_prompt_tokens, 512);
    assert_eq!(c.engine.context, 512);
    assert_eq!(c.engine.request_timeout, Some(Duration::from_secs(600)));
    let c = config(&["--request-timeout", "0"]).unwrap();
    assert_eq!(c.engine.request_timeout, None);
    assert!(c.admin.is_none());
}

#[test]
fn the_pool_is_slots_times_2048_and_the_context_follows_the_model_within_it() {
    let mut c = config(&["--slots", "4"]).unwrap();
    assert_eq!(c.engine.kv_tokens(), 4 * 2048);
    c.fit_to_model(32_768);
    assert_eq!((c.engine.context, c.limits.context), (8192, 8192));
    assert_eq!(
        (c.limits.max_prompt_tokens, c.limits.max_new_tokens),
        (8192, 8192)
    );
    let mut c = config(&["--slots", "4", "--max-new-tokens", "100"]).unwrap();
    c.fit_to_model(4096);
    assert_eq!((c.engine.context, c.limits.max_new_tokens), (4096, 100));
    // A given context is kept, and sizes the default pool.
    let mut c = config(&["--slots", "2", "--context", "512"]).unwrap();
    c.fit_to_model(8192);
    assert_eq!((c.engine.context, c.engine.kv_tokens()), (512, 1024));
    let c = config(&["--kv-cache-tokens", "8192", "--context", "4096"]).unwrap();
    assert_eq!((c.engine.kv_tokens(), c.limits.kv_tokens), (8192, 8192));
}

#[test]
fn a_context_longer_than_the_pool_is_refused_naming_both() {
    let e = config(&["--kv-cache-tokens", "1000", "--context", "2000"]).unwrap_err();
    assert!(
        e.contains("--context") && e.contains("2000") && e.contains("1000"),
        "{e}"
    );
    let e = config(&["--kv-cache-tokens", "8"]).unwrap_err();
    assert!(e.contains("--kv-cache-tokens 8"), "{e}");
}

#[test]
fn speculation_is_on_by_default_and_off_turns_it_off() {
    let c = config(&[]).unwrap();
    assert_eq!((c.engine.spec_tokens, c.engine.spec_max_batch), (8, 8));
    let c = config(&["--speculative", "off", "--spec-tokens", "0"]).unwrap();
    assert_eq!(c.engine.spec_tokens, 0);
    let c = config(&["--spec-tokens", "3", "--spec-max-batch", "2"]).unwrap();
    assert_eq!((c.engine.spec_tokens, c.engine.spec_max_batch), (3, 2));
    let e = config(&["--spec-tokens", "0"]).unwrap_err();
    assert!(e.contains("--spec-tokens"), "{e}");
    assert!(config(&["--speculative", "eagle"]).is_err());
}
