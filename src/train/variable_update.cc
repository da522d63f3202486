#include "train/variable_update.h"

#include <algorithm>

#include "core/config.h"
#include "core/status.h"

namespace cohort::train {
namespace {

struct ModeName {
  VariableUpdate mode;
  const char* name;
};
constexpr ModeName kModes[] = {{VariableUpdate::kReplicated, "replicated"},
                               {VariableUpdate::kParameterServer, "parameter_server"},
                               {VariableUpdate::kAsyncParameterServer, "async_parameter_server"},
                               {VariableUpdate::kIndependent, "independent"}};

}  // namespace

VariableUpdate parse_variable_update(std::string_view name) {
  for (const ModeName& m : kModes)
    if (name == m.name) return m.mode;
  fail(Code::kInvalidArgument, "unknown variable_update '", name,
       "'; expected one of replicated|parameter_server|async_parameter_server|independent");
}

const char* variable_update_name(VariableUpdate mode) {
  for (const ModeName& m : kModes)
    if (m.mode == mode) return m.name;
  return "unknown";
}

bool workers_in_lockstep(VariableUpdate mode) {
  return mode == VariableUpdate::kReplicated || mode == VariableUpdate::kParameterServer;
}

Roles Roles::from_config(const Config& config, int ranks) {
  Roles r;
  r.mode = parse_variable_update(config.get_string("variable_update"));
  r.ranks = ranks;
  if (r.mode != VariableUpdate::kParameterServer && r.mode != VariableUpdate::kAsyncParameterServer) return r;
  r.servers = static_cast<int>(config.get_int("ps_ranks"));
  r.dedicated = config.get_bool("ps_dedicated");
  if (r.mode == VariableUpdate::kAsyncParameterServer) r.max_lead = static_cast<int>(config.get_int("ps_max_lead"));
  if (r.dedicated)
    require(r.servers < ranks, "ps_ranks=", r.servers, " with ps_dedicated=true leaves no rank to compute on ", ranks,
            " rank(s); start more ranks, lower ps_ranks, or set ps_dedicated=false (servers that also compute)");
  else
    require(r.servers <= ranks, "ps_ranks=", r.servers, " is more than the ", ranks, " rank(s) of the job");
  return r;
}

int Roles::server_index(int rank) const {
  if (!parameter_server()) return -1;
  const int s = dedicated ? rank - (ranks - servers) : rank;
  return s >= 0 && s < servers ? s : -1;
}

int64_t Roles::update_batch(int64_t batch_per_pass) const {
  const bool averaged = mode == VariableUpdate::kReplicated || mode == VariableUpdate::kParameterServer;
  return averaged ? batch_per_pass * workers() : batch_per_pass;
}

std::vector<int> place_variables(const std::vector<int64_t>& bytes, int servers) {
  require(servers >= 1, "place_variables: ", servers, " servers");
  std::vector<int64_t> load(static_cast<size_t>(servers), 0);
  std::vector<int> where(bytes.size(), 0);
  for (size_t v = 0; v < bytes.size(); ++v) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equals
    where[v] = static_cast<int>(least - load.begin());
    *least += bytes[v];
  }
  return where;
}

}  // namespace cohort::train
