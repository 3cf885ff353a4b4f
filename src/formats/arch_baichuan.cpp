// BaichuanForCausalLM: a Llama-style decoder with a fused W_pack ([3*hidden, hidden] = q;k;v).
// The 7B variant uses RoPE; the 13B variant uses ALiBi (ModelConfig::alibi). Baichuan2 divides
// each lm_head row by its L2 norm at inference (ModelConfig::normalized_lm_head), which the
// builder expresses as a build-time normalize_rows that constant folding resolves.
#include "formats/model_graph.h"
#include "formats/builder_context.h"

namespace kiln::formats {

Expected<ir::Graph> build_baichuan(const HfCheckpoint& checkpoint) {
  ir::Graph graph;
  BuilderContext ctx(checkpoint, graph);
  const ModelConfig& c = checkpoint.config();
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
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
    KILN_ASSIGN_OR_RETURN(ir::ValueId ln2, ctx.weight(p + ".post_attention_layernorm.weight", {h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wg, ctx.weight(p + ".mlp.gate_proj.weight", {inter, h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wu, ctx.weight(p + ".mlp.up_proj.weight", {inter, h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wd, ctx.weight(p + ".mlp.down_proj.weight", {h, inter}));

    ir::ValueId a = graph.add_node1("rms_norm", n + ".input_norm", {x, ln1}, {{"eps", eps}});
    ir::ValueId qkv = ctx.linear(n + ".W_pack", a, wpack);
    auto parts = graph.add_node("split", n + ".qkv_split", {qkv}, {{"sizes", std::vector<int64_t>{h, h, h}}}, 3);
    ir::ValueId att = ctx.attention(n, l, parts[0], parts[1], parts[2]);
    ir::ValueId o = ctx.linear(n + ".o_proj", att, wo);
    x = graph.add_node1("add", n + ".attn_residual", {x, o});
    ir::ValueId m = graph.add_node1("rms_norm", n + ".post_attention_norm", {x, ln2}, {{"eps", eps}});
    ir::ValueId g = ctx.linear(n + ".gate_proj", m, wg);
    ir::ValueId u = ctx.linear(n + ".up_proj", m, wu);
    ir::ValueId s = graph.add_node1("silu", n + ".act", {g});
    ir::ValueId gu = graph.add_node1("mul", n + ".gate_mul", {s, u});
    ir::ValueId d = ctx.linear(n + ".down_proj", gu, wd);
    x = graph.add_node1("add", n + ".mlp_residual", {x, d});
  }
  KILN_ASSIGN_OR_RETURN(ir::ValueId norm, ctx.weight("model.norm.weight", {h}));
  x = graph.add_node1("rms_norm", "final_norm", {x, norm}, {{"eps", eps}});
  ir::ValueId head = embed;
  if (!c.tie_word_embeddings) {
    KILN_ASSIGN_OR_RETURN(head, ctx.weight("lm_head.weight", {c.vocab_size, h}));
  }
  if (c.normalized_lm_head) head = graph.add_node1("normalize_rows", "lm_head.normalize", {head});
  ctx.lm_head(x, head);
  return graph;
}

}  // namespace kiln::formats
