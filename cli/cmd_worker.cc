// `tokamax worker` (hidden): serves run requests of a parent tokamax over stdin/stdout.
#include <unistd.h>

#include <cerrno>
#include <iostream>

#include "cli/commands.h"
#include "cli/toolkit/harness/worker_protocol.h"

namespace tokamax::cli {

Runner add_worker_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "worker", "Internal: run implementations for a parent tokamax (JSON lines on stdin/stdout)");
  sub->group("");  // hidden from --help
  return [] {
    // The protocol keeps the original stdout; whatever an implementation prints goes to stderr.
    const int protocol = dup(STDOUT_FILENO);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    return serve_worker(std::cin, [protocol](const std::string& line) {
      const std::string text = line + "\n";
      size_t done = 0;
      while (done < text.size()) {
        const ssize_t n = write(protocol, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(1);  // the parent is gone
        done += static_cast<size_t>(n);
      }
    });
  };
}

}  // namespace tokamax::cli
