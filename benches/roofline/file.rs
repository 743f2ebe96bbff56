//! What the roofline bench reads of a GGUF file: its header, the bytes one decode token
//! reads, and its matrices by type.

use std::path::Path;

use candle_core::quantized::gguf_file;

/// Bytes one decode token reads from the model's weights, plus keys and values at the
/// mean position of a run of `tokens` (`tokens / 2` after one prompt token).
pub fn token_bytes(content: &gguf_file::Content, tokens: usize) -> f64 {
    let tied = !content.tensor_infos.contains_key("output.weight");
    let mut bytes = 0.0;
    for (name, info) in &content.tensor_infos {
        bytes += match (name.as_str(), tied) {
            ("token_embd.weight", false) => tensor_bytes(info) / info.shape.dims()[0] as f64,
            _ => tensor_bytes(info),
        };
    }
    let u = |key: &str| arch_u32(content, key).unwrap_or(0) as f64;
    let (layers, heads) = (u("block_count"), u("attention.head_count"));
    let kv_heads = match u("attention.head_count_kv") {
        0.0 => heads,
        n => n,
    };
    let head_dim = match u("attention.key_length") {
        0.0 => u("embedding_length") / heads.max(1.0),
        n => n,
    };
    let position = 1.0 + tokens as f64 / 2.0;
    bytes + layers * kv_heads * head_dim * 2.0 * 2.0 * position
}

/// The file's matrices (every tensor of two or more dimensions, the token embeddings
/// whole) by type, as shares of their bytes, largest first: a quantisation's name says
/// little of its file where widths are not multiples of a K-quant's 256 and
/// `llama-quantize` falls back to another type (SmolLM2's Q4_K_M copy is mostly Q5_0).
pub fn type_mix(content: &gguf_file::Content) -> String {
    let mut by_type: Vec<(String, f64)> = Vec::new();
    for info in content.tensor_infos.values() {
        if info.shape.dims().len() < 2 {
            continue;
        }
        // candle spells the K-quants `Q4K`; llama.cpp and this README, `Q4_K`.
        let name = format!("{:?}", info.ggml_dtype).replace('K', "_K");
        match by_type.iter_mut().find(|(n, _)| *n == name) {
            Some((_, b)) => *b += tensor_bytes(info),
            None => by_type.push((name, tensor_bytes(info))),
        }
    }
    let total: f64 = by_type.iter().map(|(_, b)| b).sum();
    by_type.sort_by(|x, y| y.1.total_cmp(&x.1));
    let shares: Vec<String> = by_type
        .iter()
        .map(|(n, b)| format!("{n} {:.0}%", 100.0 * b / total))
        .collect();
    shares.join(", ")
}

/// `path`'s GGUF header: metadata and tensor infos.
pub fn gguf(path: &Path) -> gguf_file::Content {
    let mut f = std::fs::File::open(path).expect("the model file");
    gguf_file::Content::read(&mut f).expect("a GGUF file")
}

/// The model's `{architecture}.{key}` value, if the file has it as an integer.
pub fn arch_u32(content: &gguf_file::Content, key: &str) -> Option<u32> {
    let arch = content.metadata["general.architecture"]
        .to_string()
        .expect("an architecture");
    content
        .metadata
        .get(&format!("{arch}.{key}"))
        .and_then(|v| v.to_u32().ok())
}

/// Bytes of one tensor as the file stores it.
pub fn tensor_bytes(info: &gguf_file::TensorInfo) -> f64 {
    let d = info.ggml_dtype;
    (info.shape.elem_count() / d.block_size() * d.type_size()) as f64
}
