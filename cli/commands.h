// The subcommands of `tokamax`: each adds itself to the CLI11 app and returns its runner.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tokamax::cli {

// Exit codes of the program (the contract scripts rely on).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a verification or run failure
inline constexpr int kExitUsage = 2;    // bad usage or bad input
inline constexpr int kExitInterrupted = 130;

// Runs the subcommand after parsing; returns the exit code. Library exceptions propagate to
// main(), which maps them: InvalidArgument / InputError -> 2, Interrupted -> 130, others -> 1.
using Runner = std::function<int()>;

Runner add_list_command(CLI::App& app);
Runner add_info_command(CLI::App& app);
Runner add_verify_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_tune_command(CLI::App& app);
Runner add_export_cache_command(CLI::App& app);
Runner add_worker_command(CLI::App& app);  // hidden: the isolation worker (cli/toolkit/harness/worker_runner.h)

// Parses argv and runs the subcommand; returns the exit code (cli/main.cc's main()).
int run_cli(int argc, char** argv);

}  // namespace tokamax::cli
