#include "restart.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace cohortrun {
namespace {

// "h2" for "h2.example.org".
std::string short_name(const std::string& name) {
  if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) return name;  // an address
  return name.substr(0, name.find('.'));
}

int by_name(const std::vector<Host>& hosts, const std::string& node) {
  for (size_t i = 0; i < hosts.size(); ++i)
    if (hosts[i].name == node) return static_cast<int>(i);
  for (size_t i = 0; i < hosts.size(); ++i)
    if (short_name(hosts[i].name) == short_name(node)) return static_cast<int>(i);
  return -1;
}

}  // namespace

Attempt first_attempt(const Request& request) {
  Attempt a;
  a.np = request.np;
  if (!request.host_list.empty()) a.hosts = parse_host_list(request.host_list);
  if (!request.hostfile.empty()) a.hosts = read_hostfile(request.hostfile);
  return a;
}

bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1") return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && (host == name || short_name(host) == short_name(name))) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    else if (i->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, text, sizeof text);
    found = text[0] != '\0' && host == text;
  }
  freeifaddrs(list);
  return found;
}

int failed_host(const std::vector<Host>& hosts, int np, bool by_slot, const RankFailure& failure,
                const std::function<bool(const std::string&)>& is_local) {
  if (hosts.empty()) return -1;
  for (const std::string& name : {failure.node, failure.address})
    if (!name.empty())
      if (const int i = by_name(hosts, name); i >= 0) return i;
  const int rank = failure.rank >= 0 ? failure.rank : failure.lost_rank;
  if (rank >= 0 && by_slot && np <= total_slots(hosts)) {
    int first = 0;
    for (size_t i = 0; i < hosts.size(); ++i) {
      if (rank < first + hosts[i].slots) return static_cast<int>(i);
      first += hosts[i].slots;
    }
  }
  if (failure.daemon >= 1) {
    int remote = 0;
    for (size_t i = 0; i < hosts.size(); ++i)
      if (!is_local(hosts[i].name) && ++remote == failure.daemon) return static_cast<int>(i);
  }
  return -1;
}

std::string ranks_on_host(const std::vector<Host>& hosts, int np, int index) {
  if (index < 0 || index >= static_cast<int>(hosts.size())) return "";
  int first = 0;
  for (int i = 0; i < index; ++i) first += hosts[static_cast<size_t>(i)].slots;
  const int last = std::min(np, first + hosts[static_cast<size_t>(index)].slots) - 1;
  if (last < first) return "";
  if (last == first) return "rank " + std::to_string(first);
  return "ranks " + std::to_string(first) + "-" + std::to_string(last);
}

RestartPlan plan_restart(const Attempt& current, bool exclude, int min_np, int failed_index) {
  RestartPlan plan{current, "", ""};
  if (!exclude) return plan;
  if (failed_index < 0 || failed_index >= static_cast<int>(current.hosts.size())) {
    plan.kept = "the failure does not say which host it was on";
    return plan;
  }
  std::vector<Host> rest = current.hosts;
  const std::string name = rest[static_cast<size_t>(failed_index)].name;
  rest.erase(rest.begin() + failed_index);
  const int slots = total_slots(rest);
  const int least = min_np > 0 ? min_np : current.np;
  if (rest.empty() || slots < least) {
    plan.kept = "the other hosts have " + std::to_string(slots) + " slot" + (slots == 1 ? "" : "s") +
                ", fewer than the " + std::to_string(least) + " ranks a restart needs" +
                (min_np > 0 ? " (--min-np)" : " (-np; --min-np allows fewer)");
    return plan;
  }
  plan.next.hosts = std::move(rest);
  plan.next.np = std::min(current.np, slots);
  plan.dropped = name;
  return plan;
}

std::string host_list_text(const std::vector<Host>& hosts) {
  std::string text;
  for (const Host& h : hosts) text += (text.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  return text;
}

Request attempt_request(const Request& request, const Attempt& attempt, int restart) {
  Request r = request;
  r.np = attempt.np;
  if (restart == 0) return r;
  if (attempt.hosts.size() != first_attempt(request).hosts.size()) {
    r.host_list = host_list_text(attempt.hosts);
    r.hostfile.clear();
  }
  const bool resume_set =
      std::any_of(r.exports.begin(), r.exports.end(), [](const Export& e) { return e.name == "COHORT_RESUME"; });
  if (!resume_set) r.exports.push_back({"COHORT_RESUME", "true", "--max-restarts"});
  if (!r.output_dir.empty()) r.output_dir += "/restart." + std::to_string(restart);
  return r;
}

}  // namespace cohortrun
