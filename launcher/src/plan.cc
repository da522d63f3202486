#include "plan.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <utility>

#include <cohort/cohort.h>

#include "hosts.h"
#include "rank_monitor.h"
#include "text.h"

extern char** environ;

namespace cohortrun {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  // access() alone says yes to root for files with no execute bit at all.
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0 &&
         access(path.c_str(), X_OK) == 0;
}

// Physical cores this process may run on (what Open MPI counts as slots by default).
int count_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  std::set<std::pair<std::string, std::string>> cores;
  int cpus = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++cpus;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
    std::string p, c;
    if (!(package >> p) || !(core >> c)) return cpus > 0 ? CPU_COUNT(&set) : 1;
    cores.emplace(p, c);
  }
  return cores.empty() ? std::max(1, cpus) : static_cast<int>(cores.size());
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// Variables the ranks inherit by name (-x NAME): only those that are set.
bool exported_by_name(const std::string& name) {
  return name == "PATH" || name == "LD_LIBRARY_PATH" || starts_with(name, "NCCL_") || starts_with(name, "COHORT_") ||
         starts_with(name, "OMP_");
}

// An inherited COHORT_<KEY> of a registry key must hold a valid value.
void check_inherited_setting(const std::string& name, const std::string& value) {
  std::string key = name.substr(7);
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  cohort_option_info_t info{};
  info.struct_size = sizeof info;
  if (cohort_option_describe(key.c_str(), &info) != COHORT_OK) return;
  cohort_config_t* cfg = nullptr;
  if (cohort_config_create(&cfg) != COHORT_OK) return;
  const bool ok = cohort_config_set(cfg, key.c_str(), value.c_str()) == COHORT_OK;
  const std::string error = ok ? "" : cohort_last_error();
  cohort_config_destroy(cfg);
  if (!ok) {
    const size_t colon = error.find(": ");
    throw UsageError("environment variable " + name + "=" + value + ": " +
                     (colon == std::string::npos ? error : error.substr(colon + 2)));
  }
}

std::string resolve_mpirun(const Request& request, const Context& context) {
  const auto path = context.env.find("PATH");
  const std::string search = path == context.env.end() ? "" : path->second;
  if (!request.mpirun.empty()) {
    const std::string found = find_executable(request.mpirun, search);
    if (found.empty()) throw UsageError("--mpirun " + request.mpirun + ": not found or not executable");
    return found;
  }
  const std::string found = find_executable("mpirun", search);
  if (found.empty())
    throw UsageError("mpirun was not found on PATH (" + search +
                     "); install Open MPI (Debian: openmpi-bin) or name it with --mpirun PATH");
  return found;
}

void check_program(const std::string& program, const Context& context) {
  const auto path = context.env.find("PATH");
  const std::string search = path == context.env.end() ? "" : path->second;
  if (program.find('/') != std::string::npos) {
    struct stat st {};
    if (stat(program.c_str(), &st) != 0)
      throw UsageError("program '" + program + "' does not exist (" + std::strerror(errno) + ")");
    if (S_ISDIR(st.st_mode)) throw UsageError("program '" + program + "' is a directory, not a program");
    if (!is_executable_file(program))
      throw UsageError("program '" + program + "' is not executable (chmod +x it, or check the path)");
    return;
  }
  if (find_executable(program, search).empty())
    throw UsageError("program '" + program + "' was not found on PATH, or is not executable there (PATH=" + search +
                     "); give its path, e.g. ./" + program);
}

// The recommended mpirun flags, each as a group that --mpi-args may override.
struct Flag {
  std::vector<std::string> words;
  std::string key;  // what overrides it: "bind-to", "map-by", "mca:<param>"
};

std::string option_key(const std::vector<std::string>& words, size_t i) {
  std::string w = words[i];
  if (starts_with(w, "--")) w = w.substr(1);
  if ((w == "-mca" || w == "-gmca") && i + 1 < words.size()) return "mca:" + words[i + 1];
  if (w == "-bind-to") return "bind-to";
  if (w == "-map-by") return "map-by";
  return "";
}

void check_mpi_args(const std::vector<std::string>& words, const Request& request) {
  for (const std::string& word : words) {
    std::string w = starts_with(word, "--") ? word.substr(1) : word;
    w = w.substr(0, w.find('='));
    const char* use = nullptr;
    if (w == "-np" || w == "-n" || w == "-c") use = "-np N";
    if (w == "-H" || w == "-host" || w == "-hostfile" || w == "-machinefile" || w == "-default-hostfile")
      use = "-H or --hostfile";
    if ((w == "-output-filename" || w == "-output-dir") && !request.output_dir.empty()) use = "--output-dir once";
    if (use)
      throw UsageError("--mpi-args: '" + word + "' conflicts with cohortrun's own options; use cohortrun's " + use);
  }
}

}  // namespace

JobOptions job_options(const Request& request, const Plan& plan) {
  JobOptions options;
  if (request.link_timeout_s > 0) options.lost_host_end_s = link_watch(request.link_timeout_s).end_s();
  if (plan.link_watch) options.link_watch = link_watch(request.link_timeout_s);
  return options;
}

std::string find_executable(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? name : "";
  size_t start = 0;
  while (start <= path.size()) {
    const size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return "";
}

bool user_sees_terminal(bool stdout_isatty, const std::map<std::string, std::string>& env) {
  return stdout_isatty && !env.count("JPY_PARENT_PID") && !env.count("JPY_SESSION_NAME");
}

Context current_context() {
  Context c;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) c.env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  c.root = geteuid() == 0;
  c.stdout_tty = user_sees_terminal(isatty(STDOUT_FILENO) == 1, c.env);
  c.cores = count_cores();
  std::vector<char> buffer(4096);
  if (getcwd(buffer.data(), buffer.size())) c.cwd = buffer.data();
  const ssize_t n = readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
  if (n > 0) {
    std::string self(buffer.data(), static_cast<size_t>(n));
    const std::string monitor = self.substr(0, self.rfind('/') + 1) + std::string(kRankMonitorName);
    if (is_executable_file(monitor)) c.monitor = monitor;
  }
  return c;
}

namespace {

// mpirun's own options: hosts, root, oversubscription, the recommended flags (less those
// that --mpi-args overrides), output handling.
std::vector<std::string> mpirun_options(const Request& request, const Plan& plan, const Context& context,
                                        const std::set<std::string>& overridden) {
  std::vector<std::string> a;
  if (!request.host_list.empty()) a.insert(a.end(), {"-H", request.host_list});
  if (!request.hostfile.empty()) a.insert(a.end(), {"--hostfile", request.hostfile});
  if (context.root) a.push_back("--allow-run-as-root");
  if (plan.oversubscribed) a.push_back("--oversubscribe");
  std::vector<Flag> flags;
  if (plan.cores_per_rank > 0) {
    flags.push_back({{"-bind-to", "core"}, "bind-to"});
    flags.push_back({{"-map-by", "slot:PE=" + std::to_string(plan.cores_per_rank)}, "map-by"});
  } else {
    flags.push_back({{"-bind-to", "none"}, "bind-to"});
    flags.push_back({{"-map-by", "slot"}, "map-by"});
  }
  flags.insert(flags.end(), {
                                {{"-mca", "pml", "ob1"}, "mca:pml"},
                                {{"-mca", "btl", "self,vader,tcp"}, "mca:btl"},
                                // Without this, Open MPI folds the "rank R exited on signal S" report away.
                                {{"-mca", "orte_base_help_aggregate", "0"}, "mca:orte_base_help_aggregate"},
                            });
  // Open MPI's defaults (300 s idle, then 9 probes 20 s apart) leave a job whose host is
  // gone waiting for 8 minutes.
  if (request.link_timeout_s > 0) {
    const LinkWatch w = link_watch(request.link_timeout_s);
    for (const auto& [param, value] : {std::pair{"oob_tcp_keepalive_time", w.idle_s},
                                       {"oob_tcp_keepalive_intvl", w.interval_s},
                                       {"oob_tcp_keepalive_probes", w.probes}})
      flags.push_back({{"-mca", param, std::to_string(value)}, std::string("mca:") + param});
  }
  if (plan.oversubscribed) flags.push_back({{"-mca", "mpi_yield_when_idle", "1"}, "mca:mpi_yield_when_idle"});
  for (const Flag& f : flags)
    if (!overridden.count(f.key)) a.insert(a.end(), f.words.begin(), f.words.end());
  if (request.tag_output) a.push_back("--tag-output");
  if (!plan.output_dir.empty()) a.insert(a.end(), {"--output-filename", plan.output_dir});
  return a;
}

// The -x options: inherited variables by name (PATH and LD_LIBRARY_PATH first), then
// OMP_WAIT_POLICY and COHORT_PROGRESS, then what the command line set. An explicit
// value replaces an inherited variable of the same name.
std::vector<std::string> export_options(const Request& request, const Context& context) {
  std::vector<std::pair<std::string, std::optional<std::string>>> exports;
  std::set<std::string> explicit_names;
  for (const Export& e : request.exports) explicit_names.insert(e.name);
  std::vector<std::string> inherited;
  for (const auto& [name, value] : context.env) {
    if (!exported_by_name(name) || explicit_names.count(name)) continue;
    if (starts_with(name, "COHORT_")) check_inherited_setting(name, value);
    if (name != "PATH" && name != "LD_LIBRARY_PATH") inherited.push_back(name);
  }
  for (const char* first : {"LD_LIBRARY_PATH", "PATH"})
    if (context.env.count(first) && !explicit_names.count(first)) inherited.insert(inherited.begin(), first);
  for (const std::string& name : inherited) exports.emplace_back(name, std::nullopt);

  if (!context.env.count("OMP_WAIT_POLICY") && !explicit_names.count("OMP_WAIT_POLICY"))
    exports.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
  // Ranks cannot see the user's terminal: an unset or "auto" COHORT_PROGRESS is decided here.
  const auto progress = context.env.find("COHORT_PROGRESS");
  const bool progress_set =
      explicit_names.count("COHORT_PROGRESS") ||
      (progress != context.env.end() && (progress->second == "tty" || progress->second == "plain"));
  if (!progress_set) {
    std::erase_if(exports, [](const auto& e) { return e.first == "COHORT_PROGRESS"; });
    exports.emplace_back("COHORT_PROGRESS", context.stdout_tty ? "tty" : "plain");
  }
  for (const Export& e : request.exports) exports.emplace_back(e.name, e.value);

  std::vector<std::string> a;
  for (const auto& [name, value] : exports) {
    a.push_back("-x");
    a.push_back(value ? name + "=" + *value : name);
  }
  return a;
}

}  // namespace

Plan build_plan(const Request& request, int np, const Context& context) {
  Plan plan;
  const std::string mpirun = resolve_mpirun(request, context);
  check_program(request.program.at(0), context);

  std::vector<Host> hosts;
  if (!request.host_list.empty()) hosts = parse_host_list(request.host_list);
  if (!request.hostfile.empty()) hosts = read_hostfile(request.hostfile);
  plan.slots = hosts.empty() ? context.cores : total_slots(hosts);
  plan.oversubscribed = np > plan.slots;

  std::vector<std::string> user;
  for (const std::string& text : request.mpi_args)
    for (std::string& w : split_words(text, "--mpi-args")) user.push_back(std::move(w));
  check_mpi_args(user, request);
  std::set<std::string> overridden;
  for (size_t i = 0; i < user.size(); ++i)
    if (std::string k = option_key(user, i); !k.empty()) overridden.insert(k);
  // --bind-cores: each rank on cores of its own, so its threads (compute, the collective
  // engine, the input pipeline) never take another rank's core and are never moved. For
  // a node the job has to itself: where other processes load the cores, a bound rank
  // cannot move away from them (ranks in lockstep then wait for the most loaded core).
  // Other hosts' cores are not known here, and more ranks than cores cannot be bound apart.
  if (request.bind_cores) {
    if (!hosts.empty())
      throw UsageError("--bind-cores binds ranks on this host only: it cannot be combined with -H or --hostfile");
    if (plan.oversubscribed)
      throw UsageError("--bind-cores needs a core for every rank: " + std::to_string(np) + " ranks, " +
                       std::to_string(context.cores) + " cores");
    if (overridden.count("bind-to") || overridden.count("map-by"))
      throw UsageError("--bind-cores cannot be combined with -bind-to or -map-by in --mpi-args");
    plan.cores_per_rank = context.cores / np;
  }

  if (!request.output_dir.empty()) {
    plan.output_dir = request.output_dir[0] == '/' ? request.output_dir : context.cwd + "/" + request.output_dir;
    struct stat st {};
    if (stat(plan.output_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      throw UsageError("--output-dir " + request.output_dir + ": exists and is not a directory");
  }

  const bool monitor = request.rank_monitor && !context.monitor.empty();
  plan.monitored = !request.rank_monitor || monitor;
  // Not in a --dry-run line: pasted into a shell, it runs with no cohortrun to listen.
  plan.link_watch = request.link_timeout_s > 0 && monitor && !hosts.empty() && !request.dry_run;
  std::vector<std::string> exports = export_options(request, context);
  // By name: the value, set in mpirun's environment as the job starts, holds the watch's token.
  if (plan.link_watch) exports.insert(exports.end(), {"-x", kLinkWatchVariable});

  std::vector<std::string>& a = plan.argv;
  a = {mpirun, "-np", std::to_string(np)};
  for (const auto& part : {mpirun_options(request, plan, context, overridden), exports, user})
    a.insert(a.end(), part.begin(), part.end());
  plan.ranks_fill_slots = !plan.oversubscribed && !overridden.count("map-by");
  if (monitor) a.insert(a.end(), {context.monitor, "--"});
  a.insert(a.end(), request.program.begin(), request.program.end());
  return plan;
}

}  // namespace cohortrun
