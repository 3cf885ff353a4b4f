// kiln random-checkpoint PRESET -o DIR [--dtype bfloat16] [--seed N]
#include <cstdio>

#include "cli/commands.h"
#include "formats/hf/random_checkpoint.h"

namespace kiln::cli {

CommandFn add_random_checkpoint_command(CLI::App& app) {
  struct Args {
    std::string preset, out, dtype = "bfloat16";
    uint64_t seed = 1;
  };
  auto args = std::make_shared<Args>();
  std::string presets;
  for (const auto& p : formats::random_checkpoint_presets()) presets += (presets.empty() ? "" : ", ") + p;
  CLI::App* cmd = app.add_subcommand(
      "random-checkpoint", "Write a Hugging Face checkpoint with random weights of a real model's shape");
  cmd->add_option("preset", args->preset, "one of: " + presets)->required();
  cmd->add_option("-o,--output", args->out, "directory to write")->required();
  cmd->add_option("--dtype", args->dtype, "float32, float16 or bfloat16")->capture_default_str();
  cmd->add_option("--seed", args->seed, "random seed")->capture_default_str();
  return [args] {
    Status st = formats::write_random_checkpoint(args->preset, args->out, args->dtype, args->seed);
    if (!st) return fail(st);
    std::fprintf(stderr, "wrote %s checkpoint to %s\n", args->preset.c_str(), args->out.c_str());
    return 0;
  };
}

}  // namespace kiln::cli
