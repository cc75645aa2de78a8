// The `tokamax` program: verify, bench, tune and export-cache over the op catalogs; maps errors
// to exit codes. main() is cli/main.cc; test builds reuse run_cli with extra ops registered.
#include <CLI/CLI.hpp>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "ops/framework/errors.h"
#include "ops/framework/metadata.h"

namespace tokamax::cli {

int run_cli(int argc, char** argv) {
  set_command_line(argc, argv);

  CLI::App app{"tokamax: verify, benchmark and autotune kernels on your workload shapes"};
  app.require_subcommand(1);
  app.set_version_flag("--version", build_info().version + " (" + build_info().git_sha + ")");
  std::map<std::string, Runner> runners = {
      {"list", add_list_command(app)},     {"info", add_info_command(app)},
      {"verify", add_verify_command(app)}, {"bench", add_bench_command(app)},
      {"tune", add_tune_command(app)},     {"export-cache", add_export_cache_command(app)},
      {"worker", add_worker_command(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  try {
    for (const CLI::App* sub : app.get_subcommands()) return runners.at(sub->get_name())();
    return kExitUsage;
  } catch (const Interrupted&) {
    std::cerr << "tokamax: interrupted\n";
    return kExitInterrupted;
  } catch (const InputError& e) {
    std::cerr << "tokamax: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const InvalidArgument& e) {
    std::cerr << "tokamax: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "tokamax: failed: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace tokamax::cli
