// GPT2LMHeadModel: learned positions, pre-LayerNorm blocks, fused c_attn, gelu_new MLP and an
// lm_head tied to the token embedding. GPT-2's Conv1D stores weights as [in, out]; the builder
// marks them with a build-time transpose that constant folding resolves.
#include "formats/hf/model_graph.h"
#include "formats/hf/builder_context.h"

namespace kiln::formats {

Expected<ir::Graph> build_gpt2(const HfCheckpoint& checkpoint) {
  ir::Graph graph;
  BuilderContext ctx(checkpoint, graph);
  const ModelConfig& c = checkpoint.config();
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const double eps = c.norm_eps;
  // Checkpoints saved from GPT2LMHeadModel prefix tensors with "transformer."; GPT2Model's do not.
  const std::string root = ctx.has_tensor("transformer.wte.weight") ? "transformer." : "";

  ctx.add_inputs();
  KILN_ASSIGN_OR_RETURN(ir::ValueId wte, ctx.weight(root + "wte.weight", {c.vocab_size, h}));
  KILN_ASSIGN_OR_RETURN(ir::ValueId wpe, ctx.weight(root + "wpe.weight", {c.max_position_embeddings, h}));
  ir::ValueId tok = graph.add_node1("embedding", "wte", {ctx.ids(), wte});
  ir::ValueId pos = graph.add_node1("embedding", "wpe", {ctx.positions(), wpe});
  ir::ValueId x = graph.add_node1("add", "embed", {tok, pos});

  // Conv1D weight [in, out] -> matmul weight [out, in].
  auto conv1d = [&](const std::string& name, int64_t in, int64_t out) -> Expected<ir::ValueId> {
    KILN_ASSIGN_OR_RETURN(ir::ValueId w, ctx.weight(name, {in, out}));
    return graph.add_node1("transpose", name + ".T", {w});
  };

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = root + "h." + std::to_string(l);
    const std::string n = "layers." + std::to_string(l);
    KILN_ASSIGN_OR_RETURN(ir::ValueId ln1w, ctx.weight(p + ".ln_1.weight", {h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId ln1b, ctx.weight(p + ".ln_1.bias", {h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wqkv, conv1d(p + ".attn.c_attn.weight", h, 3 * h));
    KILN_ASSIGN_OR_RETURN(ir::ValueId bqkv, ctx.weight(p + ".attn.c_attn.bias", {3 * h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wo, conv1d(p + ".attn.c_proj.weight", h, h));
    KILN_ASSIGN_OR_RETURN(ir::ValueId bo, ctx.weight(p + ".attn.c_proj.bias", {h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId ln2w, ctx.weight(p + ".ln_2.weight", {h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId ln2b, ctx.weight(p + ".ln_2.bias", {h}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wfc, conv1d(p + ".mlp.c_fc.weight", h, inter));
    KILN_ASSIGN_OR_RETURN(ir::ValueId bfc, ctx.weight(p + ".mlp.c_fc.bias", {inter}));
    KILN_ASSIGN_OR_RETURN(ir::ValueId wproj, conv1d(p + ".mlp.c_proj.weight", inter, h));
    KILN_ASSIGN_OR_RETURN(ir::ValueId bproj, ctx.weight(p + ".mlp.c_proj.bias", {h}));

    ir::ValueId a = graph.add_node1("layer_norm", n + ".ln_1", {x, ln1w, ln1b}, {{"eps", eps}});
    ir::ValueId qkv = ctx.linear(n + ".c_attn", a, wqkv, bqkv);
    auto parts = graph.add_node("split", n + ".qkv_split", {qkv}, {{"sizes", std::vector<int64_t>{h, h, h}}}, 3);
    ir::ValueId att = ctx.attention(n, l, parts[0], parts[1], parts[2]);
    ir::ValueId o = ctx.linear(n + ".c_proj", att, wo, bo);
    x = graph.add_node1("add", n + ".attn_residual", {x, o});
    ir::ValueId m = graph.add_node1("layer_norm", n + ".ln_2", {x, ln2w, ln2b}, {{"eps", eps}});
    ir::ValueId f = ctx.linear(n + ".c_fc", m, wfc, bfc);
    ir::ValueId g = graph.add_node1("gelu_tanh", n + ".act", {f});
    ir::ValueId d = ctx.linear(n + ".mlp_proj", g, wproj, bproj);
    x = graph.add_node1("add", n + ".mlp_residual", {x, d});
  }
  KILN_ASSIGN_OR_RETURN(ir::ValueId lnfw, ctx.weight(root + "ln_f.weight", {h}));
  KILN_ASSIGN_OR_RETURN(ir::ValueId lnfb, ctx.weight(root + "ln_f.bias", {h}));
  x = graph.add_node1("layer_norm", "ln_f", {x, lnfw, lnfb}, {{"eps", eps}});
  ir::ValueId head = wte;
  if (!c.tie_word_embeddings) {
    KILN_ASSIGN_OR_RETURN(head, ctx.weight("lm_head.weight", {c.vocab_size, h}));
  }
  ctx.lm_head(x, head);
  return graph;
}

}  // namespace kiln::formats
