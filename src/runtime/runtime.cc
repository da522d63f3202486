#include "runtime/runtime.h"

#include <atomic>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "runtime/device_probe.h"
#include "comm/mpi/mpi_error.h"
#include "comm/mpi/mpi_transport.h"
#include "comm/staged/staged_transport.h"
#if COHORT_HAVE_CUDA
#  include "comm/nccl/nccl_transport.h"
#endif
#include "core/logging.h"
#include "core/threads.h"
#include "runtime/mpi_process.h"

namespace cohort {
namespace {
std::atomic<bool> g_device_logged{false};

void free_comm(MPI_Comm& comm) {
  if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  comm = MPI_COMM_NULL;
}

// Collective over the node's ranks: how many of them may run on a CPU this process may
// run on (cohortrun binds each rank to cores of its own when they are enough).
int ranks_sharing_my_cpus(MPI_Comm local) {
  int size = 1, rank = 0;
  MPI_Comm_size(local, &size);
  MPI_Comm_rank(local, &rank);
  std::vector<cpu_set_t> masks(static_cast<size_t>(size));
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return size;
  mpi_check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, masks.data(), sizeof mine, MPI_BYTE, local),
            "MPI_Allgather (CPU affinity of the node's ranks)");
  return ranks_sharing_cpus(masks, static_cast<size_t>(rank));
}
}  // namespace

Runtime::Runtime(const Config& config) : config_(config) {
  set_log_level(parse_log_level(config_.get_string("log_level")));
  config_.get_string("device");  // a bad COHORT_DEVICE fails before MPI starts
  int requested_threads = static_cast<int>(config_.get_int("threads_per_rank"));

  mpi_process::ensure_initialized();
  try {
    const bool whole_job = config_.get_string("world") == "job";
    mpi_check(MPI_Comm_dup(whole_job ? MPI_COMM_WORLD : MPI_COMM_SELF, &world_),
              whole_job ? "MPI_Comm_dup(MPI_COMM_WORLD)" : "MPI_Comm_dup(MPI_COMM_SELF)");
    MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN);
    mpi_check(MPI_Comm_rank(world_, &layout_.rank), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(world_, &layout_.size), "MPI_Comm_size");
    mpi_check(MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, layout_.rank, MPI_INFO_NULL, &local_),
              "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    mpi_check(MPI_Comm_rank(local_, &layout_.local_rank), "MPI_Comm_rank(local)");
    mpi_check(MPI_Comm_size(local_, &layout_.local_size), "MPI_Comm_size(local)");
    mpi_check(MPI_Comm_split(world_, layout_.local_rank, layout_.rank, &cross_), "MPI_Comm_split(cross)");
    mpi_check(MPI_Comm_rank(cross_, &layout_.cross_rank), "MPI_Comm_rank(cross)");
    mpi_check(MPI_Comm_size(cross_, &layout_.cross_size), "MPI_Comm_size(cross)");
    set_log_rank(layout_.size > 1 ? layout_.rank : -1);
    thread_budget_ = cohort::thread_budget(ranks_sharing_my_cpus(local_), requested_threads);
    choose_device();
    find_shared_gpus();
    auto chunk = static_cast<size_t>(config_.get_int("allreduce_chunk_kb")) * 1024;
    auto window = static_cast<size_t>(config_.get_int("allreduce_window"));
    auto shm_slot = static_cast<size_t>(config_.get_int("allreduce_shm_kb")) * 1024;
    comm::EngineOptions engine_options = comm::EngineOptions::from_config(config_);
    // auto holds whenever models compute on the CPU, even where a GPU serves collectives.
    const std::string during_compute = config_.get_string("comm_during_compute");
    engine_options.hold_during_compute = during_compute == "hold" || (during_compute == "auto" && device_.is_host());
    engine_ = std::make_unique<comm::Engine>(
        std::make_unique<comm::MpiTransport>(world_, chunk, window, shm_slot), std::move(engine_options),
        [](const std::string& why) { mpi_process::poison(why); }, device_transport());
  } catch (...) {
    free_comm(device_bootstrap_);
    free_comm(cross_);
    free_comm(local_);
    free_comm(world_);
    throw;
  }
  // A program that exits without destroying this runtime gets it shut down at exit,
  // before MPI is finalized under its running engine.
  live_id_ = mpi_process::add_live_runtime(
      [](void* self) {
        try {
          static_cast<Runtime*>(self)->shutdown();
        } catch (...) {
          // At exit: shutdown() released what it could.
        }
      },
      this);
}

comm::DeviceTransportFactory Runtime::device_transport() {
  comm::DeviceTransportFactory f;
  const char* host_hint = "copy the tensor to host memory (kDLCPU) to reduce it over MPI";
#if COHORT_HAVE_CUDA
  if (collective_gpu_ >= 0) {
    // The engine thread creates the device transport; its MPI traffic (NCCL's unique id,
    // or the staged collectives) goes over a communicator of its own, never used by
    // another thread.
    mpi_check(MPI_Comm_dup(world_, &device_bootstrap_), "MPI_Comm_dup(device transport)");
    MPI_Comm_set_errhandler(device_bootstrap_, MPI_ERRORS_RETURN);
    f.device = {Device::Kind::kCuda, collective_gpu_};
    MPI_Comm bootstrap = device_bootstrap_;
    int id = collective_gpu_;
    std::shared_ptr<Allocator> memory = memory_->on(f.device);
    if (gpus_shared_) {
      std::shared_ptr<Allocator> pinned = memory_->pinned();
      const auto chunk = static_cast<size_t>(config_.get_int("allreduce_chunk_kb")) * 1024;
      const auto window = static_cast<size_t>(config_.get_int("allreduce_window"));
      const auto shm_slot = static_cast<size_t>(config_.get_int("allreduce_shm_kb")) * 1024;
      const Device d = f.device;
      f.create = [bootstrap, d, pinned, memory, chunk, window, shm_slot] {
        return std::make_unique<comm::StagedTransport>(
            std::make_unique<comm::MpiTransport>(bootstrap, chunk, window, shm_slot), d, pinned, memory);
      };
    } else {
      f.create = [bootstrap, id, memory] { return std::make_unique<comm::NcclTransport>(bootstrap, id, memory); };
    }
  } else if (config_.get_string("device") == "cpu") {
    f.unavailable =
        cat("this runtime was created with device=cpu; create it with device=auto to run collectives of CUDA "
            "tensors over NCCL, or ",
            host_hint);
  } else {
    f.unavailable = cat("no GPU is usable on this rank (", cuda_why_.empty() ? "no CUDA device found" : cuda_why_,
                        "); ", host_hint, ", or run on a machine with a GPU");
  }
#else
  f.unavailable = cat("this cohort was built without CUDA and NCCL (COHORT_WITH_CUDA); ", host_hint,
                      ", or use a cohort built with CUDA and NCCL");
#endif
  return f;
}

void Runtime::choose_device() {
  const std::string choice = config_.get_string("device");
  CudaProbe probe;
  if (choice != "cpu") probe = probe_cuda();
  cuda_device_count_ = probe.device_count;
  cuda_why_ = probe.why;
  if (choice == "cuda" && probe.device_count == 0)
    fail(Code::kUnsupported, "device=cuda was requested but no GPU is usable (", probe.why,
         "); use --device=cpu or --device=auto");
  if (choice != "cpu" && probe.device_count > 0) {
    collective_gpu_ = layout_.local_rank % probe.device_count;
    if (choice == "cuda" && !backend::cuda_backend_trains())
      fail(Code::kUnsupported, "device=cuda was requested but ", backend::kCudaCannotTrain,
           "; use --device=cpu, or a cohort built with the CUDA toolkit");
    select_cuda_device(collective_gpu_);
  }
  device_ =
      collective_gpu_ >= 0 && backend::cuda_backend_trains() ? Device{Device::Kind::kCuda, collective_gpu_} : Device{};
  if (!g_device_logged.exchange(true) && layout_.rank == 0)
    COHORT_LOG_INFO(layout_.size, " rank", layout_.size == 1 ? "" : "s", ", ", layout_.local_size, " on this node, ",
                    thread_budget_, " thread", thread_budget_ == 1 ? "" : "s", " per rank; ", device_summary());
}

void Runtime::find_shared_gpus() {
  // Every rank takes part (a rank without a GPU names itself), so the answer is one.
  constexpr int kIdBytes = 64;
  std::string id = collective_gpu_ >= 0 ? cuda_device_identity(collective_gpu_) : cat("no-gpu:", layout_.rank);
  id.resize(kIdBytes, '\0');
  std::vector<char> all(static_cast<size_t>(kIdBytes * layout_.local_size));
  mpi_check(MPI_Allgather(id.data(), kIdBytes, MPI_CHAR, all.data(), kIdBytes, MPI_CHAR, local_),
            "MPI_Allgather(device identities)");
  std::vector<std::string> ids;
  for (int r = 0; r < layout_.local_size; ++r) {
    const char* p = all.data() + static_cast<size_t>(r) * kIdBytes;
    ids.emplace_back(p, strnlen(p, kIdBytes));
  }
  const comm::DeviceSharing here = comm::device_sharing(ids);
  int mine = here.shared ? 1 : 0, any = 0;
  mpi_check(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, world_), "MPI_Allreduce(device sharing)");
  gpus_shared_ = any != 0;
  if (here.shared && layout_.local_rank == 0)
    COHORT_LOG_WARN(here.detail,
                    ": NCCL does not support two ranks on one GPU, so collectives of CUDA tensors go "
                    "through host memory (pinned staging buffers and the shared-memory allreduce) on "
                    "every rank; ranks on one GPU also slow each other's compute down");
  else if (gpus_shared_ && layout_.rank == 0)
    COHORT_LOG_WARN(
        "ranks of another node share a GPU: collectives of CUDA tensors go through host memory on every "
        "rank");
}

std::string Runtime::device_summary() const {
  std::string s = cat("compute on ", device_.to_string());
  if (cuda_device_count_ == 0)
    return cat(s, "; 0 CUDA devices (", cuda_why_.empty() ? "not probed: device=cpu" : cuda_why_, ")");
  if (device_.is_host() && collective_gpu_ >= 0) s += cat(" (", backend::kCudaCannotTrain, ")");
  s += cat("; ", cuda_device_count_, " CUDA device", cuda_device_count_ == 1 ? "" : "s", " seen");
  if (collective_gpu_ >= 0)
    s += cat(", cuda:", collective_gpu_, " serves collectives of CUDA tensors",
             gpus_shared_ ? " (through host memory: ranks share GPUs)" : "");
  return s;
}

Runtime::~Runtime() {
  try {
    shutdown();
  } catch (...) {
    // A destructor never throws; shutdown() already released what it could.
  }
}

void Runtime::shutdown() {
  if (shut_down_.exchange(true, std::memory_order_acq_rel)) return;
  if (mpi_process::poisoned()) {
    // A lost peer: the engine thread may sit in MPI forever, so it is abandoned, and
    // freeing communicators could hang too.
    if (engine_) engine_->abort();
    static_cast<void>(engine_.release());
  } else {
    engine_.reset();  // collective: waits until every rank's engine shuts down
    free_comm(device_bootstrap_);
    free_comm(cross_);
    free_comm(local_);
    free_comm(world_);
  }
  mpi_process::remove_live_runtime(live_id_);  // last: MPI may be finalized from now on
}

void Runtime::check_open(const char* what) const {
  if (is_shut_down())
    fail(Code::kInvalidState, what,
         " needs the runtime, which was destroyed (cohort_runtime_destroy); the objects made from it may only be "
         "destroyed now");
}

void Runtime::barrier() {
  mpi_process::check_not_poisoned();
  check_open("a barrier");
  mpi_check(MPI_Barrier(world_), "MPI_Barrier");
}

}  // namespace cohort
