// The extern "C" shim of collectives.h: converts DLTensors to borrowed Tensors and
// hands them to the runtime's engine.
#include <cstddef>
#include <cstring>

#include "comm/engine.h"
#include "handles.h"
#include "runtime/mpi_process.h"
#include "core/logging.h"
#include "shim.h"
#include "structs.h"

struct cohort_request_t {
  std::shared_ptr<cohort::Runtime> runtime;
  std::shared_ptr<cohort::comm::Request> request;
  std::string what;  // "allreduce 'name'", for the message of a destroy that gives up waiting
};

using namespace cohort;
using capi::guard;
using capi::need;

namespace {

comm::Engine& engine_of(cohort_runtime_t* rt) {
  need(rt, "runtime");
  mpi_process::check_not_poisoned();
  return rt->runtime->engine();
}

std::string name_of(const char* name) { return need(name, "name"); }

comm::ReduceOp reduce_op_of(int op) {
  switch (op) {
    case COHORT_REDUCE_SUM:
      return comm::ReduceOp::kSum;
    case COHORT_REDUCE_AVERAGE:
      return comm::ReduceOp::kAverage;
    case COHORT_REDUCE_MIN:
      return comm::ReduceOp::kMin;
    case COHORT_REDUCE_MAX:
      return comm::ReduceOp::kMax;
    case COHORT_REDUCE_PRODUCT:
      return comm::ReduceOp::kProduct;
  }
  fail(Code::kInvalidArgument, "reduce op ", op,
       " is not one of COHORT_REDUCE_SUM, _AVERAGE, _MIN, _MAX, _PRODUCT (0..4)");
}

constexpr cohort_allreduce_options_t kDefaultAllreduceOptions{sizeof(cohort_allreduce_options_t), COHORT_REDUCE_SUM,
                                                              1.0, 1.0};

void apply_options(comm::TensorEntry& e, const cohort_allreduce_options_t* options) {
  if (!options) return;
  const cohort_allreduce_options_t full = capi::read_in(options, kDefaultAllreduceOptions, "options");
  // Read the op as an int: a caller's out-of-range value must not be loaded as the enum.
  static_assert(sizeof(cohort_reduce_op_t) == sizeof(int), "cohort_reduce_op_t is int-sized");
  int op = 0;
  std::memcpy(&op, reinterpret_cast<const char*>(&full) + offsetof(cohort_allreduce_options_t, op), sizeof op);
  e.op = reduce_op_of(op);
  e.prescale = full.prescale;
  e.postscale = full.postscale;
}

comm::TensorEntry allreduce_entry(const char* name, DLTensor* input, DLTensor* output,
                                  const cohort_allreduce_options_t* options) {
  comm::TensorEntry e;
  e.name = name_of(name);
  e.type = comm::OpType::kAllreduce;
  e.input = capi::tensor_of(input, "input");
  if (output && output != input) e.output = capi::tensor_of(output, "output");
  apply_options(e, options);
  return e;
}

void hand_out(cohort_runtime_t* rt, std::shared_ptr<comm::Request> req, std::string what, cohort_request_t** out) {
  *out = new cohort_request_t{rt->runtime, std::move(req), std::move(what)};
}

std::string what_of(const char* op, const char* name) { return cat(op, " '", name ? name : "", "'"); }

// Waits for the request and for its device work (a device transport completes a request
// once its collectives are enqueued): the caller may read the results at once.
void wait_ok(const comm::Request& req) {
  Status s = req.wait();
  if (!s.is_ok()) throw Error(s);
  req.event().synchronize();
}

// Done, device work included.
bool finished(const comm::Request& req) { return req.test() && req.event().ready(); }

const comm::Request& done_request(const cohort_request_t* r) {
  need(r, "request");
  if (!finished(*r->request)) fail(Code::kInvalidState, "the request has not completed yet; wait for it first");
  Status s = r->request->status();
  if (!s.is_ok()) fail(Code::kInvalidState, "the request failed, so it has no result: ", s.message());
  return *r->request;
}

DLManagedTensor* output_of(const comm::Request& req) {
  Tensor t = req.output();
  if (t.data() == nullptr && t.ndim() == 0)
    fail(Code::kInvalidState, "this request has no result tensor (only allgather, alltoall and reducescatter have)");
  return t.to_dlpack();
}

}  // namespace

namespace {
std::shared_ptr<comm::Request> submit_group(cohort_runtime_t* runtime, size_t count, const char* const* names,
                                            DLTensor* const* inputs, DLTensor* const* outputs,
                                            const cohort_allreduce_options_t* options) {
  comm::Engine& engine = engine_of(runtime);
  require(count >= 1, "count is 0; a group needs at least one tensor");
  need(names, "names");
  need(inputs, "inputs");
  std::vector<comm::TensorEntry> group;
  for (size_t i = 0; i < count; ++i) {
    require(names[i] != nullptr, "names[", i, "] is NULL");
    require(inputs[i] != nullptr, "inputs[", i, "] is NULL");
    group.push_back(allreduce_entry(names[i], inputs[i], outputs ? outputs[i] : nullptr, options));
  }
  return engine.submit(std::move(group));
}
}  // namespace

namespace {
comm::TensorEntry broadcast_entry(const char* name, DLTensor* input, DLTensor* output, int root) {
  comm::TensorEntry e;
  e.name = name_of(name);
  e.type = comm::OpType::kBroadcast;
  e.input = capi::tensor_of(input, "input");
  if (output && output != input) e.output = capi::tensor_of(output, "output");
  e.root = root;
  return e;
}

comm::TensorEntry simple_entry(const char* name, const DLTensor* input, comm::OpType type) {
  comm::TensorEntry e;
  e.name = name_of(name);
  e.type = type;
  e.input = capi::tensor_of(input, "input");
  return e;
}

// splits: NULL (equal parts) or `count` row counts, one per rank.
comm::TensorEntry alltoall_entry(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                 const int64_t* splits, size_t count) {
  comm::TensorEntry e = simple_entry(name, input, comm::OpType::kAlltoall);
  const size_t ranks = static_cast<size_t>(runtime->runtime->size());
  require(splits != nullptr || count == 0, "send_splits is NULL but num_send_splits is ", count);
  require(!splits || count == ranks, "num_send_splits is ", count, " but the runtime has ", ranks,
          " ranks: give one row count per rank, or NULL for equal parts");
  if (splits) e.splits.assign(splits, splits + count);
  return e;
}

// The blocking alltoall: the result tensor and, when asked for, the rows from each rank.
void alltoall(cohort_runtime_t* runtime, const char* name, const DLTensor* input, const int64_t* splits,
              size_t num_splits, DLManagedTensor** result, int64_t* recv_splits, size_t num_recv_splits) {
  need(result, "result");
  *result = nullptr;
  comm::Engine& engine = engine_of(runtime);
  const size_t ranks = static_cast<size_t>(runtime->runtime->size());
  require(!recv_splits || num_recv_splits >= ranks, "num_recv_splits is ", num_recv_splits,
          " but recv_splits needs room for one count per rank (", ranks, ")");
  auto req = engine.submit(alltoall_entry(runtime, name, input, splits, num_splits));
  wait_ok(*req);
  if (recv_splits) {
    std::vector<int64_t> r = req->recv_splits();
    std::copy(r.begin(), r.end(), recv_splits);
  }
  *result = output_of(*req);
}
}  // namespace

namespace {
comm::TensorEntry reducescatter_entry(const char* name, const DLTensor* input, cohort_reduce_op_t op) {
  comm::TensorEntry e = simple_entry(name, input, comm::OpType::kReducescatter);
  e.op = reduce_op_of(static_cast<int>(op));
  return e;
}
}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_allreduce_options_default(cohort_allreduce_options_t* options) {
  return guard("cohort_allreduce_options_default", [&] {
    // Callers leave struct_size unset here, so this call can never learn their size: it
    // fills the struct's first version only, whose size it sets, for every caller.
    constexpr size_t first_version = offsetof(cohort_allreduce_options_t, postscale) + sizeof(double);
    static_assert(first_version <= sizeof(cohort_allreduce_options_t));
    std::memcpy(static_cast<void*>(need(options, "options")), &kDefaultAllreduceOptions, first_version);
    options->struct_size = first_version;
  });
}

COHORT_API cohort_status_t cohort_allreduce_async(cohort_runtime_t* runtime, const char* name, DLTensor* input,
                                                  DLTensor* output, const cohort_allreduce_options_t* options,
                                                  cohort_request_t** out) {
  return guard("cohort_allreduce_async", [&] {
    need(out, "out");
    *out = nullptr;
    comm::Engine& engine = engine_of(runtime);
    hand_out(runtime, engine.submit(allreduce_entry(name, input, output, options)), what_of("allreduce", name), out);
  });
}

COHORT_API cohort_status_t cohort_allreduce(cohort_runtime_t* runtime, const char* name, DLTensor* input,
                                            DLTensor* output, const cohort_allreduce_options_t* options) {
  return guard("cohort_allreduce", [&] {
    comm::Engine& engine = engine_of(runtime);
    wait_ok(*engine.submit(allreduce_entry(name, input, output, options)));
  });
}

COHORT_API cohort_status_t cohort_grouped_allreduce_async(cohort_runtime_t* runtime, size_t count,
                                                          const char* const* names, DLTensor* const* inputs,
                                                          DLTensor* const* outputs,
                                                          const cohort_allreduce_options_t* options,
                                                          cohort_request_t** out) {
  return guard("cohort_grouped_allreduce_async", [&] {
    need(out, "out");
    *out = nullptr;
    hand_out(runtime, submit_group(runtime, count, names, inputs, outputs, options),
             what_of("grouped allreduce", count > 0 && names ? names[0] : ""), out);
  });
}

COHORT_API cohort_status_t cohort_grouped_allreduce(cohort_runtime_t* runtime, size_t count, const char* const* names,
                                                    DLTensor* const* inputs, DLTensor* const* outputs,
                                                    const cohort_allreduce_options_t* options) {
  return guard("cohort_grouped_allreduce",
               [&] { wait_ok(*submit_group(runtime, count, names, inputs, outputs, options)); });
}

COHORT_API cohort_status_t cohort_broadcast_async(cohort_runtime_t* runtime, const char* name, DLTensor* input,
                                                  DLTensor* output, int root, cohort_request_t** out) {
  return guard("cohort_broadcast_async", [&] {
    need(out, "out");
    *out = nullptr;
    comm::Engine& engine = engine_of(runtime);
    hand_out(runtime, engine.submit(broadcast_entry(name, input, output, root)), what_of("broadcast", name), out);
  });
}

COHORT_API cohort_status_t cohort_broadcast(cohort_runtime_t* runtime, const char* name, DLTensor* input,
                                            DLTensor* output, int root) {
  return guard("cohort_broadcast", [&] {
    comm::Engine& engine = engine_of(runtime);
    wait_ok(*engine.submit(broadcast_entry(name, input, output, root)));
  });
}

COHORT_API cohort_status_t cohort_allgather_async(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                                  cohort_request_t** out) {
  return guard("cohort_allgather_async", [&] {
    need(out, "out");
    *out = nullptr;
    comm::Engine& engine = engine_of(runtime);
    hand_out(runtime, engine.submit(simple_entry(name, input, comm::OpType::kAllgather)), what_of("allgather", name),
             out);
  });
}

COHORT_API cohort_status_t cohort_allgather(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                            DLManagedTensor** result) {
  return guard("cohort_allgather", [&] {
    need(result, "result");
    *result = nullptr;
    comm::Engine& engine = engine_of(runtime);
    auto req = engine.submit(simple_entry(name, input, comm::OpType::kAllgather));
    wait_ok(*req);
    *result = output_of(*req);
  });
}

COHORT_API cohort_status_t cohort_alltoallv_async(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                                  const int64_t* send_splits, size_t num_send_splits,
                                                  cohort_request_t** out) {
  return guard("cohort_alltoallv_async", [&] {
    need(out, "out");
    *out = nullptr;
    comm::Engine& engine = engine_of(runtime);
    hand_out(runtime, engine.submit(alltoall_entry(runtime, name, input, send_splits, num_send_splits)),
             what_of("alltoall", name), out);
  });
}

COHORT_API cohort_status_t cohort_alltoallv(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                            const int64_t* send_splits, size_t num_send_splits,
                                            DLManagedTensor** result, int64_t* recv_splits, size_t num_recv_splits) {
  return guard("cohort_alltoallv", [&] {
    alltoall(runtime, name, input, send_splits, num_send_splits, result, recv_splits, num_recv_splits);
  });
}

COHORT_API cohort_status_t cohort_alltoall_async(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                                 const int64_t* splits, cohort_request_t** out) {
  return guard("cohort_alltoall_async", [&] {
    need(out, "out");
    *out = nullptr;
    comm::Engine& engine = engine_of(runtime);
    const size_t ranks = static_cast<size_t>(runtime->runtime->size());
    hand_out(runtime, engine.submit(alltoall_entry(runtime, name, input, splits, splits ? ranks : 0)),
             what_of("alltoall", name), out);
  });
}

COHORT_API cohort_status_t cohort_alltoall(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                           const int64_t* splits, DLManagedTensor** result, int64_t* recv_splits) {
  return guard("cohort_alltoall", [&] {
    const size_t ranks = runtime ? static_cast<size_t>(runtime->runtime->size()) : 0;
    alltoall(runtime, name, input, splits, splits ? ranks : 0, result, recv_splits, ranks);
  });
}

COHORT_API cohort_status_t cohort_reducescatter_async(cohort_runtime_t* runtime, const char* name,
                                                      const DLTensor* input, cohort_reduce_op_t op,
                                                      cohort_request_t** out) {
  return guard("cohort_reducescatter_async", [&] {
    need(out, "out");
    *out = nullptr;
    comm::Engine& engine = engine_of(runtime);
    hand_out(runtime, engine.submit(reducescatter_entry(name, input, op)), what_of("reducescatter", name), out);
  });
}

COHORT_API cohort_status_t cohort_reducescatter(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                                cohort_reduce_op_t op, DLManagedTensor** result) {
  return guard("cohort_reducescatter", [&] {
    need(result, "result");
    *result = nullptr;
    comm::Engine& engine = engine_of(runtime);
    auto req = engine.submit(reducescatter_entry(name, input, op));
    wait_ok(*req);
    *result = output_of(*req);
  });
}

COHORT_API cohort_status_t cohort_barrier_async(cohort_runtime_t* runtime, cohort_request_t** out) {
  return guard("cohort_barrier_async", [&] {
    need(out, "out");
    *out = nullptr;
    hand_out(runtime, engine_of(runtime).barrier(), "a barrier", out);
  });
}

COHORT_API cohort_status_t cohort_barrier(cohort_runtime_t* runtime) {
  return guard("cohort_barrier", [&] { wait_ok(*engine_of(runtime).barrier()); });
}

COHORT_API cohort_status_t cohort_join_async(cohort_runtime_t* runtime, cohort_request_t** out) {
  return guard("cohort_join_async", [&] {
    need(out, "out");
    *out = nullptr;
    hand_out(runtime, engine_of(runtime).join(), "a join", out);
  });
}

COHORT_API cohort_status_t cohort_join(cohort_runtime_t* runtime, int* last_rank) {
  return guard("cohort_join", [&] {
    auto req = engine_of(runtime).join();
    wait_ok(*req);
    if (last_rank) *last_rank = req->join_last_rank();
  });
}

COHORT_API cohort_status_t cohort_request_test(cohort_request_t* request, int* done) {
  return guard("cohort_request_test", [&] {
    need(request, "request");
    *need(done, "done") = finished(*request->request) ? 1 : 0;
  });
}

COHORT_API cohort_status_t cohort_request_wait(cohort_request_t* request) {
  return guard("cohort_request_wait", [&] { wait_ok(*need(request, "request")->request); });
}

COHORT_API cohort_status_t cohort_request_output(cohort_request_t* request, DLManagedTensor** result) {
  return guard("cohort_request_output", [&] {
    need(result, "result");
    *result = nullptr;
    *result = output_of(done_request(request));
  });
}

COHORT_API cohort_status_t cohort_request_recv_splits(cohort_request_t* request, int64_t* splits, size_t count) {
  return guard("cohort_request_recv_splits", [&] {
    need(splits, "splits");
    std::vector<int64_t> r = done_request(request).recv_splits();
    if (r.empty()) fail(Code::kInvalidState, "this request is not an alltoall, so it has no received splits");
    require(count >= r.size(), "count ", count, " is less than the number of ranks (", r.size(), ")");
    std::copy(r.begin(), r.end(), splits);
  });
}

COHORT_API cohort_status_t cohort_request_last_joined(cohort_request_t* request, int* last_rank) {
  return guard("cohort_request_last_joined", [&] {
    need(last_rank, "last_rank");
    int r = done_request(request).join_last_rank();
    if (r < 0) fail(Code::kInvalidState, "this request is not a join");
    *last_rank = r;
  });
}

COHORT_API void cohort_request_destroy(cohort_request_t* request) {
  if (!request) return;
  try {
    const double bound = request->runtime->config().get_float("request_destroy_wait_s");
    const auto timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(bound));
    if (!request->request->wait_for(timeout))
      COHORT_LOG_WARN("cohort_request_destroy: ", request->what, " has not completed after ", bound,
                      " s (request_destroy_wait_s); the handle is released, but the collective stays pending and "
                      "borrows its tensors until it completes or cohort_runtime_destroy() cancels it");
  } catch (...) {
    // Destruction never throws across the boundary.
  }
  delete request;
}

COHORT_API cohort_status_t cohort_runtime_mark_step(cohort_runtime_t* runtime) {
  return guard("cohort_runtime_mark_step", [&] { engine_of(runtime).mark_step(); });
}

}  // extern "C"
