// Llama-style decoders: LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM share one
// tensor layout and differ only in what config.json switches on (q/k/v/o and MLP biases, the
// sliding window, rope scaling), which ModelConfig already resolves.
//
//   x = embed(ids)
//   per layer: x += o_proj(attn(rope(q_proj(rms(x))), rope(k_proj(..)), v_proj(..)))
//              x += down_proj(silu(gate_proj(rms(x))) * up_proj(rms(x)))
//   logits = lm_head(rms(x))   (lm_head = embed_tokens when tied)
#include "formats/hf/builder_context.h"

namespace kiln::formats {

Expected<ir::Graph> build_llama_style(const HfCheckpoint& checkpoint) {
  ir::Graph graph;
  BuilderContext ctx(checkpoint, graph);
  const ModelConfig& c = checkpoint.config();
  const int64_t h = c.hidden_size, q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  const bool qkv_bias = c.attention_bias || c.architecture == Architecture::kQwen2;
  const bool o_bias = c.attention_bias && c.architecture != Architecture::kQwen2;
  const double eps = c.norm_eps;

  ctx.add_inputs();
  KILN_ASSIGN_OR_RETURN(ir::ValueId embed, ctx.weight("model.embed_tokens.weight", {c.vocab_size, h}));
  ir::ValueId x = graph.add_node1("embedding", "embed", {ctx.ids(), embed});

  auto bias = [&](const std::string& name, int64_t n, bool present) -> Expected<ir::ValueId> {
    if (!present) return ir::kNoValue;
    return ctx.weight(name, {n});
  };

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    const std::string n = "layers." + std::to_string(l);
    KILN_ASSIGN_OR_RETURN(ir::ValueId ln1, ctx.weight(p + ".input_layernorm.weight", {h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wq, ctx.weight(p + ".self_attn.q_proj.weight", {q_dim, h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wk, ctx.weight(p + ".self_attn.k_proj.weight", {kv_dim, h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wv, ctx.weight(p + ".self_attn.v_proj.weight", {kv_dim, h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wo, ctx.weight(p + ".self_attn.o_proj.weight", {h, q_dim}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId bq, bias(p + ".self_attn.q_proj.bias", q_dim, qkv_bias));
    KILN_ASSIGN_OR_RETURN(ir::ValueId bk, bias(p + ".self_attn.k_proj.bias", kv_dim, qkv_bias));
    KILN_ASSIGN_OR_RETURN(ir::ValueId bv, bias(p + ".self_attn.v_proj.bias", kv_dim, qkv_bias));
    KILN_ASSIGN_OR_RETURN(ir::ValueId bo, bias(p + ".self_attn.o_proj.bias", h, o_bias));
    ir::ValueId a = graph.add_node1("rms_norm", n + ".input_norm", {x, ln1}, {{"eps", eps}});
    ir::ValueId q = ctx.linear(n + ".q_proj", a, wq, bq);
    ir::ValueId k = ctx.linear(n + ".k_proj", a, wk, bk);
    ir::ValueId v = ctx.linear(n + ".v_proj", a, wv, bv);
    ir::ValueId att = ctx.attention(n, l, q, k, v);
    ir::ValueId o = ctx.linear(n + ".o_proj", att, wo, bo);
    x = graph.add_node1("add", n + ".attn_residual", {x, o});

    KILN_ASSIGN_OR_RETURN(x, ctx.swiglu_mlp_block(l, x, c.mlp_bias));
  }
  KILN_RETURN_IF_ERROR(ctx.rms_norm_and_head(x, embed, /*normalize_head=*/false));
  return graph;
}

}  // namespace kiln::formats
