// The work list of `tokamax tune`: (case, implementation) items in a machine-independent order,
// --shard I/N, and the failed-candidate summary of its table.
#pragma once

#include <string>
#include <vector>

#include "cli/toolkit/autotuning/tuner.h"
#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/op.h"

namespace tokamax::cli {

// --shard I/N: this process tunes items I, I+N, I+2N, ... of the sorted item list.
struct Shard {
  int index = 0;
  int count = 1;
};
// "I/N" with 0 <= I < N; anything else is an InvalidArgument naming --shard.
Shard parse_shard(const std::string& text);

// One unit of work: a case and an implementation.
struct TuneItem {
  const ArgSpec* spec;
  const Implementation* impl;
};

// Sorted by (op, spec name, implementation, args key): the same order on every machine, whatever
// the catalog or file order, so that shards of one selection partition it.
std::vector<TuneItem> sorted_items(const std::vector<ArgSpec>& specs, const std::string& impls);

// "crash 1, timeout 1": the failed candidates by category, "-" when none failed.
std::string failure_counts(const std::vector<CandidateResult>& candidates);

}  // namespace tokamax::cli
