// ArgSpec catalogs: named workload shapes in YAML (specs/<op>.yaml), embedded and user-supplied.
//
// Schema:
//   op: ragged_dot
//   specs:
//     - name: compute_bound            # unique within the op
//       tags: [primary, ci_tests]      # optional
//       project: ""                    # optional
//       args:                          # tensors as dtype[dims]; options as YAML scalars/lists
//         lhs: bf16[4096,4096]
//         ...
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"

namespace tokamax {

struct ArgSpec {
  std::string op;
  std::string name;
  std::vector<std::string> tags;
  std::string project;
  BoundArgs args;      // bound and validated by the op
  std::string source;  // "specs/ragged_dot.yaml (embedded)" or the user's path
  int line = 0;        // 1-based line of the spec's `name`
};

// Parses one catalog. Every error (YAML syntax, unknown keys, unknown op, bad dtype, malformed
// dims, invalid args, duplicate names) throws InputError with source:line:column.
std::vector<ArgSpec> parse_catalog(std::string_view text, const std::string& source_name);
std::vector<ArgSpec> load_catalog_file(const std::string& path);
// The catalogs embedded at build time (specs/*.yaml).
std::vector<ArgSpec> builtin_specs();
// Builtin catalogs plus the user's files; a user spec with the same op and name as another is
// an InputError naming both places.
std::vector<ArgSpec> load_specs(const std::vector<std::string>& user_files);

struct SpecFilter {
  std::vector<std::string> ops;    // exact names; empty = all
  std::vector<std::string> tags;   // any-of; empty = all
  std::vector<std::string> names;  // shell globs (fnmatch); empty = all
};

// Applies the filter. A filter that matches nothing throws InvalidArgument listing what exists
// (the ops, or the tags / names available for the selected ops).
std::vector<ArgSpec> filter_specs(const std::vector<ArgSpec>& specs, const SpecFilter& filter);

}  // namespace tokamax
