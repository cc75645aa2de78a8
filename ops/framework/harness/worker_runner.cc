// The worker process (fork + exec, socket, deadlines, crash classification) and WorkerRunner.
#include "ops/framework/harness/worker_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", s);
  return text;
}

}  // namespace

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

// --- WorkerProcess.

WorkerProcess::WorkerProcess(const std::vector<std::string>& argv) {
  if (argv.empty()) throw InvalidArgument("worker: empty command line");
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    throw std::runtime_error(std::string("worker: socketpair: ") + std::strerror(errno));
  }
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the parent has other threads).
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& arg : args) raw.push_back(arg.data());
  raw.push_back(nullptr);
  // exec failures come back through a close-on-exec pipe: end of file means exec succeeded.
  int exec_status[2];
  if (pipe2(exec_status, O_CLOEXEC) != 0) {
    close(sockets[0]);
    close(sockets[1]);
    throw std::runtime_error(std::string("worker: pipe: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {sockets[0], sockets[1], exec_status[0], exec_status[1]}) close(fd);
    throw std::runtime_error(std::string("worker: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Own process group: the parent kills the whole group on a timeout, and a terminal's Ctrl-C
    // reaches only the parent, which decides. Dies with the parent.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(sockets[1], STDIN_FILENO);  // dup2 clears close-on-exec on the copies
    dup2(sockets[1], STDOUT_FILENO);
    execv(raw[0], raw.data());
    const int error = errno;
    if (write(exec_status[1], &error, sizeof(error))) {
    }
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so that a kill right after fork finds the group
  close(sockets[1]);
  close(exec_status[1]);
  pid_ = pid;
  fd_ = sockets[0];
  int error = 0;
  ssize_t n;
  while ((n = read(exec_status[0], &error, sizeof(error))) < 0 && errno == EINTR) {
  }
  close(exec_status[0]);
  if (n > 0) {
    kill_and_reap();
    throw std::runtime_error("worker: cannot run " + argv[0] + ": " + std::strerror(error));
  }
}

WorkerProcess::~WorkerProcess() { kill_and_reap(); }

void WorkerProcess::kill_and_reap() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  pending_.clear();
}

std::string WorkerProcess::reap_reason() {
  // The worker closed its end: it is exiting. Give it a moment, then make sure.
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 200 && done == 0; ++i) {
    done = waitpid(pid_, &status, WNOHANG);
    if (done == 0) usleep(5000);
  }
  std::string reason;
  if (done == pid_ && WIFSIGNALED(status)) {
    reason = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
             signal_name(WTERMSIG(status)) + ")";
  } else if (done == pid_ && WIFEXITED(status)) {
    reason = "worker exited with status " + std::to_string(WEXITSTATUS(status));
  } else {
    reason = "worker closed its output";
  }
  if (done == pid_) pid_ = -1;  // reaped: nothing left to kill
  kill_and_reap();
  return reason;
}

WorkerProcess::Reply WorkerProcess::exchange(const std::string& line, double timeout_s,
                                             const std::atomic<bool>* interrupt) {
  if (!alive()) return Reply{"crash", "", "worker is not running"};
  const std::string message = line + "\n";
  size_t sent = 0;
  while (sent < message.size()) {
    const ssize_t n = send(fd_, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Reply{"crash", "", reap_reason()};
    sent += static_cast<size_t>(n);
  }
  const double deadline = timeout_s > 0 ? now_s() + timeout_s : INFINITY;
  for (;;) {
    const size_t newline = pending_.find('\n');
    if (newline != std::string::npos) {
      Reply reply{"ok", pending_.substr(0, newline), ""};
      pending_.erase(0, newline + 1);
      return reply;
    }
    if (interrupt != nullptr && interrupt->load()) {
      kill_and_reap();
      throw Interrupted();
    }
    const double left = deadline - now_s();
    if (left <= 0) {
      kill_and_reap();
      return Reply{"timeout", "", "no answer within " + seconds_text(timeout_s) + "; killed"};
    }
    // Short slices: Ctrl-C is noticed within 50 ms.
    pollfd poll_fd{fd_, POLLIN, 0};
    const int wait_ms = static_cast<int>(std::ceil(std::min(left, 0.05) * 1000));
    const int ready = poll(&poll_fd, 1, wait_ms);
    if (ready < 0 && errno != EINTR) return Reply{"crash", "", reap_reason()};
    if (ready <= 0) continue;
    char buffer[65536];
    const ssize_t n = read(fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Reply{"crash", "", reap_reason()};
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

// --- WorkerRunner.

WorkerRunner::WorkerRunner(WorkerOptions options) : options_(std::move(options)) {}
WorkerRunner::~WorkerRunner() = default;

json WorkerRunner::parse_ok(const WorkerProcess::Reply& reply, const std::string& what) {
  if (reply.status != "ok") {
    throw std::runtime_error("worker " + reply.status + " while " + what + ": " + reply.reason);
  }
  json response;
  try {
    response = json::parse(reply.line);
  } catch (const json::parse_error& e) {
    throw std::runtime_error("worker answered " + what +
                             " with a line that is not JSON: " + reply.line.substr(0, 200));
  }
  if (!response.value("ok", false)) {
    throw std::runtime_error("worker refused " + what + ": " +
                             response.value("reason", std::string("no reason given")));
  }
  return response;
}

void WorkerRunner::ensure_ready() {
  if (process_ && !process_->alive()) process_.reset();
  if (!process_) {
    process_ = std::make_unique<WorkerProcess>(std::vector<std::string>{options_.exe, "worker"});
    ++starts_;
    case_ready_ = false;
    oracle_ready_ = false;
  }
  if (!case_ready_ && setup_) {
    const json message = {{"cmd", "setup"},
                          {"op", setup_->op},
                          {"args", setup_->args.to_json()},
                          {"seed", setup_->seed},
                          {"oracle_budget", setup_->oracle_budget},
                          {"dump_dir", setup_->dump_dir}};
    parse_ok(process_->exchange(message.dump(), 0.0, options_.interrupt), "setting up the case");
    setup_->dump_dir.clear();  // dumped once; a restarted worker need not write it again
    case_ready_ = true;
    oracle_ready_ = oracle_ready_ || !message.at("dump_dir").get<std::string>().empty();
  }
}

WorkerProcess::Reply WorkerRunner::request(const json& message, double timeout_s) {
  ensure_ready();
  WorkerProcess::Reply reply = process_->exchange(message.dump(), timeout_s, options_.interrupt);
  if (reply.status != "ok") process_.reset();  // the next request starts a fresh worker
  return reply;
}

void WorkerRunner::setup(const CaseSetup& setup) {
  const bool same = setup_ && setup_->same_case(setup);
  setup_ = setup;
  if (!same) case_ready_ = false;
  if (!same) oracle_ready_ = false;
  if (same && !setup.dump_dir.empty()) case_ready_ = false;  // re-send to dump
  ensure_ready();
}

TimeResult WorkerRunner::time(const Implementation& impl, const json& config,
                              const TimingOptions& timing) {
  const json message = {{"cmd", "time"},
                        {"impl", std::string(impl.name())},
                        {"config", config},
                        {"timing", timing_to_json(timing)}};
  const WorkerProcess::Reply reply = request(message, options_.timeout_s);
  if (reply.status != "ok") {
    TimeResult result;
    result.status = reply.status;
    result.reason = reply.reason;
    return result;
  }
  return time_result_from_json(parse_ok(reply, "timing " + std::string(impl.name())));
}

CheckResult WorkerRunner::check(const Implementation& impl, const json& config,
                                const std::string& dump_dir) {
  ensure_ready();
  if (!oracle_ready_) {
    parse_ok(process_->exchange(json{{"cmd", "oracle"}}.dump(), 0.0, options_.interrupt),
             "computing the oracle");
    oracle_ready_ = true;
  }
  const json message = {{"cmd", "check"},
                        {"impl", std::string(impl.name())},
                        {"config", config},
                        {"dump_dir", dump_dir}};
  const WorkerProcess::Reply reply = request(message, options_.timeout_s);
  if (reply.status != "ok") {
    CheckResult result;
    result.status = reply.status;
    result.reason = reply.reason;
    return result;
  }
  return check_result_from_json(parse_ok(reply, "checking " + std::string(impl.name())));
}

std::vector<BenchOutcome> WorkerRunner::bench(const std::vector<BenchJob>& jobs,
                                              const BenchOptions& options) {
  // One request per implementation, so that a crash costs only its own row.
  std::vector<BenchOutcome> outcomes;
  json merged;  // Google Benchmark JSON of all jobs, as one run_benchmarks call writes it
  for (size_t k = 0; k < jobs.size(); ++k) {
    const BenchJob& job = jobs[k];
    BenchOptions one = options;
    if (!options.json_path.empty()) one.json_path = options.json_path + ".part";
    const json message = {{"cmd", "bench"},
                          {"jobs",
                           {{{"impl", std::string(job.impl->name())},
                             {"config", job.config},
                             {"name", job.name},
                             {"flops", job.flops},
                             {"bytes", job.bytes},
                             {"label", job.label}}}},
                          {"options", bench_options_to_json(one)}};
    const WorkerProcess::Reply reply = request(message, options_.timeout_s);
    BenchOutcome outcome;
    if (reply.status != "ok") {
      outcome.status = reply.status;
      outcome.stats.name = job.name;
      outcome.stats.ok = false;
      outcome.stats.error = reply.status + ": " + reply.reason;
    } else {
      const json response = parse_ok(reply, "benchmarking " + job.name);
      const json& first = response.at("outcomes").at(0);
      outcome.status = first.at("status").get<std::string>();
      outcome.stats = bench_stats_from_json(first.at("stats"));
    }
    outcomes.push_back(outcome);
    if (options.json_path.empty()) continue;
    std::ifstream part(one.json_path);
    if (outcome.status == "ok" || outcome.status == "error") {
      const json piece = json::parse(part);
      if (merged.is_null()) {
        merged = piece;
      } else {
        for (const json& b : piece["benchmarks"]) merged["benchmarks"].push_back(b);
      }
    } else {
      // What Google Benchmark writes for a skipped benchmark, so readers see the failure.
      if (merged.is_null()) merged = {{"context", json::object()}, {"benchmarks", json::array()}};
      merged["benchmarks"].push_back({{"name", job.name},
                                      {"run_name", job.name},
                                      {"run_type", "iteration"},
                                      {"error_occurred", true},
                                      {"error_message", outcome.stats.error},
                                      {"label", job.label}});
    }
    std::error_code ignored;
    std::filesystem::remove(one.json_path, ignored);
  }
  if (!options.json_path.empty()) {
    std::ofstream out(options.json_path);
    out << merged.dump(2) << "\n";
    if (!out) throw InvalidArgument("cannot write " + options.json_path, "json_path");
  }
  return outcomes;
}

}  // namespace tokamax
