// One list per fact: the lists written beside the code (fwd.hpp, the hook
// list and the policy table of docs/design.md, the callback table of
// docs/callbacks.md) checked against the code, so a policy, callback or hook
// left out of one fails here.
#include <trainkit/fwd.hpp>  // first: a declaration that disagrees with its class fails to compile

#include <trainkit/callbacks.hpp>
#include <trainkit/optim.hpp>
#include <trainkit/parallel/ddp.hpp>
#include <trainkit/parallel/hybrid_shard.hpp>
#include <trainkit/parallel/shard_grad_op.hpp>
#include <trainkit/parallel/zero_sharded.hpp>
#include <trainkit/trainkit.hpp>

#include <c10/util/Type.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>

#include "support.hpp"

using namespace trainkit;
namespace fs = std::filesystem;
namespace tkd = trainkit::detail;

namespace {

std::string read(const fs::path& file) {
  std::ifstream in(file);
  REQUIRE_MESSAGE(in.good(), "cannot open " << file);
  return {std::istreambuf_iterator<char>(in), {}};
}

const fs::path kInclude = fs::path(TRAINKIT_DOCS_DIR) / ".." / "include" / "trainkit";

/// name -> "class" or "struct": the classes `header` defines at namespace
/// scope, outside `namespace detail`.
std::map<std::string, std::string> classes_defined(const fs::path& header) {
  std::ifstream in(header);
  std::map<std::string, std::string> out;
  bool in_detail = false;
  const std::regex definition(R"(^(class|struct) ([A-Z]\w*)( final)?( *:.*| *\{.*)$)");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("namespace detail {")) in_detail = true;
    if (line.starts_with("}  // namespace detail")) in_detail = false;
    std::smatch m;
    if (!in_detail && std::regex_match(line, m, definition)) out[m[2]] = m[1];
  }
  return out;
}

/// The classes of a folder of public headers (e.g. "sched").
std::map<std::string, std::string> classes_in(const std::string& folder) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::directory_iterator(kInclude / folder)) {
    if (entry.path().extension() == ".hpp") out.merge(classes_defined(entry.path()));
  }
  return out;
}

/// The text of `doc` from the heading `heading` to the next heading of its level.
std::string section(const std::string& doc, const std::string& heading) {
  const auto at = doc.find("\n" + heading + "\n");
  REQUIRE_MESSAGE(at != std::string::npos, "no heading " << heading);
  const auto end = doc.find("\n## ", at + heading.size() + 2);
  return doc.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

/// The table row of `doc` whose first cell is `first`.
std::string row(const std::string& doc, const std::string& first) {
  const auto at = doc.find("\n| " + first + " |");
  REQUIRE_MESSAGE(at != std::string::npos, "no row for " << first);
  return doc.substr(at + 1, doc.find('\n', at + 1) - at - 1);
}

// The folders' classes that are not policies (helpers, options, bases):
// each is checked to play no role, so a policy cannot hide among them.
using NotPolicies =
    std::tuple<optim::AdamOptions, optim::AdamWOptions, optim::MuonOptions, optim::LambOptions,
               optim::LarsOptions, optim::ScheduleFreeAdamWOptions, optim::SGDOptions,
               sched::ScheduleContext, precision::Unscaled, precision::GradScaler,
               parallel::Rendezvous, parallel::Environment, parallel::ProcessGroup,
               parallel::UnitRunner>;
std::set<std::string> not_policies() {
  return []<class... T>(std::type_identity<std::tuple<T...>>) {
    static_assert(((tkd::role_of<T>() < 0) && ...));
    std::set<std::string> names;
    for (std::string name : {c10::demangle_type<T>()...})
      names.insert(name.substr(name.rfind(':') + 1));
    return names;
  }(std::type_identity<NotPolicies>{});
}
// Each role's folder, in tkd::PolicyRoles' order.
constexpr std::array<const char*, tkd::kPolicyCount> kRoleFolders = {
    "optim", "sched", "precision", "accumulate", "clip", "parallel", "capture"};
static_assert(!TrainerCallback<callbacks::Monitor>);  // the metric rule callbacks share

}  // namespace

TEST_CASE("fwd.hpp declares every class of the policy folders, callbacks/ and task.hpp") {
  const auto fwd = read(kInclude / "fwd.hpp");
  auto classes = classes_defined(kInclude / "task.hpp");
  for (const char* folder : kRoleFolders) classes.merge(classes_in(folder));
  classes.merge(classes_in("callbacks"));
  CHECK(classes.size() > 40);
  for (const auto& [name, key] : classes) {
    CHECK_MESSAGE(std::regex_search(fwd, std::regex("\n" + key + " " + name + ";\n")),
                  key << " " << name << " is not declared in fwd.hpp");
  }
}

TEST_CASE("docs/design.md's policy table names every policy in its role's row") {
  const auto table =
      section(read(fs::path(TRAINKIT_DOCS_DIR) / "design.md"), "## Policies and their contracts");
  for (size_t role = 0; role < tkd::kPolicyCount; ++role) {
    const auto line = row(table, tkd::kPolicyRoles[role]);
    for (const auto& [name, key] : classes_in(kRoleFolders[role])) {
      if (not_policies().count(name)) continue;
      CHECK_MESSAGE(line.find("`" + name) != std::string::npos,
                    name << " is missing from the " << tkd::kPolicyRoles[role] << " row");
    }
  }
}

TEST_CASE("docs/design.md lists every hook, docs/callbacks.md every callback") {
  const auto design =
      section(read(fs::path(TRAINKIT_DOCS_DIR) / "design.md"), "## Callbacks and hooks");
#define TRAINKIT_LISTED(name, Tag) \
  CHECK_MESSAGE(design.find("`" #name "`") != std::string::npos, #name " is not in design.md");
  TRAINKIT_FOR_EACH_HOOK(TRAINKIT_LISTED)
#undef TRAINKIT_LISTED
  const auto ready =
      section(read(fs::path(TRAINKIT_DOCS_DIR) / "callbacks.md"), "## Ready callbacks");
  for (const auto& [name, key] : classes_in("callbacks")) {
    if (name == "Monitor") continue;
    CHECK_MESSAGE(ready.find("| `callbacks::" + name + "` |") != std::string::npos,
                  "callbacks::" << name << " has no row in docs/callbacks.md");
  }
}

TEST_CASE("detail/ is the bottom layer: its helpers include no other trainkit header") {
  // The trainer's internals are in trainer/detail/, the optimizers' kernels
  // in optim/detail/: what stays in detail/ is included from everywhere, so
  // an include from it to a header above would run against the layering.
  const std::regex include(R"re(#include "trainkit/([^"]+)")re");
  size_t headers = 0;
  for (const auto& entry : fs::directory_iterator(kInclude / "detail")) {
    ++headers;
    const auto text = read(entry.path());
    for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
      CHECK_MESSAGE((*it)[1].str().starts_with("detail/"),
                    entry.path().filename().string() << " includes trainkit/" << (*it)[1]);
    }
  }
  CHECK(headers >= 5);
}
