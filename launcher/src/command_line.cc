#include "command_line.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>

#include <cohort/cohort.h>

#include "text.h"

namespace cohortrun {
namespace {

// Launcher-only long options, normalised ('-' → '_'), and whether they take a value.
struct LauncherOption {
  const char* name;
  bool takes_value;
};
constexpr LauncherOption kLauncherOptions[] = {
    {"np", true},           {"host", true},         {"hostfile", true},
    {"dry_run", false},     {"mpi_args", true},     {"env", true},
    {"nccl_debug", true},   {"output_dir", true},   {"tag_output", false},
    {"mpirun", true},       {"check_build", false}, {"help", false},
    {"version", false},     {"sweep_out", true},    {"no_rank_monitor", false},
    {"max_restarts", true}, {"min_np", true},       {"exclude_failed_hosts", false},
    {"over", true},         {"bind_cores", false},  {"link_timeout", true},
};

std::string normalize(std::string_view flag) {
  std::string key(flag);
  for (char& c : key) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

const LauncherOption* find_launcher_option(const std::string& key) {
  for (const LauncherOption& o : kLauncherOptions)
    if (key == o.name) return &o;
  return nullptr;
}

// The registry's description of a key, or nullopt when it is not a library setting.
std::optional<cohort_option_info_t> describe(const std::string& key) {
  cohort_option_info_t info{};
  info.struct_size = sizeof info;
  if (cohort_option_describe(key.c_str(), &info) != COHORT_OK) return std::nullopt;
  return info;
}

std::string suggest(const std::string& key) {
  std::string best;
  size_t best_distance = 4;
  auto consider = [&](std::string_view candidate, char separator) {
    const size_t d = edit_distance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
      std::replace(best.begin(), best.end(), '_', separator);
    }
  };
  for (const LauncherOption& o : kLauncherOptions) consider(o.name, '-');
  for (size_t i = 0; i < cohort_option_count(); ++i) consider(cohort_option_name(i), '_');
  return best.empty() ? "" : " (did you mean --" + best + "?)";
}

// Validates a library setting through the public API and returns its canonical text.
std::string canonical_setting(const std::string& key, const std::string& value, const std::string& origin) {
  cohort_config_t* cfg = nullptr;
  if (cohort_config_create(&cfg) != COHORT_OK) throw UsageError("cannot create a cohort config");
  std::string result;
  std::string error;
  if (cohort_config_set(cfg, key.c_str(), value.c_str()) != COHORT_OK) {
    error = cohort_last_error();
  } else {
    char buffer[4096];
    if (cohort_config_get(cfg, key.c_str(), buffer, sizeof buffer, nullptr) == COHORT_OK)
      result = buffer;
    else
      result = value;
  }
  cohort_config_destroy(cfg);
  if (!error.empty()) {
    // "cohort_config_set: option 'x' ..." → keep the part after the function name.
    const size_t colon = error.find(": ");
    throw UsageError(origin + ": " + (colon == std::string::npos ? error : error.substr(colon + 2)));
  }
  return result;
}

// A count of `what` ("ranks") of at least `least`.
int parse_count(const std::string& text, const std::string& flag, const std::string& what, int least) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string bound = "the number of " + what + " must be ";
  if (ec != std::errc() || end != text.data() + text.size())
    throw UsageError(flag + " " + text + ": " + bound + "an integer of at least " + std::to_string(least));
  if (value < least) throw UsageError(flag + " " + text + ": " + bound + "at least " + std::to_string(least));
  return value;
}

int parse_rank_count(const std::string& text, const std::string& flag) { return parse_count(text, flag, "ranks", 1); }

bool valid_env_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

class Parser {
 public:
  explicit Parser(const std::vector<std::string>& args) : args_(args) {}

  Request parse() {
    size_t i = 0;
    if (!args_.empty() && args_[0] == "sweep") {
      request_.mode = Mode::kSweep;
      i = 1;
    }
    for (; i < args_.size(); ++i) {
      const std::string& arg = args_[i];
      if (arg == "--") {
        program_from(i + 1);
        break;
      }
      if (arg.size() < 2 || arg[0] != '-') {
        program_from(i);
        break;
      }
      i = option(i);
    }
    finish();
    return std::move(request_);
  }

 private:
  void program_from(size_t i) { request_.program.assign(args_.begin() + static_cast<long>(i), args_.end()); }

  // The value of an option: "--k=v" or the next argument. Returns the index consumed.
  size_t value_of(size_t i, const std::string& flag, const std::optional<std::string>& inline_value,
                  std::string& value) {
    if (inline_value) {
      value = *inline_value;
      return i;
    }
    if (i + 1 >= args_.size()) throw UsageError(flag + " needs a value");
    value = args_[i + 1];
    return i + 1;
  }

  size_t option(size_t i) {
    const std::string& arg = args_[i];
    // Single-dash options of mpirun's spelling.
    if (arg == "-np" || arg == "-n") return launcher("np", arg, std::nullopt, i);
    if (arg == "-H") return launcher("host", arg, std::nullopt, i);
    if (arg == "-h") return launcher("help", arg, std::nullopt, i);
    if (arg.rfind("--", 0) != 0)
      throw UsageError("unknown option '" + arg + "'" + suggest(normalize(arg.substr(1))) + "; see cohortrun --help");
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    std::optional<std::string> inline_value;
    if (eq != std::string::npos) inline_value = arg.substr(eq + 1);
    const std::string key = normalize(flag.substr(2));
    if (find_launcher_option(key)) return launcher(key, flag, inline_value, i);
    return setting(key, flag, inline_value, i);
  }

  size_t launcher(const std::string& key, const std::string& flag, const std::optional<std::string>& inline_value,
                  size_t i) {
    const LauncherOption* spec = find_launcher_option(key);
    std::string value;
    if (spec->takes_value) {
      i = value_of(i, flag, inline_value, value);
    } else if (inline_value) {
      throw UsageError(flag + " takes no value (got '" + *inline_value + "')");
    }
    if (key == "np") {
      if (np_text_) throw UsageError("-np is given twice (" + *np_text_ + " and " + value + ")");
      np_text_ = value;
    } else if (key == "host") {
      if (!request_.host_list.empty()) throw UsageError("-H is given twice; list every host in one -H a:2,b:2");
      request_.host_list = value;
      if (value.empty()) throw UsageError("-H: the host list is empty (expected host[:slots],…)");
    } else if (key == "hostfile") {
      request_.hostfile = value;
      if (value.empty()) throw UsageError("--hostfile needs a file name");
    } else if (key == "dry_run") {
      request_.dry_run = true;
    } else if (key == "mpi_args") {
      request_.mpi_args.push_back(value);
    } else if (key == "env") {
      const size_t eq = value.find('=');
      if (eq == std::string::npos || !valid_env_name(value.substr(0, eq)))
        throw UsageError("--env " + value + ": expected NAME=VALUE with NAME made of letters, digits and _");
      add_env(value.substr(0, eq), value.substr(eq + 1), "--env " + value);
    } else if (key == "nccl_debug") {
      const std::string level = upper(value);
      if (level != "VERSION" && level != "WARN" && level != "INFO" && level != "TRACE" && level != "ABORT")
        throw UsageError("--nccl-debug " + value + ": expected one of VERSION, WARN, INFO, TRACE, ABORT");
      add_export("NCCL_DEBUG", level, "--nccl-debug " + value);
    } else if (key == "output_dir") {
      if (value.empty()) throw UsageError("--output-dir needs a directory name");
      request_.output_dir = value;
    } else if (key == "tag_output") {
      request_.tag_output = true;
    } else if (key == "bind_cores") {
      request_.bind_cores = true;
    } else if (key == "no_rank_monitor") {
      request_.rank_monitor = false;
    } else if (key == "mpirun") {
      request_.mpirun = value;
    } else if (key == "sweep_out") {
      request_.sweep_prefix = value;
    } else if (key == "max_restarts") {
      request_.max_restarts = parse_count(value, flag, "restarts", 0);
    } else if (key == "min_np") {
      request_.min_np = parse_rank_count(value, flag);
    } else if (key == "exclude_failed_hosts") {
      request_.exclude_failed_hosts = true;
    } else if (key == "link_timeout") {
      request_.link_timeout_s = parse_count(value, flag, "seconds", 0);
      if (request_.link_timeout_s > 0 && request_.link_timeout_s < kMinLinkTimeoutS)
        throw UsageError(flag + " " + value + ": the number of seconds must be at least " +
                         std::to_string(kMinLinkTimeoutS) + ", or 0 for Open MPI's own settings (minutes)");
    } else if (key == "over") {
      over(value);
    } else if (key == "check_build" || key == "help" || key == "version") {
      const Mode mode = key == "check_build" ? Mode::kCheckBuild : key == "help" ? Mode::kHelp : Mode::kVersion;
      if (special_ && *special_ != flag) throw UsageError(*special_ + " and " + flag + " cannot be combined");
      special_ = flag;
      special_mode_ = mode;
    }
    return i;
  }

  size_t setting(const std::string& key, const std::string& flag, const std::optional<std::string>& inline_value,
                 size_t i) {
    std::optional<cohort_option_info_t> info = describe(key);
    std::string value;
    if (!info && key.rfind("no_", 0) == 0) {  // --no-json
      info = describe(key.substr(3));
      if (!info || info->type != COHORT_OPTION_BOOL || inline_value)
        throw UsageError("unknown option '" + flag + "'" + suggest(key) + "; see cohortrun --help");
      value = "false";
    } else if (!info) {
      throw UsageError("unknown option '" + flag + "'" + suggest(key) + "; see cohortrun --help");
    } else if (info->type == COHORT_OPTION_BOOL && !inline_value) {
      value = "true";
    } else {
      i = value_of(i, flag, inline_value, value);
    }
    const std::string origin = flag + "=" + value;
    add_export("COHORT_" + upper(info->name), canonical_setting(info->name, value, origin), origin);
    return i;
  }

  // --over KEY=V1,V2,…: a registry key, each value valid for it, each key once.
  void over(const std::string& text) {
    const std::string origin = "--over " + text;
    const size_t eq = text.find('=');
    const std::string key = normalize(text.substr(0, eq));
    if (eq == std::string::npos || eq + 1 == text.size())
      throw UsageError(origin + ": expected KEY=VALUE1,VALUE2,… (a library setting and the values to sweep)");
    const std::optional<cohort_option_info_t> info = describe(key);
    if (!info) throw UsageError(origin + ": unknown setting '" + key + "'" + suggest(key) + "; see cohortrun --help");
    SweepOption o{info->name, {}};
    for (const std::string& v : split_list(text.substr(eq + 1))) {
      if (v.empty()) throw UsageError(origin + ": an empty value in the list");
      o.values.push_back(canonical_setting(o.key, v, origin));
    }
    for (const SweepOption& other : request_.sweep_over)
      if (other.key == o.key)
        throw UsageError(origin + ": " + o.key + " is swept twice; give its values in one --over");
    request_.sweep_over.push_back(std::move(o));
  }

  static std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
      const size_t comma = text.find(',', start);
      out.push_back(text.substr(start, comma - start));
      if (comma == std::string::npos) return out;
      start = comma + 1;
    }
  }

  // A swept setting must reach the ranks from the sweep alone: the same key given as a
  // setting or as a program argument (which wins over the environment) is an error.
  void check_swept_keys() const {
    for (const SweepOption& o : request_.sweep_over) {
      const std::string env = "COHORT_" + upper(o.key);
      for (const Export& e : request_.exports)
        if (e.name == env)
          throw UsageError("--over " + o.key + " sweeps a setting also given by " + e.origin + "; give it one way");
      for (size_t i = 1; i < request_.program.size(); ++i) {
        const std::string& arg = request_.program[i];
        if (arg.rfind("--", 0) != 0) continue;
        std::string flag = normalize(arg.substr(2, arg.find('=') - 2));
        if (flag.rfind("no_", 0) == 0) flag = flag.substr(3);
        if (flag == o.key)
          throw UsageError("the program's argument " + arg + " would override the swept " + o.key +
                           " (--over); remove it from the program's arguments");
      }
    }
  }

  void add_env(const std::string& name, const std::string& value, const std::string& origin) {
    if (name.rfind("COHORT_", 0) == 0) {
      const std::string key = normalize(name.substr(7));
      if (describe(key)) {
        add_export(name, canonical_setting(key, value, origin), origin);
        return;
      }
    }
    add_export(name, value, origin);
  }

  void add_export(const std::string& name, const std::string& value, const std::string& origin) {
    for (const Export& e : request_.exports) {
      if (e.name != name) continue;
      if (e.value == value) return;
      throw UsageError(name + " is given twice with different values: by " + e.origin + " and by " + origin);
    }
    request_.exports.push_back({name, value, origin});
  }

  void finish() {
    if (special_) {
      if (request_.mode == Mode::kSweep) throw UsageError(*special_ + " cannot be combined with sweep");
      const bool other =
          np_text_ || !request_.program.empty() || !request_.host_list.empty() || !request_.hostfile.empty() ||
          request_.dry_run || !request_.mpi_args.empty() || !request_.exports.empty() || !request_.output_dir.empty() ||
          request_.tag_output || request_.bind_cores || !request_.rank_monitor || request_.max_restarts > 0 ||
          request_.exclude_failed_hosts || request_.min_np > 0 || request_.link_timeout_s != kDefaultLinkTimeoutS;
      if (other && special_mode_ != Mode::kHelp) throw UsageError(*special_ + " takes no other option and no program");
      request_.mode = special_mode_;
      return;
    }
    if (!request_.host_list.empty() && !request_.hostfile.empty())
      throw UsageError("-H and --hostfile cannot be combined: give the hosts one way");
    if (!request_.sweep_prefix.empty() && request_.mode != Mode::kSweep)
      throw UsageError("--sweep-out is only for cohortrun sweep");
    if (!request_.sweep_over.empty() && request_.mode != Mode::kSweep)
      throw UsageError("--over is only for cohortrun sweep");
    if (!np_text_)
      throw UsageError(request_.mode == Mode::kSweep ? "missing -np N1,N2,… (the sizes to sweep)"
                                                     : "missing -np N (the number of ranks)");
    if (request_.mode == Mode::kSweep) {
      if (request_.dry_run) throw UsageError("--dry-run cannot be combined with sweep");
      size_t start = 0;
      while (true) {
        const size_t comma = np_text_->find(',', start);
        request_.sweep_sizes.push_back(parse_rank_count(np_text_->substr(start, comma - start), "-np"));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else {
      request_.np = parse_rank_count(*np_text_, "-np");
    }
    if (request_.program.empty()) throw UsageError("no program to run: cohortrun -np N [options] -- PROGRAM ARGS");
    check_swept_keys();
    check_restart_options();
  }

  void check_restart_options() const {
    if (request_.mode == Mode::kSweep && request_.max_restarts > 0)
      throw UsageError("--max-restarts cannot be combined with sweep");
    if (request_.exclude_failed_hosts && request_.max_restarts == 0)
      throw UsageError("--exclude-failed-hosts needs --max-restarts N (it decides where a restart runs)");
    if (request_.exclude_failed_hosts && request_.host_list.empty() && request_.hostfile.empty())
      throw UsageError("--exclude-failed-hosts needs the hosts: give -H host:slots,… or --hostfile FILE");
    if (request_.min_np > 0 && !request_.exclude_failed_hosts)
      throw UsageError("--min-np is for --exclude-failed-hosts (the fewest ranks a restart may run on)");
    if (request_.min_np > request_.np)
      throw UsageError("--min-np " + std::to_string(request_.min_np) + " is more than -np " +
                       std::to_string(request_.np));
  }

  const std::vector<std::string>& args_;
  Request request_;
  std::optional<std::string> np_text_;
  std::optional<std::string> special_;
  Mode special_mode_ = Mode::kRun;
};

}  // namespace

Request parse_command_line(const std::vector<std::string>& args) { return Parser(args).parse(); }

std::string usage_text() {
  return R"(usage: cohortrun -np N [-H host:slots,…|--hostfile FILE] [options] [--] PROGRAM [ARGS…]
       cohortrun sweep -np N1,N2,… [--over KEY=V1,V2,…]… [options] [--] PROGRAM [ARGS…]
       cohortrun --check-build

Starts PROGRAM on N ranks through Open MPI's mpirun with the recommended flags
(-bind-to none -map-by slot -mca pml ob1 -mca btl self,vader,tcp), exporting PATH,
LD_LIBRARY_PATH, NCCL_*, COHORT_* and OMP_* (those that are set), OMP_WAIT_POLICY=PASSIVE
and COHORT_PROGRESS=tty|plain. The exit status is the job's.

Launcher options:
  -np N, -n N           ranks to start (sweep: a list such as 1,2,4)
  -H host:slots,…       hosts and their slots (Open MPI's -H)
  --hostfile FILE       an Open MPI hostfile
  --dry-run             print the mpirun command (shell-quoted) instead of running it
  --mpi-args "…"        extra mpirun arguments; they override the recommended ones
  --env NAME=VALUE      set a variable on every rank
  --nccl-debug LEVEL    NCCL_DEBUG on every rank (VERSION, WARN, INFO, TRACE, ABORT)
  --output-dir DIR      also write each rank's output to DIR/1/rank.N/{stdout,stderr}
  --tag-output          prefix each output line with the rank that wrote it
  --bind-cores          bind each rank to cores/N cores of its own (-bind-to core -map-by
                        slot:PE=K): for a node that runs this job alone with every core
                        computing; only on this host (no -H, no hostfile), N <= cores
  --no-rank-monitor     start PROGRAM directly, not under cohortrun-monitor (which names a
                        rank that fails; it must be at the same path on every host)
  --mpirun PATH         the mpirun to use (default: mpirun on PATH)
  --max-restarts N      when a rank fails, start the job again, up to N times; the ranks
                        get COHORT_RESUME=true, so a program run with --checkpoint_dir
                        (cohort-train) resumes from its latest complete checkpoint
  --exclude-failed-hosts  restart without the host of the rank that failed, when the
                        other hosts still have enough slots (-np, or --min-np)
  --min-np M            with --exclude-failed-hosts: a restart may run on as few as M
                        ranks; only for programs that resume at another rank count
                        (cohort-train rescales its learning rate and epoch length)
  --link-timeout S      a job whose host stops answering (a link down, the host gone)
                        ends within S seconds (default 30, at least 10): mpirun gets TCP
                        keepalive settings that notice it in about 2/3 of S, each rank's
                        monitor sends cohortrun a heartbeat (on a TCP port of this host),
                        and cohortrun stops the job by S; 0 leaves Open MPI's own (minutes)
  --sweep-out PREFIX    sweep: write PREFIX.csv and PREFIX.json (default: cohort-sweep)
  --over KEY=V1,V2,…    sweep: also run with each value of the library setting KEY
                        (repeatable: the cross product of every -np and --over value)
  --check-build         print what this build of cohort can do
  --help, --version

Library settings (sent to the ranks as COHORT_<KEY>; '-' and '_' alike):
  --key=value or --key value; booleans also --key and --no-key. They are:
)";
}

}  // namespace cohortrun
