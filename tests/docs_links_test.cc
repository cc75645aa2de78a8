// The README's and docs/'s relative links resolve inside the repository: every linked file
// exists, no link leaves the tree, and a link to a heading (file.md#anchor) names one.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as '-'.
std::set<std::string> anchors(const fs::path& file) {
  std::set<std::string> out;
  std::istringstream lines(read_text(file));
  static const std::regex kHeading("^#+\\s+(.*)$");
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (!std::regex_match(line, match, kHeading)) continue;
    std::string slug;
    for (char c : match[1].str()) {
      const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (std::isalnum(static_cast<unsigned char>(lower)) || lower == '_' || lower == '-') {
        slug += lower;
      } else if (lower == ' ') {
        slug += '-';
      }
    }
    out.insert(slug);
  }
  return out;
}

// "file: link (why)" for every broken relative link of the Markdown files under `root`.
std::vector<std::string> broken_links(const fs::path& root) {
  std::vector<fs::path> files = {root / "README.md"};
  for (const auto& entry : fs::recursive_directory_iterator(root / "docs")) {
    if (entry.is_regular_file() && entry.path().extension() == ".md") files.push_back(entry.path());
  }
  const fs::path top = fs::weakly_canonical(root);
  std::vector<std::string> broken;
  static const std::regex kFence("```[\\s\\S]*?```");
  static const std::regex kLink("\\]\\(([^)\\s]+)\\)");
  static const std::regex kExternal("^(https?:|mailto:).*");
  for (const fs::path& file : files) {
    const std::string text = std::regex_replace(read_text(file), kFence, "");
    const std::string name = fs::relative(file, root).generic_string();
    for (std::sregex_iterator it(text.begin(), text.end(), kLink), end; it != end; ++it) {
      const std::string link = (*it)[1].str();
      if (std::regex_match(link, kExternal)) continue;
      const size_t hash = link.find('#');
      const std::string path = link.substr(0, hash);
      const std::string anchor = hash == std::string::npos ? "" : link.substr(hash + 1);
      const fs::path target = path.empty() ? file : fs::weakly_canonical(file.parent_path() / path);
      const std::string relative = fs::relative(target, top).generic_string();
      if (relative.rfind("..", 0) == 0) {
        broken.push_back(name + ": " + link + " (outside the repository)");
      } else if (!fs::exists(target)) {
        broken.push_back(name + ": " + link + " (no such file)");
      } else if (!anchor.empty() && target.extension() == ".md" &&
                 anchors(target).count(anchor) == 0) {
        broken.push_back(name + ": " + link + " (no such heading)");
      }
    }
  }
  return broken;
}

}  // namespace

TEST_CASE("the README's and docs' relative links resolve inside the repository", "[docs]") {
  const std::vector<std::string> broken = broken_links(TOKAMAX_SOURCE_DIR);
  for (const std::string& link : broken) UNSCOPED_INFO(link);
  CHECK(broken.empty());
}

TEST_CASE("the link check reports missing files, headings and links out of the tree", "[docs]") {
  tokamax::testing::ScratchDir dir;
  fs::create_directories(dir.path() / "docs");
  std::ofstream(dir.path() / "docs" / "a.md") << "# Title\n\n## The `cpu` kernel\n";
  std::ofstream(dir.path() / "README.md")
      << "[ok](docs/a.md) [ok](docs/a.md#the-cpu-kernel) [ok](https://example.com)\n"
         "[gone](docs/b.md) [heading](docs/a.md#nothing) [out](../shared/DESIGN.md)\n"
         "```\n[in a code block](nowhere.md)\n```\n";
  const std::vector<std::string> broken = broken_links(dir.path());
  CHECK_THAT(broken, Catch::Matchers::UnorderedEquals(std::vector<std::string>{
                         "README.md: docs/b.md (no such file)",
                         "README.md: docs/a.md#nothing (no such heading)",
                         "README.md: ../shared/DESIGN.md (outside the repository)"}));
}
