// ArgSpec filtering (ops exact, tags any-of, names by shell glob) and its "nothing matched" help.
#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

std::string join(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

// "a, b, c" with at most `limit` items, then "... and N more".
std::string list_some(const std::vector<std::string>& items, size_t limit) {
  if (items.size() <= limit) return join(items);
  std::vector<std::string> head(items.begin(), items.begin() + static_cast<long>(limit));
  return join(head) + ", ... and " + std::to_string(items.size() - limit) + " more";
}

bool any_glob_matches(const std::vector<std::string>& globs, const std::string& name) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& glob) {
    return fnmatch(glob.c_str(), name.c_str(), 0) == 0;
  });
}

bool has_any_tag(const std::vector<std::string>& wanted, const std::vector<std::string>& tags) {
  return std::any_of(wanted.begin(), wanted.end(), [&](const std::string& tag) {
    return std::find(tags.begin(), tags.end(), tag) != tags.end();
  });
}

}  // namespace

std::vector<ArgSpec> filter_specs(const std::vector<ArgSpec>& specs, const SpecFilter& filter) {
  std::vector<std::string> ops;  // ops with specs, in first-seen order
  for (const ArgSpec& spec : specs) {
    if (std::find(ops.begin(), ops.end(), spec.op) == ops.end()) ops.push_back(spec.op);
  }
  for (const std::string& op : filter.ops) {
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) {
      throw InvalidArgument("no specs for op '" + op +
                                "' (ops with specs: " + (ops.empty() ? "none" : join(ops)) + ")",
                            "op");
    }
  }
  std::vector<const ArgSpec*> of_ops;
  for (const ArgSpec& spec : specs) {
    if (filter.ops.empty() ||
        std::find(filter.ops.begin(), filter.ops.end(), spec.op) != filter.ops.end()) {
      of_ops.push_back(&spec);
    }
  }
  std::vector<ArgSpec> out;
  for (const ArgSpec* spec : of_ops) {
    if (!filter.tags.empty() && !has_any_tag(filter.tags, spec->tags)) continue;
    if (!filter.names.empty() && !any_glob_matches(filter.names, spec->name)) continue;
    out.push_back(*spec);
  }
  if (!out.empty()) return out;

  // Nothing matched: say what the selected ops do offer.
  std::map<std::string, int> tag_counts;
  std::vector<std::string> names;
  names.reserve(of_ops.size());
  for (const ArgSpec* spec : of_ops) {
    for (const std::string& tag : spec->tags) ++tag_counts[tag];
    names.push_back(spec->name);
  }
  std::vector<std::string> tags;
  tags.reserve(tag_counts.size());
  for (const auto& [tag, count] : tag_counts)
    tags.push_back(tag + " (" + std::to_string(count) + ")");
  std::string wanted;
  if (!filter.tags.empty()) wanted += " with tag " + join(filter.tags, " or ");
  if (!filter.names.empty()) wanted += " named " + join(filter.names, " or ");
  const std::string scope = filter.ops.empty() ? "" : " of " + join(filter.ops);
  throw InvalidArgument("no specs" + scope + wanted +
                            "; available tags: " + (tags.empty() ? "none" : join(tags)) +
                            "; spec names: " + (names.empty() ? "none" : list_some(names, 24)),
                        filter.names.empty() ? "tag" : "name");
}

}  // namespace tokamax
