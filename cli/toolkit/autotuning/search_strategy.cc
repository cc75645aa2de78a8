// Exhaustive, random and successive-halving searches: which candidate gets timed, how long.
#include "cli/toolkit/autotuning/search_strategy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backends/clock.h"
#include "ops/framework/errors.h"
#include "cli/toolkit/measurement/measurement.h"

namespace tokamax {
namespace {

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g s", s);
  return text;
}

// One search: the candidate pool, the clock and the budgets.
class Search {
 public:
  Search(size_t n, size_t heuristics, const TimeFn& time, const SearchOptions& options)
      : n_(n), heuristics_(heuristics), time_(time), options_(options), outcomes_(n) {
    clock_ = options.clock ? options.clock : wall_seconds;
    start_ = clock_();
  }

  // Heuristics first, then the rest in enumeration (or seeded random) order, capped by
  // max_evals; the others are "skipped".
  std::vector<size_t> pool(bool shuffle) {
    std::vector<size_t> order;
    for (size_t i = 0; i < n_; ++i) {
      if (i != heuristics_) order.push_back(i);
    }
    if (shuffle) std::shuffle(order.begin(), order.end(), std::mt19937_64(options_.seed));
    if (heuristics_ < n_) order.insert(order.begin(), heuristics_);
    const size_t cap = options_.max_evals > 0 ? static_cast<size_t>(options_.max_evals) : n_;
    for (size_t k = cap; k < order.size(); ++k) {
      outcomes_[order[k]].reason =
          "not selected (--max-evals " + std::to_string(options_.max_evals) + ")";
    }
    if (order.size() > cap) order.resize(cap);
    total_ = static_cast<int>(order.size());
    return order;
  }

  bool out_of_time() const {
    return options_.time_budget_s > 0 && clock_() - start_ >= options_.time_budget_s;
  }

  // Appends samples of `i`; false (and status "error") when the candidate failed.
  bool measure(size_t i, const TimingOptions& request) {
    SearchOutcome& o = outcomes_[i];
    if (options_.progress) options_.progress(++requests_, total_, best_);
    const double begin = clock_();
    ++o.requests;
    try {
      const std::vector<double> samples = time_(i, request);
      o.wall_s += clock_() - begin;
      o.samples.insert(o.samples.end(), samples.begin(), samples.end());
    } catch (const Interrupted&) {
      throw;
    } catch (const CandidateFailure& e) {
      o.wall_s += clock_() - begin;
      o.status = e.status();
      o.reason = e.what();
      o.samples.clear();
      return false;
    } catch (const std::exception& e) {
      o.wall_s += clock_() - begin;
      o.status = "error";
      o.reason = e.what();
      o.samples.clear();
      return false;
    }
    o.status = "ok";
    o.time_s = median(o.samples);
    if (best_ == 0.0 || o.time_s < best_) best_ = o.time_s;
    return true;
  }

  void skip_rest(const std::vector<size_t>& order, size_t from) {
    for (size_t k = from; k < order.size(); ++k) {
      outcomes_[order[k]].reason = "time budget of " + seconds(options_.time_budget_s) + " spent";
    }
  }

  // Exhaustive and random: a full timing of each candidate in order.
  void full(const std::vector<size_t>& order) {
    for (size_t k = 0; k < order.size(); ++k) {
      if (out_of_time()) return skip_rest(order, k);
      measure(order[k], options_.timing);
    }
  }

  void halving(const std::vector<size_t>& order);
  void race(std::vector<size_t>& alive, int round);
  double fastest(size_t i) const {
    const std::vector<double>& samples = outcomes_[i].samples;
    return *std::min_element(samples.begin(), samples.end());
  }

  std::vector<SearchOutcome> take() { return std::move(outcomes_); }

 private:
  TimingOptions lean(int samples, double min_time_s) const {
    TimingOptions request = options_.timing;
    request.warmup_runs = 0;
    request.min_samples = samples;
    request.max_samples = std::max(samples, options_.timing.max_samples);
    request.min_time_s = min_time_s;
    return request;
  }

  size_t n_, heuristics_;
  const TimeFn& time_;
  const SearchOptions& options_;
  std::vector<SearchOutcome> outcomes_;
  std::function<double()> clock_;
  double start_ = 0.0;
  double best_ = 0.0;
  int requests_ = 0, total_ = 0;
};

// Racing: among the candidates with at least two samples, one whose fastest sample is slower
// than the best median by more than race_margin is out: even at its best it loses by more than
// the margin, while the noise of a sample mostly adds time. `alive` is sorted by median.
void Search::race(std::vector<size_t>& alive, int round) {
  double best = 0.0;
  for (size_t i : alive) {
    const SearchOutcome& o = outcomes_[i];
    if (o.samples.size() >= 2 && (best == 0.0 || o.time_s < best)) best = o.time_s;
  }
  if (best == 0.0) return;
  const double bar = (1.0 + options_.race_margin) * best;
  std::vector<size_t> kept;
  for (size_t i : alive) {
    SearchOutcome& o = outcomes_[i];
    if (o.samples.size() >= 2 && fastest(i) > bar) {
      char margin[16];
      std::snprintf(margin, sizeof(margin), "%.3g", 1.0 + options_.race_margin);
      o.status = "pruned";
      o.reason = "raced out after round " + std::to_string(round) + ": fastest sample " +
                 seconds(fastest(i)) + " > " + margin + "x the best median " + seconds(best);
      continue;
    }
    kept.push_back(i);
  }
  alive = std::move(kept);
}

// Round 0 takes a lean timing of every candidate: one call for a kernel that lasts two samples
// time, else two batched samples (a single short batch of a multi-threaded microsecond kernel is
// now and then ~50x slow on a shared machine, and one such sample would decide) and aborts those
// whose fastest sample is over abort_ratio x the best so far at once. Each later round races out
// the candidates clearly slower than the best (race()), keeps the half with the fastest samples
// and gives it one more sample batch of twice the time. Finalists are topped up to a full timing so
// the winner's time is as good as exhaustive's.
void Search::halving(const std::vector<size_t>& order) {
  const double ratio = options_.abort_ratio;
  std::vector<size_t> alive;
  for (size_t k = 0; k < order.size(); ++k) {
    if (out_of_time()) return skip_rest(order, k);
    const size_t i = order[k];
    const double best = best_;
    const TimingOptions look = lean(1, 2 * options_.timing.sample_time_s);
    TimingOptions request = look;
    // The case's first request (the heuristics config's) warms up with one untimed call: the
    // first call in a worker pays first-touch costs no later call does (page faults of buffers
    // kept between calls, about twice a later call's time; measured: docs/measurement_log.md,
    // "first calls in tuning"), which would prune it.
    if (k == 0) request.warmup_runs = 1;
    if (!measure(i, request)) continue;
    SearchOutcome& o = outcomes_[i];
    o.round = 0;
    // A slow kernel's one sample is its first call, which pays first-touch costs when the config
    // grows a buffer the kernel keeps between calls (so a config faster than the heuristics'
    // can look slower on its first call alone): one confirming sample before an abort, which
    // nothing would revisit. Candidates that are merely slower stay unconfirmed: round 0's
    // halving ranks them on what they have.
    if (best > 0 && fastest(i) > ratio * best && o.samples.size() == 1) {
      if (!measure(i, look)) continue;
    }
    if (best > 0 && fastest(i) > ratio * best) {
      char times[16];
      std::snprintf(times, sizeof(times), "%.3g", ratio);
      o.status = "pruned";
      o.reason = "early abort: first samples at best " + seconds(fastest(i)) + " > " + times +
                 "x the best " + seconds(best);
      continue;
    }
    alive.push_back(i);
  }
  const size_t keep = static_cast<size_t>(std::max(options_.keep, 1));
  double round_time = options_.timing.sample_time_s;
  for (int round = 1; alive.size() > keep; ++round, round_time *= 2) {
    std::stable_sort(alive.begin(), alive.end(),
                     [&](size_t a, size_t b) { return fastest(a) < fastest(b); });
    race(alive, round - 1);
    if (alive.size() <= keep) break;
    const size_t survivors = std::max(keep, (alive.size() + 1) / 2);
    for (size_t k = survivors; k < alive.size(); ++k) {
      SearchOutcome& o = outcomes_[alive[k]];
      o.status = "pruned";
      o.reason = "halved out after round " + std::to_string(round - 1) + ": rank " +
                 std::to_string(k + 1) + " of " + std::to_string(alive.size());
    }
    alive.resize(survivors);
    std::vector<size_t> next;
    for (size_t i : alive) {
      if (out_of_time()) return;
      if (!measure(i, lean(1, round_time))) continue;
      outcomes_[i].round = round;
      next.push_back(i);
    }
    alive = std::move(next);
  }
  for (size_t i : alive) {
    if (out_of_time()) return;
    const SearchOutcome& o = outcomes_[i];
    const double timed = std::accumulate(o.samples.begin(), o.samples.end(), 0.0);
    const int missing = options_.timing.min_samples - static_cast<int>(o.samples.size());
    if (missing <= 0 && timed >= options_.timing.min_time_s) continue;
    measure(i, lean(std::max(missing, 1), options_.timing.min_time_s - timed));
  }
}

}  // namespace

Strategy parse_strategy(const std::string& name) {
  if (name == "exhaustive") return Strategy::kExhaustive;
  if (name == "random") return Strategy::kRandom;
  if (name == "halving") return Strategy::kHalving;
  throw InvalidArgument("--strategy '" + name + "': expected exhaustive, random or halving",
                        "strategy");
}

std::vector<SearchOutcome> run_search(size_t n, size_t heuristics, const TimeFn& time,
                                      const SearchOptions& options) {
  Search search(n, heuristics, time, options);
  switch (options.strategy) {
    case Strategy::kExhaustive:
      search.full(search.pool(false));
      break;
    case Strategy::kRandom:
      search.full(search.pool(true));
      break;
    case Strategy::kHalving:
      search.halving(search.pool(options.max_evals > 0));
      break;
  }
  return search.take();
}

}  // namespace tokamax
