//! Prometheus metrics: one typed `Metrics` struct, names as constants with unit suffixes,
//! bucket layouts as vLLM's so dashboards port.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

/// Seconds from request arrival to its first token.
pub const TTFT_SECONDS: &str = "sluice_time_to_first_token_seconds";
/// Seconds between consecutive tokens of a request.
pub const ITL_SECONDS: &str = "sluice_inter_token_latency_seconds";
/// Seconds from request arrival to its last token.
pub const E2E_SECONDS: &str = "sluice_e2e_request_latency_seconds";
/// Seconds a request waited for a slot.
pub const QUEUE_SECONDS: &str = "sluice_request_queue_time_seconds";
/// Seconds of one prefill pass.
pub const PREFILL_SECONDS: &str = "sluice_prefill_duration_seconds";
/// Seconds of one decode step.
pub const DECODE_STEP_SECONDS: &str = "sluice_decode_step_duration_seconds";
/// Sequences in one decode step.
pub const DECODE_BATCH: &str = "sluice_decode_batch_size";
/// Prompt tokens per request.
pub const PROMPT_TOKENS: &str = "sluice_request_prompt_tokens";
/// Generated tokens per request.
pub const GENERATION_TOKENS: &str = "sluice_request_generation_tokens";
/// Finished requests by route and finish reason.
pub const REQUESTS_TOTAL: &str = "sluice_requests_total";
/// Prompt tokens prefilled.
pub const PROMPT_TOKENS_TOTAL: &str = "sluice_prompt_tokens_total";
/// Tokens generated.
pub const GENERATION_TOKENS_TOTAL: &str = "sluice_generation_tokens_total";
/// Generated tokens inside reasoning models' thinking sections.
pub const REASONING_TOKENS_TOTAL: &str = "sluice_reasoning_tokens_total";
/// Requests prefilled, by bucket.
pub const PREFILL_REQUESTS_TOTAL: &str = "sluice_prefill_requests_total";
/// Padding tokens carried by prefill bucket shapes.
pub const PREFILL_PADDING_TOTAL: &str = "sluice_prefill_padding_tokens_total";
/// Requests refused, by reason.
pub const REJECTED_TOTAL: &str = "sluice_requests_rejected_total";
/// Weight reloads, by outcome.
pub const RELOADS_TOTAL: &str = "sluice_weight_reloads_total";
/// Sequences in slots.
pub const RUNNING: &str = "sluice_requests_running";
/// Requests waiting for a slot.
pub const WAITING: &str = "sluice_requests_waiting";
/// Slots in use.
pub const SLOTS_USED: &str = "sluice_kv_slots_used";
/// Slots in the slab (not `_total`: promtool reserves that suffix for counters).
pub const SLOTS_CAPACITY: &str = "sluice_kv_slots_capacity";
/// Fraction of the KV pool's blocks held by running sequences.
pub const KV_USAGE: &str = "sluice_kv_cache_usage_ratio";
/// Blocks in the KV pool (not `_total`: promtool reserves that suffix for counters).
pub const KV_BLOCKS_CAPACITY: &str = "sluice_kv_blocks_capacity";
/// Bytes of keys and values the KV pool reserves (backed by memory as blocks are first
/// used: the resident size grows toward it as the prefix cache fills the pool).
pub const KV_POOL_BYTES: &str = "sluice_kv_pool_bytes";
/// KV blocks held by running sequences.
pub const KV_BLOCKS_USED: &str = "sluice_kv_blocks_used";
/// KV blocks in the prefix cache (held or idle).
pub const KV_BLOCKS_CACHED: &str = "sluice_kv_blocks_cached";
/// Idle cached KV blocks evicted to make room.
pub const KV_EVICTIONS_TOTAL: &str = "sluice_kv_evictions_total";
/// Running sequences preempted (their blocks freed, their tokens computed again later).
pub const PREEMPTIONS_TOTAL: &str = "sluice_preemptions_total";
/// Drafted tokens verified (speculative decoding).
pub const SPEC_DRAFT_TOTAL: &str = "sluice_spec_draft_tokens_total";
/// Drafted tokens that were the model's own choices.
pub const SPEC_ACCEPTED_TOTAL: &str = "sluice_spec_accepted_tokens_total";
/// Drafted tokens accepted per verification.
pub const SPEC_ACCEPTED_LENGTH: &str = "sluice_spec_accepted_length";
/// Version number of the loaded weights.
pub const WEIGHTS_VERSION: &str = "sluice_weights_version";
/// Constrained requests admitted, by grammar kind.
pub const CONSTRAINED_TOTAL: &str = "sluice_constrained_requests_total";
/// Seconds computing the grammar masks of one step (all its constrained sequences).
pub const MASK_SECONDS: &str = "sluice_grammar_mask_duration_seconds";
/// Prompt tokens looked up in the prefix cache (vLLM's `prefix_cache_queries`).
pub const PREFIX_QUERIES_TOTAL: &str = "sluice_prefix_cache_queries_total";
/// Prompt tokens found there and not computed again (vLLM's `prefix_cache_hits`).
pub const PREFIX_HITS_TOTAL: &str = "sluice_prefix_cache_hits_total";
/// Build and model labels (value 1).
pub const BUILD_INFO: &str = "sluice_build_info";
/// Latency buckets in seconds (vLLM's), shared with the HTTP layer's histogram.
pub const LATENCY: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const MASK: &[f64] = &[
    0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
];
const ITL: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const E2E: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
const TOKENS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0,
];
const BATCH: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
const SPEC_LENGTHS: &[f64] = &[0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0];

/// Every metric of one model's engine, in a registry of its own whose series all carry
/// the label `model` (vLLM's `model_name` convention; a server of several models renders
/// their registries together, see [`render`]).
pub struct Metrics {
    registry: Registry,
    /// See [`TTFT_SECONDS`].
    pub ttft: Histogram,
    /// See [`ITL_SECONDS`].
    pub itl: Histogram,
    /// See [`E2E_SECONDS`].
    pub e2e: Histogram,
    /// See [`QUEUE_SECONDS`].
    pub queue_time: Histogram,
    /// See [`PREFILL_SECONDS`].
    pub prefill_duration: Histogram,
    /// See [`DECODE_STEP_SECONDS`].
    pub decode_step: Histogram,
    /// See [`DECODE_BATCH`].
    pub decode_batch: Histogram,
    /// See [`PROMPT_TOKENS`].
    pub prompt_tokens: Histogram,
    /// See [`GENERATION_TOKENS`].
    pub generation_tokens: Histogram,
    /// See [`REQUESTS_TOTAL`].
    pub requests: IntCounterVec,
    /// See [`PROMPT_TOKENS_TOTAL`].
    pub prompt_tokens_total: IntCounter,
    /// See [`GENERATION_TOKENS_TOTAL`].
    pub generation_tokens_total: IntCounter,
    /// See [`REASONING_TOKENS_TOTAL`].
    pub reasoning_tokens_total: IntCounter,
    /// See [`PREFILL_REQUESTS_TOTAL`].
    pub prefill_requests: IntCounterVec,
    /// See [`PREFILL_PADDING_TOTAL`].
    pub prefill_padding: IntCounter,
    /// See [`REJECTED_TOTAL`].
    pub rejected: IntCounterVec,
    /// See [`RELOADS_TOTAL`].
    pub reloads: IntCounterVec,
    /// See [`RUNNING`].
    pub running: IntGauge,
    /// See [`WAITING`].
    pub waiting: IntGauge,
    /// See [`SLOTS_USED`].
    pub slots_used: IntGauge,
    /// See [`SLOTS_CAPACITY`].
    pub slots_total: IntGauge,
    /// See [`KV_USAGE`].
    pub kv_usage: Gauge,
    /// See [`KV_BLOCKS_CAPACITY`].
    pub kv_blocks_total: IntGauge,
    /// See [`KV_POOL_BYTES`].
    pub kv_pool_bytes: IntGauge,
    /// See [`KV_BLOCKS_USED`].
    pub kv_blocks_used: IntGauge,
    /// See [`KV_BLOCKS_CACHED`].
    pub kv_blocks_cached: IntGauge,
    /// See [`KV_EVICTIONS_TOTAL`].
    pub kv_evictions: IntCounter,
    /// See [`PREEMPTIONS_TOTAL`].
    pub preemptions: IntCounter,
    /// See [`SPEC_DRAFT_TOTAL`].
    pub spec_drafted: IntCounter,
    /// See [`SPEC_ACCEPTED_TOTAL`].
    pub spec_accepted: IntCounter,
    /// See [`SPEC_ACCEPTED_LENGTH`].
    pub spec_accepted_length: Histogram,
    /// See [`WEIGHTS_VERSION`].
    pub weights_version: IntGauge,
    /// See [`BUILD_INFO`].
    pub build_info: IntGaugeVec,
    /// See [`CONSTRAINED_TOTAL`].
    pub constrained: IntCounterVec,
    /// See [`MASK_SECONDS`].
    pub mask_time: Histogram,
    /// See [`PREFIX_QUERIES_TOTAL`].
    pub prefix_queries: IntCounter,
    /// See [`PREFIX_HITS_TOTAL`].
    pub prefix_hits: IntCounter,
}

fn hist(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .expect("valid histogram");
    r.register(Box::new(h.clone())).expect("unique metric");
    h
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid counter");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid gauge");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

impl Metrics {
    /// All metrics, zeroed, every series labelled `model`; `slots` fills a static gauge.
    pub fn new(slots: usize, model: &str) -> Self {
        let labels = std::collections::HashMap::from([("model".to_string(), model.to_string())]);
        let r = Registry::new_custom(None, Some(labels)).expect("a valid label");
        let kv_usage = Gauge::new(
            KV_USAGE,
            "Fraction of the KV pool's blocks held by running sequences.",
        )
        .expect("valid gauge");
        r.register(Box::new(kv_usage.clone()))
            .expect("unique metric");
        let build_info = IntGaugeVec::new(
            Opts::new(BUILD_INFO, "Build version and served model (always 1)."),
            &["version"],
        )
        .expect("valid gauge");
        r.register(Box::new(build_info.clone()))
            .expect("unique metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let m = Self {
            ttft: hist(
                &r,
                TTFT_SECONDS,
                "Time from request arrival to its first token.",
                LATENCY,
            ),
            itl: hist(
                &r,
                ITL_SECONDS,
                "Time between consecutive tokens of a request.",
                ITL,
            ),
            e2e: hist(
                &r,
                E2E_SECONDS,
                "Time from request arrival to its last token.",
                E2E,
            ),
            queue_time: hist(
                &r,
                QUEUE_SECONDS,
                "Time a request waited for a slot.",
                LATENCY,
            ),
            prefill_duration: hist(
                &r,
                PREFILL_SECONDS,
                "Duration of one prefill pass.",
                LATENCY,
            ),
            decode_step: hist(
                &r,
                DECODE_STEP_SECONDS,
                "Duration of one decode step.",
                LATENCY,
            ),
            decode_batch: hist(
                &r,
                DECODE_BATCH,
                "Sequences advanced by one decode step.",
                BATCH,
            ),
            prompt_tokens: hist(&r, PROMPT_TOKENS, "Prompt tokens per request.", TOKENS),
            generation_tokens: hist(
                &r,
                GENERATION_TOKENS,
                "Generated tokens per request.",
                TOKENS,
            ),
            requests: counter_vec(
                &r,
                REQUESTS_TOTAL,
                "Finished requests.",
                &["route", "finish_reason"],
            ),
            constrained: counter_vec(
                &r,
                CONSTRAINED_TOTAL,
                "Constrained requests admitted, by grammar kind.",
                &["kind"],
            ),
            mask_time: hist(
                &r,
                MASK_SECONDS,
                "Time computing the grammar masks of one step.",
                MASK,
            ),
            prefix_queries: counter(
                &r,
                PREFIX_QUERIES_TOTAL,
                "Prompt tokens looked up in the prefix cache.",
            ),
            prefix_hits: counter(
                &r,
                PREFIX_HITS_TOTAL,
                "Prompt tokens reused from the prefix cache.",
            ),
            prompt_tokens_total: counter(&r, PROMPT_TOKENS_TOTAL, "Prompt tokens prefilled."),
            generation_tokens_total: counter(&r, GENERATION_TOKENS_TOTAL, "Tokens generated."),
            reasoning_tokens_total: counter(
                &r,
                REASONING_TOKENS_TOTAL,
                "Tokens generated inside thinking sections (their markers included).",
            ),
            prefill_requests: counter_vec(
                &r,
                PREFILL_REQUESTS_TOTAL,
                "Requests prefilled, by prompt bucket.",
                &["bucket"],
            ),
            prefill_padding: counter(
                &r,
                PREFILL_PADDING_TOTAL,
                "Padding tokens of prefill bucket shapes.",
            ),
            rejected: counter_vec(&r, REJECTED_TOTAL, "Requests refused.", &["reason"]),
            reloads: counter_vec(&r, RELOADS_TOTAL, "Weight reloads.", &["outcome"]),
            running: gauge(&r, RUNNING, "Sequences running in slots."),
            waiting: gauge(&r, WAITING, "Requests waiting for a slot."),
            slots_used: gauge(&r, SLOTS_USED, "KV slots in use."),
            slots_total: gauge(&r, SLOTS_CAPACITY, "Most sequences running at once."),
            kv_usage,
            kv_blocks_total: gauge(
                &r,
                KV_BLOCKS_CAPACITY,
                "Blocks of 16 positions in the KV pool.",
            ),
            kv_pool_bytes: gauge(
                &r,
                KV_POOL_BYTES,
                "Bytes of keys and values the KV pool reserves.",
            ),
            kv_blocks_used: gauge(&r, KV_BLOCKS_USED, "KV blocks held by running sequences."),
            kv_blocks_cached: gauge(&r, KV_BLOCKS_CACHED, "KV blocks in the prefix cache."),
            kv_evictions: counter(&r, KV_EVICTIONS_TOTAL, "Idle cached KV blocks evicted."),
            preemptions: counter(&r, PREEMPTIONS_TOTAL, "Running sequences preempted."),
            spec_drafted: counter(&r, SPEC_DRAFT_TOTAL, "Drafted tokens verified."),
            spec_accepted: counter(
                &r,
                SPEC_ACCEPTED_TOTAL,
                "Drafted tokens accepted (the model's own choices).",
            ),
            spec_accepted_length: hist(
                &r,
                SPEC_ACCEPTED_LENGTH,
                "Drafted tokens accepted per verification.",
                SPEC_LENGTHS,
            ),
            weights_version: gauge(&r, WEIGHTS_VERSION, "Version number of the loaded weights."),
            build_info,
            registry: r,
        };
        m.slots_total.set(slots as i64);
        m.weights_version.set(1);
        m
    }

    /// The registry, for other layers to add their metrics to.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The text exposition format of every metric.
    pub fn render(&self) -> String {
        render(&[&self.registry])
    }
}

/// The text exposition format of several registries' metrics as one: a family that
/// several hold (each model's engine has the same names) is written once, with every
/// registry's series under it.
pub fn render(registries: &[&Registry]) -> String {
    let mut families: Vec<prometheus::proto::MetricFamily> = Vec::new();
    for r in registries {
        for f in r.gather() {
            match families.iter_mut().find(|g| g.name() == f.name()) {
                Some(g) => g.mut_metric().extend(f.get_metric().iter().cloned()),
                None => families.push(f),
            }
        }
    }
    families.sort_by(|a, b| a.name().cmp(b.name()));
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&families, &mut buf)
        .expect("text encoding never fails");
    String::from_utf8(buf).expect("the text format is UTF-8")
}
