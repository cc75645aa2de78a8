// `tokamax`: the command-line program (cli/run.cc).
#include "cli/commands.h"

int main(int argc, char** argv) { return tokamax::cli::run_cli(argc, argv); }
