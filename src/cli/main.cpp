#include "cli/commands.h"

int main(int argc, char** argv) { return kiln::cli::main(argc, argv); }
