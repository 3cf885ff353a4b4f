// BaichuanForCausalLM: a Llama-style decoder with a fused W_pack ([3*hidden, hidden] = q;k;v).
// The 7B variant uses RoPE; the 13B variant uses ALiBi (ModelConfig::alibi). Baichuan2 divides
// each lm_head row by its L2 norm at inference (ModelConfig::normalized_lm_head), which the
// builder expresses as a build-time normalize_rows that constant folding resolves.
#include "formats/hf/model_graph.h"
#include "formats/hf/builder_context.h"

namespace kiln::formats {

Expected<ir::Graph> build_baichuan(const HfCheckpoint& checkpoint) {
  ir::Graph graph;
  BuilderContext ctx(checkpoint, graph);
  const ModelConfig& c = checkpoint.config();
  const int64_t h = c.hidden_size;
  const double eps = c.norm_eps;

  ctx.add_inputs();
  KILN_ASSIGN_OR_RETURN(ir::ValueId embed, ctx.weight("model.embed_tokens.weight", {c.vocab_size, h}));
  ir::ValueId x = graph.add_node1("embedding", "embed", {ctx.ids(), embed});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    const std::string n = "layers." + std::to_string(l);
    KILN_ASSIGN_OR_RETURN(ir::ValueId ln1, ctx.weight(p + ".input_layernorm.weight", {h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wpack, ctx.weight(p + ".self_attn.W_pack.weight", {3 * h, h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wo, ctx.weight(p + ".self_attn.o_proj.weight", {h, h}));
    ir::ValueId a = graph.add_node1("rms_norm", n + ".input_norm", {x, ln1}, {{"eps", eps}});
    ir::ValueId qkv = ctx.linear(n + ".W_pack", a, wpack);
    auto parts = graph.add_node("split", n + ".qkv_split", {qkv}, {{"sizes", std::vector<int64_t>{h, h, h}}}, 3);
    ir::ValueId att = ctx.attention(n, l, parts[0], parts[1], parts[2]);
    ir::ValueId o = ctx.linear(n + ".o_proj", att, wo);
    x = graph.add_node1("add", n + ".attn_residual", {x, o});
    KILN_ASSIGN_OR_RETURN(x, ctx.swiglu_mlp_block(l, x, /*bias=*/false));
  }
  KILN_RETURN_IF_ERROR(ctx.rms_norm_and_head(x, embed, c.normalized_lm_head));
  return graph;
}

}  // namespace kiln::formats
