//! Hugging Face tensor names to GGUF names, and the changes llama.cpp's converter makes to
//! the values (llama's Q/K row order for RoPE on adjacent pairs, Gemma's `1 + w` norms).

use super::config::Config;

/// The GGUF name of `hf`, or `None` for tensors the text model does not use.
pub fn gguf_name(cfg: &Config, hf: &str) -> Option<String> {
    let hf = hf.strip_prefix("language_model.").unwrap_or(hf);
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" if !cfg.tied => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (l, rest) = rest.split_once('.')?;
    let (base, kind) = rest.rsplit_once('.')?;
    let gemma = cfg.arch == "gemma3";
    let g = match base {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.qkv_proj" => "attn_qkv",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "post_attention_layernorm" if gemma => "post_attention_norm",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" => "ffn_norm",
        "post_feedforward_layernorm" => "post_ffw_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.gate_up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{l}.{g}.{kind}"))
}

/// Applies the converter's value changes to the tensor `name` (GGUF name) of `shape`.
pub fn transform(cfg: &Config, name: &str, shape: &[usize], v: &mut [f32]) {
    if cfg.arch == "gemma3" && name.ends_with("norm.weight") {
        v.iter_mut().for_each(|x| *x += 1.0);
    }
    if cfg.arch == "llama" {
        let heads = if name.contains(".attn_q.") {
            cfg.n_heads
        } else if name.contains(".attn_k.") {
            cfg.n_kv_heads
        } else {
            return;
        };
        let cols = if shape.len() == 2 { shape[1] } else { 1 };
        // A tensor of another size is left as it is: the loader's shape check names it.
        if heads
            .checked_mul(cfg.head_dim)
            .and_then(|r| r.checked_mul(cols))
            == Some(v.len())
        {
            permute_rows(v, heads, cfg.head_dim, cols);
        }
    }
}

/// llama.cpp's `permute`: within each head, row `two * hd/2 + i` moves to `2 * i + two`,
/// turning RoPE on halves into RoPE on adjacent pairs.
fn permute_rows(v: &mut [f32], heads: usize, hd: usize, cols: usize) {
    let old = v.to_vec();
    for h in 0..heads {
        for two in 0..2 {
            for i in 0..hd / 2 {
                let from = h * hd + two * (hd / 2) + i;
                let to = h * hd + 2 * i + two;
                v[to * cols..(to + 1) * cols].copy_from_slice(&old[from * cols..(from + 1) * cols]);
            }
        }
    }
}
