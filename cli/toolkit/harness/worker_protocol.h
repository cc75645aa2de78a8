// The worker protocol: how a WorkerRunner talks to `tokamax worker`, one JSON object per line each
// way, request then response.
#pragma once

#include <functional>
#include <istream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/toolkit/harness/local_runner.h"

namespace tokamax {

// Requests: {"cmd": "setup", "op", "args", "device", "seed", "oracle_budget", "dump_dir"}
//           {"cmd": "oracle"}                  (computes the oracle; so that check's timeout
//                                               covers only the implementation)
//           {"cmd": "time", "impl", "config", "timing": {...}}
//           {"cmd": "check", "impl", "config", "dump_dir"}
//           {"cmd": "bench", "jobs": [{"impl", "config", "name", "flops", "bytes", "label"}],
//            "options": {...}}
// Responses: {"ok": true, ...the result's fields} or {"ok": false, "reason"} when the request
// itself was bad (unknown command, op or implementation, no setup yet, a throwing setup). An
// implementation's own failure is a result with its status, not a bad request.
nlohmann::json setup_to_json(const CaseSetup& setup);  // the "setup" request
CaseSetup setup_from_json(const nlohmann::json& request);
nlohmann::json timing_to_json(const TimingOptions& timing);
TimingOptions timing_from_json(const nlohmann::json& value);
nlohmann::json bench_options_to_json(const BenchOptions& options);
BenchOptions bench_options_from_json(const nlohmann::json& value);
nlohmann::json comparison_to_json(const Comparison& comparison);
Comparison comparison_from_json(const nlohmann::json& value);
nlohmann::json bench_stats_to_json(const BenchStats& stats);
BenchStats bench_stats_from_json(const nlohmann::json& value);
nlohmann::json time_result_to_json(const TimeResult& result);
TimeResult time_result_from_json(const nlohmann::json& value);
nlohmann::json check_result_to_json(const CheckResult& result);
CheckResult check_result_from_json(const nlohmann::json& value);

// One request through a LocalRunner: the response object. Never throws (except Interrupted).
// {"ok": false, "reason": ...} when the request failed; {"ok": false, "fault": ...} when the
// device faulted (DeviceFault): the worker then exits and its parent reports a crash.
nlohmann::json handle_worker_request(LocalRunner& runner, const nlohmann::json& request);

// The exit status of a worker whose device faulted.
inline constexpr int kWorkerFaultExit = 3;

// The worker's loop: reads request lines from `in` until EOF, writes one response line each.
// Returns the exit status: 0 at EOF, kWorkerFaultExit after a response with "fault".
int serve_worker(std::istream& in, const std::function<void(const std::string&)>& write_line);

}  // namespace tokamax
