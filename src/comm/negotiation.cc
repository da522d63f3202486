#include "comm/negotiation.h"

#include <algorithm>
#include <cstring>

namespace cohort::comm {
namespace {

class Writer {
 public:
  template <typename T>
  void pod(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void ints(const std::vector<int64_t>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) pod(x);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T pod() {
    if (pos_ + sizeof(T) > in_.size()) fail(Code::kInternal, "negotiation message truncated at byte ", pos_);
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    auto n = pod<uint32_t>();
    if (pos_ + n > in_.size()) fail(Code::kInternal, "negotiation message truncated at byte ", pos_);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> ints() {
    auto n = pod<uint32_t>();
    std::vector<int64_t> v;
    v.reserve(n);
    for (uint32_t i = 0; i < n; ++i) v.push_back(pod<int64_t>());
    return v;
  }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

bool Meta::same_signature(const Meta& o) const {
  return name == o.name && type == o.type && dtype == o.dtype && op == o.op && root == o.root &&
         prescale == o.prescale && postscale == o.postscale && shape == o.shape && splits == o.splits &&
         device == o.device;
}

std::string Meta::describe() const {
  std::string s = op_type_name(type);
  if (type == OpType::kAllreduce || type == OpType::kReducescatter) s += cat(" ", reduce_op_name(op));
  s += cat(" ", dtype_name(dtype), shape_string(shape));
  if (type == OpType::kBroadcast) s += cat(" root ", root);
  if (type == OpType::kAllreduce && (prescale != 1.0 || postscale != 1.0))
    s += cat(" prescale ", prescale, " postscale ", postscale);
  if (type == OpType::kAlltoall) s += cat(" splits ", shape_string(splits));
  if (device) s += " on cuda";
  return s;
}

std::string encode(const Message& m) {
  Writer w;
  w.pod<uint64_t>(m.submitted);
  w.pod<uint8_t>(m.shutting_down ? 1 : 0);
  w.pod<uint32_t>(static_cast<uint32_t>(m.metas.size()));
  for (const Meta& x : m.metas) {
    w.pod(static_cast<uint8_t>(x.kind));
    w.str(x.name);
    w.pod(static_cast<uint8_t>(x.type));
    w.pod(static_cast<uint8_t>(x.dtype));
    w.pod(static_cast<uint8_t>(x.op));
    w.pod(static_cast<uint8_t>(x.device ? 1 : 0));
    w.pod(x.root);
    w.pod(x.prescale);
    w.pod(x.postscale);
    w.ints(x.shape);
    w.ints(x.splits);
  }
  return w.take();
}

Message decode(const std::string& bytes) {
  Reader r(bytes);
  Message m;
  m.submitted = r.pod<uint64_t>();
  m.shutting_down = r.pod<uint8_t>() != 0;
  auto n = r.pod<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) {
    Meta x;
    x.kind = static_cast<Meta::Kind>(r.pod<uint8_t>());
    x.name = r.str();
    x.type = static_cast<OpType>(r.pod<uint8_t>());
    x.dtype = static_cast<DType>(r.pod<uint8_t>());
    x.op = static_cast<ReduceOp>(r.pod<uint8_t>());
    x.device = r.pod<uint8_t>() != 0;
    x.root = r.pod<int32_t>();
    x.prescale = r.pod<double>();
    x.postscale = r.pod<double>();
    x.shape = r.ints();
    x.splits = r.ints();
    m.metas.push_back(std::move(x));
  }
  return m;
}

namespace {
// Bit positions of CycleFlags in the exchanged word.
constexpr uint64_t kNothingAnnounced = uint64_t{1} << 0;
constexpr uint64_t kShuttingDown = uint64_t{1} << 1;
constexpr uint64_t kIdle = uint64_t{1} << 2;
constexpr uint64_t kReleasesHeld = uint64_t{1} << 3;
}  // namespace

uint64_t CycleFlags::to_word() const {
  return (nothing_announced ? kNothingAnnounced : 0) | (shutting_down ? kShuttingDown : 0) | (idle ? kIdle : 0) |
         (releases_held ? kReleasesHeld : 0);
}

CycleFlags CycleFlags::from_word(uint64_t word) {
  CycleFlags f;
  f.nothing_announced = (word & kNothingAnnounced) != 0;
  f.shutting_down = (word & kShuttingDown) != 0;
  f.idle = (word & kIdle) != 0;
  f.releases_held = (word & kReleasesHeld) != 0;
  return f;
}

Response agree(const std::string& name, std::vector<std::optional<Meta>> metas) {
  Response resp;
  resp.name = name;
  resp.metas = std::move(metas);
  const int size = static_cast<int>(resp.metas.size());
  int first = -1;
  for (int r = 0; r < size && first < 0; ++r)
    if (resp.metas[static_cast<size_t>(r)]) first = r;
  resp.agreed = *resp.metas[static_cast<size_t>(first)];
  const Meta& a = resp.agreed;
  bool rows_may_differ = a.type == OpType::kAllgather || a.type == OpType::kAlltoall;
  bool mismatch = false;
  for (const auto& m : resp.metas) {
    if (!m) continue;
    bool same = m->type == a.type && m->dtype == a.dtype && m->op == a.op && m->root == a.root &&
                m->prescale == a.prescale && m->postscale == a.postscale && m->device == a.device;
    if (rows_may_differ) {
      same = same && m->shape.size() == a.shape.size() && !m->shape.empty() &&
             std::equal(m->shape.begin() + 1, m->shape.end(), a.shape.begin() + 1);
    } else {
      same = same && m->shape == a.shape;
    }
    mismatch = mismatch || !same;
  }
  if (mismatch) {
    std::string detail;
    for (int r = 0; r < size; ++r) {
      const auto& m = resp.metas[static_cast<size_t>(r)];
      if (m) detail += cat("; rank ", r, ": ", m->describe());
    }
    resp.error = cat("collective '", name, "' was submitted differently across ranks", detail,
                     rows_may_differ ? " (only the first dimension may differ)" : "");
    return resp;
  }
  if (a.type == OpType::kBroadcast && !resp.metas[static_cast<size_t>(a.root)]) {
    resp.error = cat("collective '", name, "' (broadcast from root ", a.root, ") cannot run: the root rank ", a.root,
                     " has joined and has no data to send; broadcast from a rank that has not joined");
  }
  return resp;
}

bool AnnouncementTable::any_joined() const { return std::find(joined.begin(), joined.end(), true) != joined.end(); }

bool AnnouncementTable::any_shutting_down() const {
  return std::find(shutting_down.begin(), shutting_down.end(), true) != shutting_down.end();
}

std::vector<int> AnnouncementTable::missing(const Entry& e) const {
  std::vector<int> ranks;
  for (size_t r = 0; r < joined.size(); ++r)
    if (!e.metas[r] && !joined[r]) ranks.push_back(static_cast<int>(r));
  return ranks;
}

std::vector<int> AnnouncementTable::missing_for_good(const Entry& e) const {
  std::vector<int> ranks;
  for (int r : missing(e))
    if (shutting_down[static_cast<size_t>(r)]) ranks.push_back(r);
  return ranks;
}

std::vector<int> AnnouncementTable::never_joining() const {
  std::vector<int> ranks;
  for (size_t r = 0; r < joined.size(); ++r)
    if (shutting_down[r] && !joined[r]) ranks.push_back(static_cast<int>(r));
  return ranks;
}

std::string AnnouncementTable::submitted_per_rank() const {
  std::string counts;
  for (size_t r = 0; r < submitted.size(); ++r) counts += cat(r ? ", " : "", r, ": ", submitted[r]);
  return counts;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += cat(i ? ", " : "", ranks[i]);
  return s + "]";
}

Status peer_shutdown_status(const Meta& meta, const std::vector<int>& ranks) {
  const bool one = ranks.size() == 1;
  // "rank 1" or "ranks [1, 2]", spelled with `word` ("rank" or "Rank").
  auto who = [&](const char* word) { return one ? cat(word, " ", ranks.front()) : cat(word, "s ", rank_list(ranks)); };
  const bool join = meta.type == OpType::kJoin;
  std::string what = cat("collective '", meta.name, "' (", meta.describe(), ")");
  if (join || meta.type == OpType::kBarrier) what = op_type_name(meta.type);
  return Status(
      Code::kPeerShutdown,
      cat(what, " can never complete: ", who("rank"),
          one ? " has shut down its collective engine" : " have shut down their engines",
          " (cohort_runtime_destroy) without ", join ? "joining" : "submitting it", ". ", who("Rank"),
          " stopped making collective calls, most likely after an error of ", one ? "its" : "their", " own: look for ",
          one ? cat(who("rank"), "'s own error output") : cat("the error output of ", who("rank")),
          " for the cause, then end this rank too (cohort_runtime_destroy)"));
}

std::optional<size_t> ResponseCache::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void ResponseCache::put(const std::string& name, const std::vector<std::optional<Meta>>& metas) {
  if (capacity_ == 0) return;
  size_t bit;
  if (auto found = find(name)) {
    bit = *found;
  } else {
    // The lowest free slot, else the least recently used one.
    bit = capacity_;
    for (size_t i = 0; i < capacity_ && bit == capacity_; ++i)
      if (!slots_[i].used) bit = i;
    if (bit == capacity_) {
      bit = 0;
      for (size_t i = 1; i < capacity_; ++i)
        if (slots_[i].last_used < slots_[bit].last_used) bit = i;
      index_.erase(slots_[bit].name);
    }
    index_[name] = bit;
  }
  Slot& s = slots_[bit];
  s.used = true;
  s.name = name;
  s.metas = metas;
  s.last_used = ++clock_;
}

bool ResponseCache::erase(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return false;
  slots_[it->second] = Slot{};
  index_.erase(it);
  return true;
}

}  // namespace cohort::comm
