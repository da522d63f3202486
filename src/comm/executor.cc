#include "comm/executor.h"

#include <cstring>

#include "core/copy.h"

namespace cohort::comm {
namespace {

int64_t row_elems(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// Rows of a reducescatter's first dimension that land on each rank.
std::vector<int64_t> scatter_rows(int64_t rows, int size) {
  std::vector<int64_t> out(static_cast<size_t>(size), rows / size);
  for (int r = 0; r < rows % size; ++r) ++out[static_cast<size_t>(r)];
  return out;
}

size_t nbytes(const Meta& m) { return static_cast<size_t>(shape_numel(m.shape)) * dtype_size(m.dtype); }

}  // namespace

double postscale_factor(const Meta& agreed, int size) {
  return agreed.postscale * (agreed.op == ReduceOp::kAverage ? 1.0 / size : 1.0);
}

Tensor joined_contribution(Transport& t, const Meta& agreed) {
  Tensor zeros = t.allocate(agreed.shape, agreed.dtype);
  t.zero(zeros.data(), zeros.nbytes());
  return zeros;
}

kernels::Reduce to_kernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return kernels::Reduce::kMin;
    case ReduceOp::kMax:
      return kernels::Reduce::kMax;
    case ReduceOp::kProduct:
      return kernels::Reduce::kProd;
    default:
      return kernels::Reduce::kSum;
  }
}

Executor::Executor(Transport& host, LazyDeviceTransport& device, Negotiator& negotiator, Timeline& timeline,
                   EngineCounters& counters, size_t fusion_bytes, std::function<void()> on_join)
    : host_(host),
      device_(device),
      negotiator_(negotiator),
      timeline_(timeline),
      counters_(counters),
      fusion_bytes_(fusion_bytes),
      on_join_(std::move(on_join)),
      rank_(host.rank()),
      size_(host.size()) {}

void Executor::execute(std::vector<Response>& ready) {
  // Whether `o` can be reduced in the same call as `r` (same host allreduce settings).
  auto combinable = [](const Response& r, const Response& o) {
    const Meta& a = r.agreed;
    const Meta& b = o.agreed;
    return o.error.empty() && b.type == OpType::kAllreduce && b.dtype == a.dtype && b.op == a.op &&
           b.prescale == a.prescale && b.postscale == a.postscale && !b.device;
  };
  auto large = [&](size_t bytes) { return bytes >= kDirectBytes || bytes > fusion_bytes_; };
  std::vector<bool> done(ready.size(), false);
  for (size_t i = 0; i < ready.size(); ++i) {
    if (done[i]) continue;
    Response& r = ready[i];
    if (!r.error.empty()) {
      negotiator_.complete(r, Status(Code::kMismatch, r.error));
      continue;
    }
    // agreed, so a joined rank picks the same transport
    if (r.agreed.type != OpType::kAllreduce) {
      run_one(r);
      continue;
    }
    if (r.agreed.device) {
      // Device allreduces of one setting that are ready together share one call, through
      // a device fusion buffer; a large one goes alone, in place.
      std::vector<Response*> batch{&r};
      size_t total = nbytes(r.agreed);
      for (size_t j = i + 1; j < ready.size() && !large(total); ++j) {
        const Meta& b = ready[j].agreed;
        if (done[j] || !ready[j].error.empty() || b.type != OpType::kAllreduce || !b.device ||
            b.dtype != r.agreed.dtype || b.op != r.agreed.op || b.prescale != r.agreed.prescale ||
            b.postscale != r.agreed.postscale || large(nbytes(b)) || total + nbytes(b) > fusion_bytes_)
          continue;
        total += nbytes(b);
        batch.push_back(&ready[j]);
        done[j] = true;
      }
      run_device_allreduce(batch);
      continue;
    }
    std::vector<Response*> batch{&r};
    if (large(nbytes(r.agreed))) {
      // Every large allreduce of this cycle with the same settings goes through one
      // pipelined call.
      for (size_t j = i + 1; j < ready.size(); ++j) {
        if (done[j] || !combinable(r, ready[j]) || !large(nbytes(ready[j].agreed))) continue;
        batch.push_back(&ready[j]);
        done[j] = true;
      }
      allreduce_direct(batch, host_);
      continue;
    }
    size_t total = nbytes(r.agreed);
    for (size_t j = i + 1; j < ready.size(); ++j) {
      if (done[j] || !combinable(r, ready[j])) continue;
      size_t bytes = nbytes(ready[j].agreed);
      if (bytes >= kDirectBytes || total + bytes > fusion_bytes_) continue;
      total += bytes;
      batch.push_back(&ready[j]);
      done[j] = true;
    }
    if (batch.size() == 1)
      allreduce_direct(batch, host_);  // alone in its call: no copies through the fusion buffer
    else
      allreduce_fused(batch);
  }
}

Transport* Executor::transport_for(Response& r) {
  if (!r.agreed.device) return &host_;
  std::string error;
  if (Transport* t = device_.get(host_, &error)) return t;
  negotiator_.complete(
      r, Status(Code::kUnsupported, cat("collective '", r.name, "' (", r.agreed.describe(), "): ", error)));
  return nullptr;
}

void Executor::run_one(Response& r) {
  Transport* t = transport_for(r);
  if (!t) return;
  const Meta& a = r.agreed;
  TensorEntry* e = negotiator_.entry(r.name);
  int64_t t0 = Timeline::now_us();
  if (e && a.type != OpType::kAllreduce) t->wait_event(e->ready);
  switch (a.type) {
    case OpType::kAllreduce:
      allreduce_direct({&r}, *t);  // records its own timeline span and completes r
      return;
    case OpType::kBroadcast:
      broadcast(a, e, *t);
      break;
    case OpType::kAllgather:
      allgather(r, e, *t);
      break;
    case OpType::kAlltoall:
      alltoall(r, e, *t);
      break;
    case OpType::kReducescatter:
      reducescatter(a, e, *t);
      break;
    case OpType::kBarrier:
      t->barrier();
      break;
    case OpType::kJoin:
      join(a, e);
      break;
  }
  if (timeline_.enabled()) timeline_.span(r.name, op_type_name(a.type), t0, Timeline::now_us());
  if (e) e->request->add_event(t->record_done());
  negotiator_.complete(r, Status::ok());
}

void Executor::allreduce_fused(const std::vector<Response*>& batch) {
  const Meta& a = batch.front()->agreed;
  size_t total = 0;
  for (Response* r : batch) total += nbytes(r->agreed);
  if (fusion_.size() < total) fusion_.resize(total);
  int64_t t0 = Timeline::now_us();
  size_t offset = 0;
  for (Response* r : batch) {
    size_t n = nbytes(r->agreed);
    if (TensorEntry* e = negotiator_.entry(r->name)) {
      e->ready.synchronize();
      if (n) copy_bytes(fusion_.data() + offset, e->input.data(), n);
    } else {
      host_.zero(fusion_.data() + offset, n);  // a rank that has joined contributes zeros
    }
    offset += n;
  }
  size_t count = total / dtype_size(a.dtype);
  kernels::scale(fusion_.data(), count, a.dtype, a.prescale);
  int64_t t1 = Timeline::now_us();
  host_.allreduce(fusion_.data(), count, a.dtype, to_kernel(a.op));
  kernels::scale(fusion_.data(), count, a.dtype, postscale_factor(a, size_));
  int64_t t2 = Timeline::now_us();
  offset = 0;
  for (Response* r : batch) {
    size_t n = nbytes(r->agreed);
    TensorEntry* e = negotiator_.entry(r->name);
    if (e && n) copy_bytes(e->output.data(), fusion_.data() + offset, n);
    offset += n;
  }
  int64_t t3 = Timeline::now_us();
  if (timeline_.enabled()) {
    for (Response* r : batch) {
      timeline_.span(r->name, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
      timeline_.span(r->name, "ALLREDUCE", t1, t2);
      timeline_.span(r->name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
    }
  }
  if (batch.size() > 1) counters_.fused_batches.fetch_add(1, std::memory_order_relaxed);
  for (Response* r : batch) negotiator_.complete(*r, Status::ok());
}

void Executor::run_device_allreduce(const std::vector<Response*>& batch) {
  Transport* t = transport_for(*batch.front());
  if (!t) {  // every one of them fails with the reason
    for (size_t k = 1; k < batch.size(); ++k) transport_for(*batch[k]);
    return;
  }
  if (batch.size() == 1)
    allreduce_direct(batch, *t);
  else
    allreduce_fused_device(batch, *t);
}

void Executor::allreduce_fused_device(const std::vector<Response*>& batch, Transport& t) {
  const Meta& a = batch.front()->agreed;
  size_t total = 0;
  for (Response* r : batch) total += nbytes(r->agreed);
  // One device buffer, kept across cycles (allocated on the transport's stream, so its
  // reuse is ordered after the collectives that read it).
  if (device_fusion_.nbytes() < total) device_fusion_ = t.allocate({static_cast<int64_t>(total)}, DType::kU8);
  auto* fusion = static_cast<unsigned char*>(device_fusion_.data());
  const int64_t t0 = Timeline::now_us();
  size_t offset = 0;
  for (Response* r : batch) {
    const size_t n = nbytes(r->agreed);
    if (TensorEntry* e = negotiator_.entry(r->name)) {
      t.wait_event(e->ready);  // after the producer's work on its own stream
      if (n) t.copy(fusion + offset, e->input.data(), n, e->input.device());
    } else {
      t.zero(fusion + offset, n);  // a rank that has joined contributes zeros
    }
    offset += n;
  }
  const size_t count = total / dtype_size(a.dtype);
  t.scale(fusion, count, a.dtype, a.prescale);
  t.allreduce(fusion, count, a.dtype, to_kernel(a.op));
  t.scale(fusion, count, a.dtype, postscale_factor(a, size_));
  offset = 0;
  for (Response* r : batch) {
    const size_t n = nbytes(r->agreed);
    TensorEntry* e = negotiator_.entry(r->name);
    if (e && n) t.copy(e->output.data(), fusion + offset, n, e->output.device());
    offset += n;
  }
  const Event done = t.record_done();
  if (timeline_.enabled()) {
    const int64_t t1 = Timeline::now_us();
    for (Response* r : batch) timeline_.span(r->name, "ALLREDUCE", t0, t1);
  }
  counters_.fused_batches.fetch_add(1, std::memory_order_relaxed);
  for (Response* r : batch) {
    if (TensorEntry* e = negotiator_.entry(r->name)) e->request->add_event(done);
    negotiator_.complete(*r, Status::ok());
  }
}

void Executor::allreduce_direct(const std::vector<Response*>& batch, Transport& t) {
  const Meta& a = batch.front()->agreed;
  int64_t t0 = Timeline::now_us();
  // Host tensors reduce straight from the input into the output; device tensors, or an
  // input to scale first, are copied into the output and reduced there in place.
  const bool into = &t == &host_ && a.prescale == 1.0;
  std::vector<Transport::Reduction> bufs;
  std::vector<Tensor> zeros;
  for (Response* r : batch) {
    Transport::Reduction b{nullptr, nullptr, static_cast<size_t>(shape_numel(r->agreed.shape))};
    if (TensorEntry* e = negotiator_.entry(r->name)) {
      t.wait_event(e->ready);
      b.in = e->input.data();
      b.out = e->output.data();
      if (!into && b.out != b.in && b.count) t.copy(b.out, b.in, nbytes(r->agreed), e->input.device());
      if (!into) b.in = b.out;
    } else {
      zeros.push_back(joined_contribution(t, r->agreed));
      b.in = b.out = zeros.back().data();
    }
    if (b.in == b.out) t.scale(b.out, b.count, a.dtype, a.prescale);
    bufs.push_back(b);
  }
  if (into) {
    t.allreduce_many_into(bufs, a.dtype, to_kernel(a.op));
  } else {
    std::vector<std::pair<void*, size_t>> in_place;
    for (const Transport::Reduction& b : bufs) in_place.emplace_back(b.out, b.count);
    t.allreduce_many(in_place, a.dtype, to_kernel(a.op));
  }
  const double post = postscale_factor(a, size_);
  for (const Transport::Reduction& b : bufs) t.scale(b.out, b.count, a.dtype, post);
  if (timeline_.enabled()) {
    int64_t t1 = Timeline::now_us();
    for (Response* r : batch) timeline_.span(r->name, "ALLREDUCE", t0, t1);
  }
  const Event done = t.record_done();
  for (Response* r : batch) {
    if (TensorEntry* e = negotiator_.entry(r->name)) e->request->add_event(done);
    negotiator_.complete(*r, Status::ok());
  }
}

void Executor::broadcast(const Meta& a, TensorEntry* e, Transport& t) {
  size_t n = nbytes(a);
  Tensor scratch;
  void* buf = nullptr;
  if (e) {
    buf = e->output.data();
    if (rank_ == a.root && buf != e->input.data() && n) t.copy(buf, e->input.data(), n, e->input.device());
  } else {
    scratch = t.allocate(a.shape, a.dtype);  // receives the root's data, then dropped
    buf = scratch.data();
  }
  t.broadcast(buf, n, a.root);
}

void Executor::allgather(const Response& r, TensorEntry* e, Transport& t) {
  const Meta& a = r.agreed;
  Shape out_shape = a.shape;
  out_shape[0] = 0;
  std::vector<size_t> bytes(static_cast<size_t>(size_), 0);
  size_t row = static_cast<size_t>(row_elems(a.shape)) * dtype_size(a.dtype);
  for (int q = 0; q < size_; ++q) {
    const auto& m = r.metas[static_cast<size_t>(q)];
    int64_t rows = m ? m->shape[0] : 0;  // a rank that has joined contributes no rows
    out_shape[0] += rows;
    bytes[static_cast<size_t>(q)] = static_cast<size_t>(rows) * row;
  }
  Tensor out = t.allocate(out_shape, a.dtype);
  t.allgatherv(e ? e->input.data() : nullptr, out.data(), bytes);
  if (e) e->request->set_output(out);
}

void Executor::alltoall(const Response& r, TensorEntry* e, Transport& t) {
  // A rank that has joined sends and receives nothing; the rows others meant for it
  // are dropped.
  const Meta& a = r.agreed;
  size_t row = static_cast<size_t>(row_elems(a.shape)) * dtype_size(a.dtype);
  std::vector<size_t> send(static_cast<size_t>(size_), 0), recv(static_cast<size_t>(size_), 0);
  std::vector<int64_t> recv_rows(static_cast<size_t>(size_), 0);
  Shape out_shape = a.shape;
  out_shape[0] = 0;
  Shape packed_shape = a.shape;
  packed_shape[0] = 0;
  for (int q = 0; q < size_; ++q) {
    const auto& m = r.metas[static_cast<size_t>(q)];
    if (!e || !m) continue;
    send[static_cast<size_t>(q)] = static_cast<size_t>(e->splits[static_cast<size_t>(q)]) * row;
    packed_shape[0] += e->splits[static_cast<size_t>(q)];
    recv_rows[static_cast<size_t>(q)] = m->splits[static_cast<size_t>(rank_)];
    recv[static_cast<size_t>(q)] = static_cast<size_t>(recv_rows[static_cast<size_t>(q)]) * row;
    out_shape[0] += recv_rows[static_cast<size_t>(q)];
  }
  const void* src = e ? e->input.data() : nullptr;
  Tensor packed;
  if (e && r.with_joined) {
    // Leaves out the rows meant for ranks that have joined.
    packed = t.allocate(packed_shape, a.dtype);
    size_t from = 0, to = 0;
    for (int q = 0; q < size_; ++q) {
      size_t n = static_cast<size_t>(e->splits[static_cast<size_t>(q)]) * row;
      if (r.metas[static_cast<size_t>(q)] && n) {
        t.copy(static_cast<char*>(packed.data()) + to, static_cast<const char*>(src) + from, n, e->input.device());
        to += n;
      }
      from += n;
    }
    src = packed.data();
  }
  Tensor out = t.allocate(out_shape, a.dtype);
  t.alltoallv(src, send, out.data(), recv);
  if (e) e->request->set_output(out, recv_rows);
}

void Executor::reducescatter(const Meta& a, TensorEntry* e, Transport& t) {
  std::vector<int64_t> rows = scatter_rows(a.shape[0], size_);
  size_t row = static_cast<size_t>(row_elems(a.shape));
  std::vector<size_t> counts;
  for (int64_t n : rows) counts.push_back(static_cast<size_t>(n) * row);
  Shape out_shape = a.shape;
  out_shape[0] = rows[static_cast<size_t>(rank_)];
  Tensor out = t.allocate(out_shape, a.dtype);
  Tensor scaled;
  const void* send = nullptr;
  if (!e) {
    scaled = joined_contribution(t, a);
    send = scaled.data();
  } else if (a.prescale != 1.0) {
    scaled = t.allocate(a.shape, a.dtype);
    t.copy(scaled.data(), e->input.data(), scaled.nbytes(), e->input.device());
    t.scale(scaled.data(), static_cast<size_t>(scaled.numel()), a.dtype, a.prescale);
    send = scaled.data();
  } else {
    send = e->input.data();
  }
  t.reduce_scatter(send, out.data(), counts, a.dtype, to_kernel(a.op));
  t.scale(out.data(), static_cast<size_t>(out.numel()), a.dtype, postscale_factor(a, size_));
  if (e) e->request->set_output(out);
}

void Executor::join(const Meta& a, TensorEntry* e) {
  on_join_();  // before the request completes: the caller's next barrier is numbered afresh
  if (e) e->request->set_join_last_rank(a.root);
}

}  // namespace cohort::comm
