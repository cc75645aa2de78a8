// The implementations left out for another kind of device, one line per reason.
#include "cli/report/other_device.h"

#include <algorithm>

namespace tokamax::cli {

std::vector<std::string> other_device_notes(const std::vector<OtherDeviceRun>& runs,
                                            const std::string& device) {
  // Each reason with its implementations and their ops, in first-seen order.
  struct Impl {
    std::string name;
    std::vector<std::string> ops;
  };
  struct Group {
    std::string reason;
    std::vector<Impl> impls;
  };
  std::vector<Group> groups;
  for (const OtherDeviceRun& r : runs) {
    auto group = std::find_if(groups.begin(), groups.end(),
                              [&](const Group& g) { return g.reason == r.reason; });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{r.reason, {}});
    auto impl = std::find_if(group->impls.begin(), group->impls.end(),
                             [&](const Impl& i) { return i.name == r.impl; });
    if (impl == group->impls.end())
      impl = group->impls.insert(group->impls.end(), Impl{r.impl, {}});
    if (std::find(impl->ops.begin(), impl->ops.end(), r.op) == impl->ops.end()) {
      impl->ops.push_back(r.op);
    }
  }
  std::vector<std::string> lines;
  for (const Group& group : groups) {
    std::string line = "not run on " + device + ":";
    for (size_t i = 0; i < group.impls.size(); ++i) {
      line += (i == 0 ? " " : ", ") + group.impls[i].name + " (";
      for (size_t o = 0; o < group.impls[i].ops.size(); ++o) {
        line += (o == 0 ? "" : ", ") + group.impls[i].ops[o];
      }
      line += ")";
    }
    lines.push_back(line + ": " + group.reason);
  }
  return lines;
}

}  // namespace tokamax::cli
