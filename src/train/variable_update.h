// The ways a training step turns gradients into updates (tf_cnn_benchmarks'
// --variable_update), and who does what in each:
//   replicated              every rank computes; gradients are allreduced during backward
//                           and every rank applies the same averaged update;
//   parameter_server        workers push their gradients to the server ranks, which hold
//                           the variables (sharded by size) and the optimizer state,
//                           average one push from every worker, update, and send the
//                           variables back: one update per step, as replicated;
//   async_parameter_server  the servers apply each worker's push as it comes and answer
//                           it with the variables as they are then: workers never wait for
//                           each other (up to ps_max_lead steps apart);
//   independent             every rank trains its own model; nothing is exchanged.
// Server ranks either also compute (the first ps_ranks ranks) or are dedicated (the last
// ps_ranks ranks, ps_dedicated), so rank 0 always computes, prints and saves.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace cohort {
class Config;
}

namespace cohort::train {

enum class VariableUpdate { kReplicated, kParameterServer, kAsyncParameterServer, kIndependent };

// Throws kInvalidArgument listing the four names.
VariableUpdate parse_variable_update(std::string_view name);
const char* variable_update_name(VariableUpdate mode);
// Whether the workers' steps move together: one update takes every worker's gradients
// (replicated, parameter_server), so one worker's step time is every worker's. With
// async_parameter_server and independent each worker runs at its own pace.
bool workers_in_lockstep(VariableUpdate mode);

// Which ranks compute (workers) and which hold variables (servers).
struct Roles {
  VariableUpdate mode = VariableUpdate::kReplicated;
  int ranks = 1;
  int servers = 0;  // parameter-server modes only
  bool dedicated = false;
  int max_lead = -1;  // async_parameter_server: -1 = unbounded

  // From variable_update, ps_ranks, ps_dedicated and ps_max_lead. Throws
  // kInvalidArgument naming the options when there would be no worker or more servers
  // than ranks.
  static Roles from_config(const Config& config, int ranks);

  bool parameter_server() const { return servers > 0; }
  int workers() const { return dedicated ? ranks - servers : ranks; }
  bool is_worker(int rank) const { return !dedicated || rank < ranks - servers; }
  // The rank of server s, and the server index of a rank (-1 when it holds nothing).
  int server_rank(int s) const { return dedicated ? ranks - servers + s : s; }
  int server_index(int rank) const;
  // The global batch one update averages over, for the learning rate's linear scaling:
  // every worker's batch in the synchronous modes, one batch otherwise.
  int64_t update_batch(int64_t batch_per_pass) const;
};

// TensorFlow's greedy load balancing (GreedyLoadBalancingStrategy with its byte-size
// load): each variable in the model's order goes to the server holding the fewest bytes
// so far (ties: the lower index). Returns the server of each variable.
std::vector<int> place_variables(const std::vector<int64_t>& bytes, int servers);

}  // namespace cohort::train
