#include "comm/mpi/mpi_transport.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "comm/mpi/mpi_error.h"

namespace cohort::comm {
namespace {

template <typename Codec, typename Fn>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  kernels::combine_loop<uint16_t, Codec>(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in),
                                         static_cast<size_t>(*len), Fn{});
}

template <typename Codec>
void create_ops(MPI_Op* ops) {
  mpi_check(MPI_Op_create(&half_op<Codec, kernels::SumFn>, 1, &ops[0]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&half_op<Codec, kernels::MinFn>, 1, &ops[1]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&half_op<Codec, kernels::MaxFn>, 1, &ops[2]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&half_op<Codec, kernels::ProdFn>, 1, &ops[3]), "MPI_Op_create");
}

int to_int(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX))
    fail(Code::kUnsupported, what, ": ", n, " bytes is more than MPI's int counts allow (", INT_MAX, ")");
  return static_cast<int>(n);
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm parent, size_t chunk_bytes, size_t window, size_t shm_slot_bytes)
    : chunk_bytes_(chunk_bytes), window_(std::max<size_t>(1, window)) {
  mpi_check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup (collective engine)");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  create_ops<kernels::F16Codec>(half_ops_[0]);
  create_ops<kernels::BF16Codec>(half_ops_[1]);
  mpi_check(MPI_Comm_dup(comm_, &p2p_), "MPI_Comm_dup (point-to-point messages)");
  MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN);
  int* tag_ub = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(p2p_, MPI_TAG_UB, &tag_ub, &found) == MPI_SUCCESS && found && tag_ub) tag_ub_ = *tag_ub;
  if (shm_slot_bytes > 0 && size_ > 1) map_shared_segment(shm_slot_bytes);
}

void MpiTransport::map_shared_segment(size_t slot_bytes) {
  struct NodeComm {
    MPI_Comm comm = MPI_COMM_NULL;
    ~NodeComm() {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
  } node;
  mpi_check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node.comm),
            "MPI_Comm_split_type (shared-memory allreduce)");
  int node_size = 0, local_rank = 0;
  MPI_Comm_size(node.comm, &node_size);
  MPI_Comm_rank(node.comm, &local_rank);
  int sizes[2] = {node_size, -node_size};  // min and -max over every rank
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce (node sizes)");
  if (sizes[0] != -sizes[1] || node_size == 1) return;  // uneven nodes, or one rank per node
  if (node_size < size_) {
    mpi_check(MPI_Comm_split(comm_, local_rank, rank_, &cross_), "MPI_Comm_split (ranks across nodes)");
    MPI_Comm_set_errhandler(cross_, MPI_ERRORS_RETURN);
  }
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each rank's region on its own pages
  // Open MPI does not align the regions: ask for a cache line more and align each
  // pointer up (the mapping is page-aligned in every process, so all agree).
  auto align = [](unsigned char* p) {
    return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p) + 63) / 64 * 64);
  };
  unsigned char* mine = nullptr;
  int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(ShmAllreduce::region_bytes(slot_bytes) + 64), 1, info,
                                   node.comm, &mine, &shm_window_);
  MPI_Info_free(&info);
  mpi_check(rc,
            "MPI_Win_allocate_shared (the shared-memory allreduce's segment; check the free space of /dev/shm, or "
            "set allreduce_shm_kb=0 to reduce over MPI_Allreduce instead)");
  ShmAllreduce::zero_counters(align(mine));
  std::vector<unsigned char*> regions(static_cast<size_t>(node_size));
  for (int q = 0; q < node_size; ++q) {
    MPI_Aint bytes = 0;
    int disp = 0;
    mpi_check(MPI_Win_shared_query(shm_window_, q, &bytes, &disp, &regions[static_cast<size_t>(q)]),
              "MPI_Win_shared_query");
    regions[static_cast<size_t>(q)] = align(regions[static_cast<size_t>(q)]);
  }
  mpi_check(MPI_Barrier(node.comm), "MPI_Barrier (shared-memory allreduce)");  // every region's counters are zero
  shm_ = std::make_unique<ShmAllreduce>(local_rank, std::move(regions), slot_bytes);
}

MpiTransport::~MpiTransport() {
  shm_.reset();
  if (shm_window_ != MPI_WIN_NULL) MPI_Win_free(&shm_window_);
  if (cross_ != MPI_COMM_NULL) MPI_Comm_free(&cross_);
  for (auto& [handle, p] : posted_) {
    if (!p.send) MPI_Cancel(&p.request);
    MPI_Request_free(&p.request);
  }
  if (p2p_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_);
  for (auto& row : half_ops_)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL && op != MPI_Op{}) MPI_Op_free(&op);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiTransport::abort_waits() {
  aborted_ = true;
  if (shm_) shm_->abort();
}

void MpiTransport::wait(MPI_Request& request, const char* call) {
  // Open MPI progresses only inside its calls, so the request is polled: for a few
  // microseconds at once (the peers are usually there), then between sleeps that grow to
  // kMaxPause. No yield loop: on a core shared with compute a yield hands the core over
  // for a whole time slice or, with nothing else to run, burns it.
  constexpr auto kPoll = std::chrono::microseconds(20), kMaxPause = std::chrono::microseconds(500);
  const auto poll_until = std::chrono::steady_clock::now() + kPoll;
  auto pause = std::chrono::microseconds(10);
  for (int done = 0;;) {
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    if (done) return;
    if (aborted_) fail(Code::kCancelled, call, " abandoned: the runtime is shutting down after an error");
    if (std::chrono::steady_clock::now() < poll_until) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kMaxPause);
  }
}

MPI_Datatype MpiTransport::mpi_type(DType t) const {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
    case DType::kF16:
    case DType::kBF16:
      return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

MPI_Op MpiTransport::mpi_op(DType t, kernels::Reduce op) const {
  if (t == DType::kF16 || t == DType::kBF16) return half_ops_[t == DType::kF16 ? 0 : 1][static_cast<int>(op)];
  switch (op) {
    case kernels::Reduce::kSum:
      return MPI_SUM;
    case kernels::Reduce::kMin:
      return MPI_MIN;
    case kernels::Reduce::kMax:
      return MPI_MAX;
    case kernels::Reduce::kProd:
      return MPI_PROD;
  }
  return MPI_SUM;
}

void MpiTransport::and_words(std::vector<uint64_t>& words) {
  if (shm_ && !hierarchical() && shm_->words_fit(words.size())) {
    shm_->and_words(words);
    return;
  }
  MPI_Request req;
  mpi_check(
      MPI_Iallreduce(MPI_IN_PLACE, words.data(), static_cast<int>(words.size()), MPI_UINT64_T, MPI_BAND, comm_, &req),
      "MPI_Iallreduce (negotiation)");
  wait(req, "MPI_Iallreduce (negotiation)");
}

std::vector<std::string> MpiTransport::allgather_bytes(const std::string& mine) {
  int n = to_int(mine.size(), "negotiation message");
  std::vector<int> counts(static_cast<size_t>(size_));
  mpi_check(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_), "MPI_Allgather (negotiation)");
  std::vector<int> displs = displacements(counts);
  std::string all(static_cast<size_t>(displs.back() + counts.back()), '\0');
  mpi_check(MPI_Allgatherv(mine.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, comm_),
            "MPI_Allgatherv (negotiation)");
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r)
    out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                             static_cast<size_t>(counts[static_cast<size_t>(r)])));
  return out;
}

void MpiTransport::allreduce(void* buf, size_t count, DType t, kernels::Reduce op) {
  allreduce_many({{buf, count}}, t, op);
}

ShmAllreduce::AcrossNodes MpiTransport::across_nodes(DType t, kernels::Reduce op) {
  if (!hierarchical()) return {};
  return [this, t, op](void* segment, size_t count) {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, segment, static_cast<int>(count), mpi_type(t), mpi_op(t, op), cross_),
              "MPI_Allreduce (across nodes)");
  };
}

void MpiTransport::allreduce_many_into(const std::vector<Reduction>& bufs, DType t, kernels::Reduce op) {
  if (!shm_) {
    Transport::allreduce_many_into(bufs, t, op);
    return;
  }
  const ShmAllreduce::AcrossNodes across = across_nodes(t, op);
  for (const Reduction& r : bufs) shm_->allreduce(r.in, r.out, r.count, t, op, across);
}

void MpiTransport::allreduce_many(const std::vector<std::pair<void*, size_t>>& bufs, DType t, kernels::Reduce op) {
  if (shm_) {
    const ShmAllreduce::AcrossNodes across = across_nodes(t, op);
    for (const auto& [buf, count] : bufs) shm_->allreduce(buf, count, t, op, across);
    return;
  }
  size_t esize = dtype_size(t);
  size_t chunk = chunk_bytes_ ? std::max<size_t>(1, chunk_bytes_ / esize) : std::max<size_t>(1, INT_MAX / 2);
  MPI_Datatype type = mpi_type(t);
  MPI_Op mop = mpi_op(t, op);
  std::vector<std::pair<char*, int>> pieces;
  for (const auto& [buf, count] : bufs)
    for (size_t first = 0; first < count; first += chunk)
      pieces.emplace_back(static_cast<char*>(buf) + first * esize, static_cast<int>(std::min(chunk, count - first)));
  if (pieces.size() == 1 || window_ == 1) {  // blocking calls use Open MPI's tuned algorithms
    for (const auto& [ptr, n] : pieces)
      mpi_check(MPI_Allreduce(MPI_IN_PLACE, ptr, n, type, mop, comm_), "MPI_Allreduce");
    return;
  }
  // A window of nonblocking piece reductions in flight: each piece stays cache-sized,
  // and the ranks need not meet once per piece (which costs a scheduler slice each
  // when cores are oversubscribed).
  std::vector<MPI_Request> requests(pieces.size(), MPI_REQUEST_NULL);
  size_t posted = 0;
  for (size_t done = 0; done < pieces.size(); ++done) {
    for (; posted < pieces.size() && posted < done + window_; ++posted)
      mpi_check(MPI_Iallreduce(MPI_IN_PLACE, pieces[posted].first, pieces[posted].second, type, mop, comm_,
                               &requests[posted]),
                "MPI_Iallreduce");
    mpi_check(MPI_Wait(&requests[done], MPI_STATUS_IGNORE), "MPI_Iallreduce");
  }
}

void MpiTransport::allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) {
  std::vector<int> counts;
  for (size_t b : bytes) counts.push_back(to_int(b, "allgather block"));
  std::vector<int> displs = displacements(counts);
  to_int(static_cast<size_t>(displs.back()) + bytes.back(), "allgather result");
  mpi_check(MPI_Allgatherv(send, counts[static_cast<size_t>(rank_)], MPI_BYTE, recv, counts.data(), displs.data(),
                           MPI_BYTE, comm_),
            "MPI_Allgatherv");
}

void MpiTransport::broadcast(void* buf, size_t bytes, int root) {
  const size_t chunk = size_t{64} << 20;
  for (size_t done = 0; done < bytes; done += chunk) {
    int n = static_cast<int>(std::min(chunk, bytes - done));
    mpi_check(MPI_Bcast(static_cast<char*>(buf) + done, n, MPI_BYTE, root, comm_), "MPI_Bcast");
  }
}

void MpiTransport::alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                             const std::vector<size_t>& recv_bytes) {
  std::vector<int> sc, rc;
  for (size_t b : send_bytes) sc.push_back(to_int(b, "alltoall block"));
  for (size_t b : recv_bytes) rc.push_back(to_int(b, "alltoall block"));
  std::vector<int> sd = displacements(sc), rd = displacements(rc);
  mpi_check(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, comm_),
            "MPI_Alltoallv");
}

void MpiTransport::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                                  kernels::Reduce op) {
  std::vector<int> c;
  for (size_t n : counts) c.push_back(to_int(n, "reducescatter block"));
  mpi_check(MPI_Reduce_scatter(send, recv, c.data(), mpi_type(t), mpi_op(t, op), comm_), "MPI_Reduce_scatter");
}

void MpiTransport::barrier() {
  MPI_Request req;
  mpi_check(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier");
  wait(req, "MPI_Ibarrier");
}

uint64_t MpiTransport::post_send(int peer, int tag, const void* buf, size_t bytes) {
  Posted p{MPI_REQUEST_NULL, true};
  mpi_check(MPI_Isend(buf, to_int(bytes, "message"), MPI_BYTE, peer, tag, p2p_, &p.request), "MPI_Isend");
  posted_.emplace(next_handle_, p);
  return next_handle_++;
}

uint64_t MpiTransport::post_recv(int peer, int tag, void* buf, size_t bytes) {
  Posted p{MPI_REQUEST_NULL, false};
  mpi_check(MPI_Irecv(buf, to_int(bytes, "message"), MPI_BYTE, peer, tag, p2p_, &p.request), "MPI_Irecv");
  posted_.emplace(next_handle_, p);
  return next_handle_++;
}

bool MpiTransport::test(uint64_t handle, size_t* bytes) {
  auto it = posted_.find(handle);
  require(it != posted_.end(), "point-to-point handle ", handle, " is not posted");
  int done = 0;
  MPI_Status status;
  const int rc = MPI_Test(&it->second.request, &done, &status);
  if (rc != MPI_SUCCESS) {
    const bool send = it->second.send;
    posted_.erase(it);
    int error_class = 0;
    MPI_Error_class(rc, &error_class);
    // A message longer than its receive fails that receive only.
    if (error_class == MPI_ERR_TRUNCATE) fail(Code::kMismatch, "MPI_Irecv: ", mpi_error_text(rc));
    mpi_check(rc, send ? "MPI_Isend" : "MPI_Irecv");
  }
  if (!done) return false;
  if (!it->second.send && bytes) {
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    *bytes = static_cast<size_t>(count);
  }
  posted_.erase(it);
  return true;
}

void MpiTransport::cancel(uint64_t handle) {
  auto it = posted_.find(handle);
  if (it == posted_.end()) return;
  // A receive nobody matched is withdrawn at once; a send already on its way is left to
  // finish on its own (freeing the request does not stop it).
  if (!it->second.send) MPI_Cancel(&it->second.request);
  MPI_Request_free(&it->second.request);
  posted_.erase(it);
}

}  // namespace cohort::comm
