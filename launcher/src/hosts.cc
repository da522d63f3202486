#include "hosts.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include "text.h"

namespace cohortrun {
namespace {

bool valid_host_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
    if (!ok) return false;
  }
  return name.front() != '-' && name.front() != '.';
}

// A positive slot count, or -1.
int parse_slots(std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1) return -1;
  return value;
}

}  // namespace

std::vector<Host> parse_host_list(std::string_view list) {
  const std::string expected = "expected host[:slots],… such as node1:4,node2:4";
  if (list.empty()) throw UsageError("-H: the host list is empty (" + expected + ")");
  std::vector<Host> hosts;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string_view entry = list.substr(start, comma == std::string_view::npos ? comma : comma - start);
    const std::string where = "-H " + std::string(list) + ": ";
    if (entry.empty()) throw UsageError(where + "empty entry (" + expected + ")");
    Host host;
    const size_t colon = entry.find(':');
    host.name = std::string(entry.substr(0, colon));
    if (!valid_host_name(host.name))
      throw UsageError(where + "'" + host.name + "' is not a host name (" + expected + ")");
    if (colon != std::string_view::npos) {
      host.slots = parse_slots(entry.substr(colon + 1));
      if (host.slots < 0)
        throw UsageError(where + "slot count '" + std::string(entry.substr(colon + 1)) + "' of host '" + host.name +
                         "' is not a positive integer");
    }
    hosts.push_back(std::move(host));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return hosts;
}

std::vector<Host> parse_hostfile_text(std::string_view text, std::string_view file) {
  std::vector<Host> hosts;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;
    const std::string where = std::string(file) + ":" + std::to_string(number) + ": ";
    if (!valid_host_name(word)) throw UsageError(where + "'" + word + "' is not a host name");
    Host host{word, 1};
    while (words >> word) {
      const size_t eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (eq == std::string::npos || (key != "slots" && key != "max_slots" && key != "max-slots"))
        throw UsageError(where + "unexpected '" + word + "' (expected slots=N or max_slots=N after the host name)");
      const int n = parse_slots(std::string_view(word).substr(eq + 1));
      if (n < 0) throw UsageError(where + "'" + word + "': the count must be a positive integer");
      if (key == "slots") host.slots = n;
    }
    hosts.push_back(std::move(host));
  }
  if (hosts.empty()) throw UsageError(std::string(file) + ": the hostfile names no host");
  return hosts;
}

std::vector<Host> read_hostfile(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw UsageError("--hostfile " + file + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_hostfile_text(text.str(), file);
}

int total_slots(const std::vector<Host>& hosts) {
  int n = 0;
  for (const Host& h : hosts) n += h.slots;
  return n;
}

}  // namespace cohortrun
