//! The engine's sizing and policy, set once at start-up. A leaf.

/// Engine sizing and policy.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Most sequences running at once (block tables of the KV pool).
    pub slots: usize,
    /// Longest sequence: prompt + generated tokens (at most the pool's positions).
    pub context: usize,
    /// Positions the KV pool holds, all sequences together (0: `slots x context`).
    pub kv_cache_tokens: usize,
    /// Smallest prompt bucket.
    pub min_bucket: usize,
    /// Tokens one forward pass may carry: every decoding sequence's row plus prompt
    /// chunks (docs/ARCHITECTURE.md, "Chunked prefill").
    pub max_batch_tokens: usize,
    /// Whether new requests may reuse prompt prefixes left in the slab.
    pub prefix_reuse: bool,
    /// Shortest prefix worth reusing, in tokens.
    pub min_prefix_reuse: usize,
    /// Whether the KV pool asks for transparent huge pages (`KvSlab::advise_huge_pages`).
    pub kv_huge_pages: bool,
    /// Most drafted tokens a sequence verifies per step (speculative decoding, drafts
    /// from its own context); 0 turns speculation off.
    pub spec_tokens: usize,
    /// Speculation pauses while more sequences than this decode at once: their rows
    /// already fill the matrix kernels, and drafts would be extra compute.
    pub spec_max_batch: usize,
    /// Requests allowed to wait for a slot; beyond it submissions are refused.
    pub max_queued: usize,
    /// Prompt tokens allowed to wait in the queue (0: no budget).
    pub max_queued_tokens: usize,
    /// Whole-request deadline, queue time included (`None`: no deadline).
    pub request_timeout: Option<std::time::Duration>,
    /// Label of the loaded weights (reported as `system_fingerprint`).
    pub weights_version: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            slots: 32,
            context: 2048,
            kv_cache_tokens: 0,
            min_bucket: 16,
            max_batch_tokens: 512,
            prefix_reuse: true,
            min_prefix_reuse: 16,
            kv_huge_pages: false,
            spec_tokens: 8,
            spec_max_batch: 8,
            max_queued: 256,
            max_queued_tokens: 0,
            request_timeout: None,
            weights_version: "v1".into(),
        }
    }
}

impl EngineConfig {
    /// Positions the KV pool holds.
    pub fn kv_tokens(&self) -> usize {
        match self.kv_cache_tokens {
            0 => self.slots * self.context,
            n => n,
        }
    }

    /// Blocks of 16 positions in the KV pool: enough for the longest sequence at least.
    pub fn kv_blocks(&self) -> usize {
        let block = sluice_kernels::KEY_BLOCK;
        self.kv_tokens()
            .div_ceil(block)
            .max(self.context.div_ceil(block))
    }
}
