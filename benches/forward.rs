//! Time of one decode step of the model alone (no engine, no sampling): milliseconds per
//! token at positions 64..192 of one slot, with the output head (logits wanted) and
//! without it, which splits a decode step between the layers and the head.
//!
//! Then one decode step of 8 slots (`SLUICE_BENCH_SLOTS`) at positions 128..256 (a row and
//! logits for each): the step of that many running streams; and the same step without the
//! head at positions 256..384. Last, the prefill of one 512-token prompt (logits for its
//! last row only), `SLUICE_BENCH_PREFILLS` times (default 3).
//!
//! Then what verifying drafts costs (speculative decoding): a step of `s` slots at
//! position 256 each carrying 1 + k rows, every row's logits wanted, for s in 1, 4, 8, 16
//! and k in 0, 1, 2, 4, 8: the time relative to k = 0 says how many accepted drafts a
//! step needs to pay for itself.
//!
//! `cargo bench --bench forward` (the default model), or `SLUICE_MODEL=FILE.gguf`.
//! `SLUICE_BENCH_STAGES=1` instead splits one decode token's time into its stages (the
//! matmuls, attention, norms, ...: `sluice_kernels::stages`).
//! `SLUICE_BENCH_PREFETCH=4096:l2,2048:l1` instead compares decode under prefetch
//! settings of the matmul kernels, side by side (`compare_prefetch`);
//! `SLUICE_BENCH_PREFETCH=8192:l2,8192:l2:alone` decode with and without fetching ahead
//! (the next matrix by idle helpers, a row's keys and values before its attention);
//! `SLUICE_BENCH_PREFETCH=8192:l2,8192:l2:nogfni` with and without the GFNI nibble split;
//! `SLUICE_BENCH_PREFETCH=8192:l2,8192:l2:generic` the one-row loops compiled for
//! their case against the general loop (`sluice_kernels::set_specialised`);
//! `SLUICE_BENCH_PREFETCH=8192:l2,8192:l2:even` a decode matmul's halving tasks against
//! equal ones (`sluice_kernels::set_halving`); a field `w2048` sets the distance of 8-bit
//! quants (Q8_0) apart, which is otherwise the CPU's default
//! (`sluice_kernels::set_prefetch_whole_bytes`), and a field `v4` how many key blocks
//! ahead decode attention's weighted sums ask for their values
//! (`sluice_kernels::set_attention_values_ahead`; `v0`: none).
//! `SLUICE_BENCH_AT=500` decodes those (and `SLUICE_BENCH_STAGES`' tokens) from position
//! 500 instead of 64 (up to 8,000), after a prompt that wrote every position before it.
//! `SLUICE_BENCH_PROMPT=4000` instead times one 4,000-token prompt prefilled in chunks of
//! 64 rows, as the server feeds a prompt arriving alone at the default 32 slots (`4000:512`
//! for chunks of 512), three times; with `SLUICE_BENCH_STAGES=1` the third is split into
//! its stages. `SLUICE_BENCH_AT`, `_PREFETCH` and `_SLOTS` do not apply to it.

use sluice::engine::GgufFile;
use sluice::engine::testing::{KvSlab, TokenRow, load_model};
use std::time::Instant;

fn main() {
    let path = std::env::var_os("SLUICE_MODEL")
        .map(Into::into)
        .unwrap_or_else(sluice::config::default_model_path);
    let file = GgufFile::open(&path).expect("a GGUF file");
    let m = load_model(&file).expect("a model sluice runs");
    println!("{}", path.display());
    if let Ok(spec) = std::env::var("SLUICE_BENCH_PROMPT") {
        return prompt(&*m, &spec);
    }
    let s = m.shape().clone();
    // `SLUICE_BENCH_AT`: the position `SLUICE_BENCH_PREFETCH` and `SLUICE_BENCH_STAGES`
    // decode from (default 64).
    // A prompt writes every position before it, and before 64, where the other runs
    // start (keys and values never written would read the kernel's shared zero page,
    // which never leaves the cache).
    let at: usize = std::env::var("SLUICE_BENCH_AT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
        .clamp(1, 8000);
    // Room for the prompt and every run after it (the stages' positions `at..at + 128`).
    let mut kv = KvSlab::contiguous(
        s.n_layers,
        s.n_kv_heads,
        s.head_dim,
        1,
        (at + 160).max(1024),
    );
    let rows: Vec<TokenRow> = (0..at.max(64))
        .map(|p| TokenRow {
            token: 100 + p as u32,
            slot: 0,
            pos: p,
        })
        .collect();
    m.forward(&mut kv, &rows, &[rows.len() - 1]);
    if let Ok(settings) = std::env::var("SLUICE_BENCH_PREFETCH") {
        return compare_prefetch(&*m, &mut kv, &settings, at);
    }
    if std::env::var_os("SLUICE_BENCH_STAGES").is_some() {
        return stages(&*m, &mut kv, at);
    }
    for want in [true, false] {
        let t = Instant::now();
        for p in 64..192 {
            let w: &[usize] = if want { &[0] } else { &[] };
            m.forward(
                &mut kv,
                &[TokenRow {
                    token: 7,
                    slot: 0,
                    pos: p,
                }],
                w,
            );
        }
        println!(
            "head {}: {:.2} ms/token",
            if want { "included" } else { "left out" },
            t.elapsed().as_secs_f64() * 1000.0 / 128.0
        );
    }
    let slots: usize = std::env::var("SLUICE_BENCH_SLOTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, slots, 1024);
    prefill_slots(&*m, &mut kv, slots, 128, &[127]);
    let want: Vec<usize> = (0..slots).collect();
    // One logits buffer for every step, as the engine keeps one (a fresh 32 MB buffer a
    // step would time the kernel's page faults).
    let mut logits = Vec::new();
    // The steps with every row's logits, then without the output head (at the next 128
    // positions, so attention reads a little more): the difference is the head's share.
    for (positions, want, label) in [
        (128..256, &want[..], ""),
        (256..384, &[], ", head left out"),
    ] {
        let t = Instant::now();
        for p in positions {
            let rows: Vec<TokenRow> = (0..slots)
                .map(|slot| TokenRow {
                    token: 7 + slot as u32,
                    slot,
                    pos: p,
                })
                .collect();
            m.forward_into(&mut kv, &rows, want, &mut logits);
        }
        println!(
            "{slots} slots{label}: {:.2} ms/step",
            t.elapsed().as_secs_f64() * 1000.0 / 128.0
        );
    }
    verification(&*m, &s);
    let prefills: usize = std::env::var("SLUICE_BENCH_PREFILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, 1, 1024);
    let rows: Vec<TokenRow> = (0..512)
        .map(|p| TokenRow {
            token: 100 + (p * 13) as u32 % 1000,
            slot: 0,
            pos: p,
        })
        .collect();
    for _ in 0..prefills {
        let t = Instant::now();
        m.forward(&mut kv, &rows, &[511]);
        let secs = t.elapsed().as_secs_f64();
        println!(
            "prefill 512: {:.1} ms ({:.1} tok/s)",
            secs * 1000.0,
            512.0 / secs
        );
    }
}

/// Fills positions `0..len` of each of `slots` slots with a prompt of its own, wanting the
/// logits of the rows in `want`.
fn prefill_slots(
    m: &dyn sluice::engine::testing::Model,
    kv: &mut KvSlab,
    slots: usize,
    len: usize,
    want: &[usize],
) {
    for slot in 0..slots {
        let rows: Vec<TokenRow> = (0..len)
            .map(|p| TokenRow {
                token: 100 + (p * 7 + slot) as u32 % 1000,
                slot,
                pos: p,
            })
            .collect();
        m.forward(kv, &rows, want);
    }
}

/// Steps of `slots` sequences at positions 256.. each verifying `k` drafts (see the module
/// documentation).
fn verification(m: &dyn sluice::engine::testing::Model, s: &sluice::engine::testing::Shape) {
    let mut logits = Vec::new();
    for slots in [1usize, 4, 8, 16] {
        let mut kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, slots, 512);
        prefill_slots(m, &mut kv, slots, 256, &[]);
        let mut line = format!("verify, {slots} slots:");
        let mut base = 0.0;
        for k in [0usize, 1, 2, 4, 8] {
            let reps = 24;
            let t = Instant::now();
            for _ in 0..reps {
                let rows: Vec<TokenRow> = (0..slots)
                    .flat_map(|slot| {
                        (0..=k).map(move |i| TokenRow {
                            token: 7 + (slot + i) as u32,
                            slot,
                            pos: 256 + i,
                        })
                    })
                    .collect();
                let want: Vec<usize> = (0..rows.len()).collect();
                m.forward_into(&mut kv, &rows, &want, &mut logits);
            }
            let ms = t.elapsed().as_secs_f64() * 1000.0 / reps as f64;
            if k == 0 {
                base = ms;
            }
            line += &format!(" k={k} {ms:.2} ms ({:.2}x)", ms / base);
        }
        println!("{line}");
    }
}

/// Where one decode token's time goes (`SLUICE_BENCH_STAGES=1`): 128 tokens at positions
/// `at..at + 128` of one slot (`SLUICE_BENCH_AT`, default 64), logits wanted, with
/// `sluice_kernels::stages`' clock on; per stage its microseconds and calls a token and
/// its share of the token. A token's serial work is every stage but the matmuls' (q, k, v;
/// o; gate, up; down; output head), less the parallel regions inside them (attention of
/// longer rows, a batch's row-wise passes).
fn stages(m: &dyn sluice::engine::testing::Model, kv: &mut KvSlab, at: usize) {
    use sluice_kernels::stages;
    let mut logits = Vec::new();
    let mut token = |pos: usize, logits: &mut Vec<f32>| {
        let row = TokenRow {
            token: 7,
            slot: 0,
            pos,
        };
        m.forward_into(kv, &[row], &[0], logits);
    };
    (at..at + 16).for_each(|p| token(p, &mut logits));
    stages::set_on(true);
    stages::take();
    let start = Instant::now();
    (at..at + 128).for_each(|p| token(p, &mut logits));
    let total = start.elapsed().as_secs_f64() * 1e6 / 128.0;
    stages::set_on(false);
    println!(
        "one decode token at positions {at}..{}: {total:.1} µs",
        at + 128
    );
    stage_table(total, 128.0, "token", false);
}

/// The stages' times taken since the clock was turned on, over `units` units (tokens, or
/// prompts) of `total` µs each: per stage its time and calls a unit and its share. Times
/// print in µs, or in ms with `in_ms` (a whole prompt's stages run to millions of µs).
fn stage_table(total: f64, units: f64, unit: &str, in_ms: bool) {
    use sluice_kernels::stages;
    let (per, label) = if in_ms { (1e-3, "ms") } else { (1.0, "µs") };
    let total = total * per;
    println!("| stage | {label}/{unit} | calls/{unit} | of the {unit} |");
    println!("|---|---:|---:|---:|");
    let (regions, staged): (Vec<_>, Vec<_>) = stages::take()
        .into_iter()
        .partition(|(name, ..)| *name == stages::REGIONS);
    let row = |name: &str, took: std::time::Duration, calls: u64| {
        let t = took.as_secs_f64() * 1e6 * per / units;
        let calls = calls as f64 / units;
        println!(
            "| {name} | {t:.1} | {calls:.1} | {:.1}% |",
            100.0 * t / total
        );
        t
    };
    let sum: f64 = staged
        .iter()
        .map(|&(name, took, calls)| row(name, took, calls))
        .sum();
    let rest = total - sum;
    let share = 100.0 * rest / total;
    println!("| rest (embedding, output norm, buffers) | {rest:.1} | | {share:.1}% |");
    for (name, took, calls) in regions {
        row(name, took, calls);
    }
}

/// One prompt of `n` tokens prefilled in chunks of `chunk` rows (`SLUICE_BENCH_PROMPT=N`
/// or `N:CHUNK`; 64 by default, the server's `--max-batch-tokens` at 32 slots), as the
/// engine feeds a prompt that arrives alone, the last row's logits wanted: its time, three times; with
/// `SLUICE_BENCH_STAGES=1`, where the third one's time went.
fn prompt(m: &dyn sluice::engine::testing::Model, spec: &str) {
    use sluice_kernels::stages;
    let (n, chunk) = spec.split_once(':').unwrap_or((spec, "64"));
    let (n, chunk): (usize, usize) = (
        n.parse().expect("SLUICE_BENCH_PROMPT=N[:CHUNK]"),
        chunk.parse().expect("SLUICE_BENCH_PROMPT=N[:CHUNK]"),
    );
    let (n, chunk) = (n.max(1), chunk.max(1));
    let s = m.shape().clone();
    let mut kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, 1, n + 16);
    let staged = std::env::var_os("SLUICE_BENCH_STAGES").is_some();
    for round in 0..3 {
        if staged && round == 2 {
            stages::set_on(true);
            stages::take();
        }
        let t = Instant::now();
        for c in (0..n).step_by(chunk) {
            let rows: Vec<TokenRow> = (c..(c + chunk).min(n))
                .map(|p| TokenRow {
                    token: 100 + (p * 13) as u32 % 1000,
                    slot: 0,
                    pos: p,
                })
                .collect();
            let want: &[usize] = if c + chunk >= n {
                &[rows.len() - 1]
            } else {
                &[]
            };
            m.forward(&mut kv, &rows, want);
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        println!(
            "prompt of {n} in chunks of {chunk}: {ms:.1} ms ({:.1} tok/s)",
            n as f64 / ms * 1e3
        );
        if staged && round == 2 {
            stages::set_on(false);
            stage_table(ms * 1e3, 1.0, "prompt", true);
        }
    }
}

/// Decode steps (one slot, logits wanted) under each prefetch setting of `settings`
/// ("4096:l2,2048:l1,0:off": bytes ahead and where to; a field `:alone` turns off
/// fetching ahead, `sluice_kernels::set_fetch_ahead`, and `:nogfni` the GFNI nibble split,
/// `sluice_kernels::set_gfni`), in alternation, 16 tokens at a
/// time, 30 times each: on a machine whose memory bandwidth moves from minute to minute,
/// only settings measured side by side in one process compare.
fn compare_prefetch(
    m: &dyn sluice::engine::testing::Model,
    kv: &mut KvSlab,
    settings: &str,
    at: usize,
) {
    use sluice_kernels::Prefetch;
    type Setting<'a> = (usize, Option<usize>, Prefetch, [bool; 4], usize, &'a str);
    let settings: Vec<Setting> = settings
        .split(',')
        .map(|c| {
            let mut fields = c.split(':');
            let ahead = fields.next().unwrap_or_default();
            let (mut hint, mut fetch, mut gfni, mut generic) = (Prefetch::L2, true, true, false);
            let (mut even, mut whole, mut va) = (false, None, sluice_kernels::VALUES_AHEAD);
            for f in fields {
                match f {
                    f if f.starts_with('w') => {
                        whole = Some(f[1..].parse().expect("w and the 8-bit distance"))
                    }
                    "l1" => hint = Prefetch::L1,
                    "l2" => hint = Prefetch::L2,
                    "nta" => hint = Prefetch::Nta,
                    "off" => hint = Prefetch::Off,
                    "alone" => fetch = false,
                    "nogfni" => gfni = false,
                    "generic" => generic = true,
                    "even" => even = true,
                    f if f.starts_with('v') => va = f[1..].parse().expect("vN"),
                    other => panic!(
                        "prefetch field {other}: l1, l2, nta, off, alone, nogfni, generic, \
                         even, wN or vN"
                    ),
                }
            }
            (
                ahead.parse().expect("bytes ahead"),
                whole,
                hint,
                [fetch, gfni, generic, even],
                va,
                c,
            )
        })
        .collect();
    let mut times = vec![Vec::new(); settings.len()];
    for _ in 0..30 {
        for (&(ahead, whole, hint, [fetch, gfni, generic, even], va, _), t) in
            settings.iter().zip(times.iter_mut())
        {
            sluice_kernels::set_prefetch(ahead, hint);
            sluice_kernels::set_prefetch_whole_bytes(whole);
            sluice_kernels::set_fetch_ahead(fetch);
            sluice_kernels::set_gfni(gfni);
            sluice_kernels::set_specialised(!generic);
            sluice_kernels::set_halving(!even);
            sluice_kernels::set_attention_values_ahead(va);
            let start = Instant::now();
            for pos in at..at + 16 {
                let row = TokenRow {
                    token: 7,
                    slot: 0,
                    pos,
                };
                m.forward(kv, &[row], &[0]);
            }
            t.push(start.elapsed().as_secs_f64() / 16.0 * 1e3);
        }
    }
    for ((.., name), t) in settings.iter().zip(times.iter_mut()) {
        t.sort_by(f64::total_cmp);
        println!(
            "prefetch {name}: fastest {:.3}, quartile {:.3}, median {:.3} ms/token",
            t[0],
            t[t.len() / 4],
            t[t.len() / 2]
        );
    }
}
