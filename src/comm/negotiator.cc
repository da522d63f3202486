#include "comm/negotiator.h"

#include <algorithm>

namespace cohort::comm {
namespace {

Meta meta_of(const TensorEntry& e) {
  Meta m;
  m.name = e.name;
  m.type = e.type;
  m.dtype = e.input.dtype();
  m.op = e.op;
  m.root = e.root;
  m.prescale = e.prescale;
  m.postscale = e.postscale;
  m.shape = e.input.shape();
  m.splits = e.splits;
  m.device = e.input.device().kind == Device::Kind::kCuda;
  return m;
}

}  // namespace

Negotiator::Negotiator(Transport& control, size_t cache_capacity, const StallInspector& stalls, Timeline& timeline,
                       EngineCounters& counters)
    : control_(control),
      stalls_(stalls),
      timeline_(timeline),
      counters_(counters),
      rank_(control.rank()),
      size_(control.size()),
      table_(size_),
      cache_(cache_capacity) {}

void Negotiator::add(TensorEntry e) {
  if (pending_by_name_.count(e.name)) {
    e.request->complete_part(
        Status(Code::kInvalidArgument, cat("tensor name '", e.name, "' is already pending on rank ", rank_,
                                           "; wait for it before submitting the name again")));
    return;
  }
  Pending p;
  p.meta = meta_of(e);
  p.entry = std::move(e);
  uint64_t seq = next_seq_++;
  pending_by_name_[p.entry.name] = seq;
  pending_.emplace(seq, std::move(p));
}

TensorEntry* Negotiator::entry(const std::string& name) {
  auto it = pending_by_name_.find(name);
  return it == pending_by_name_.end() ? nullptr : &pending_.at(it->second).entry;
}

void Negotiator::hold(const std::string& name) {
  auto it = pending_by_name_.find(name);
  if (it != pending_by_name_.end()) pending_.at(it->second).state = Pending::State::kHeld;
}

void Negotiator::announce(Message& msg, std::vector<uint64_t>& words, Clock::time_point now) {
  // Once some rank shuts down, only full announcements say what it will never submit.
  const bool use_cache =
      cache_.capacity() > 0 && !table_.any_joined() && !table_.any_shutting_down() && !shutting_down_;
  std::vector<uint64_t> withdrawn;
  for (auto& [seq, p] : pending_) {
    double age = std::chrono::duration<double>(now - p.entry.submitted).count();
    if (p.state == Pending::State::kCached && stalls_.needs_full_announcement(age)) p.skip_cache = true;
    if (p.state == Pending::State::kCached && (p.skip_cache || !use_cache)) p.state = Pending::State::kNew;
    if (p.state == Pending::State::kNew) {
      auto bit = use_cache && !p.skip_cache && p.entry.type != OpType::kBarrier && p.entry.type != OpType::kJoin
                     ? cache_.find(p.meta.name)
                     : std::nullopt;
      const auto* mine = bit ? &cache_.metas(*bit)[static_cast<size_t>(rank_)] : nullptr;
      if (mine && *mine && (*mine)->same_signature(p.meta)) {
        p.state = Pending::State::kCached;
        p.bit = *bit;
      } else {
        p.state = Pending::State::kAnnounced;
        msg.metas.push_back(p.meta);
      }
    }
    if (p.state == Pending::State::kCached) {
      words[1 + p.bit / 64] |= uint64_t{1} << (p.bit % 64);
    } else if (p.state == Pending::State::kAnnounced) {
      if (std::optional<Status> stalled = stalls_.stalled(p.meta, age, table_)) {
        ++stalled_;
        p.entry.request->complete_part(*stalled);
        Meta w = p.meta;
        w.kind = Meta::Kind::kWithdraw;
        msg.metas.push_back(std::move(w));
        withdrawn.push_back(seq);
      }
    }
  }
  for (uint64_t seq : withdrawn) {
    pending_by_name_.erase(pending_.at(seq).meta.name);
    pending_.erase(seq);
  }
}

Negotiator::Round Negotiator::negotiate(const Vote& mine, Clock::time_point now) {
  std::vector<uint64_t> words(1 + (cache_.capacity() + 63) / 64, 0);
  Message msg;
  msg.submitted = mine.submitted;
  msg.shutting_down = shutting_down_ = mine.shutting_down;
  announce(msg, words, now);

  CycleFlags flags;
  // A rank starting to shut down tells the others in a full exchange, even with nothing
  // to announce.
  flags.nothing_announced = msg.metas.empty() && !(mine.shutting_down && !table_.shutting_down[rank_]);
  flags.shutting_down = mine.shutting_down;
  flags.idle = pending_.empty();
  flags.releases_held = mine.releases_held;
  words[0] = flags.to_word();
  control_.and_words(words);
  const CycleFlags all = CycleFlags::from_word(words[0]);

  Round round;
  round.all_shutting_down = all.shutting_down;
  round.release = all.releases_held || all.shutting_down;
  int64_t ready_us = Timeline::now_us();
  if (timeline_.enabled())
    for (auto& [seq, p] : pending_)
      if (p.exchanged_us == 0) p.exchanged_us = ready_us;
  for (size_t w = 1; w < words.size(); ++w) {
    for (uint64_t bits = words[w]; bits; bits &= bits - 1) {
      size_t bit = (w - 1) * 64 + static_cast<size_t>(__builtin_ctzll(bits));
      Response r = agree(cache_.name(bit), cache_.metas(bit));
      r.cached = true;
      r.ready_us = ready_us;
      round.ready.push_back(std::move(r));
    }
  }
  if (!all.nothing_announced) {
    std::vector<std::string> messages = control_.allgather_bytes(encode(msg));
    round.full_exchange = true;
    size_t first_new = round.ready.size();
    process_messages(messages, round.ready);
    for (size_t i = first_new; i < round.ready.size(); ++i) round.ready[i].ready_us = ready_us;
  }
  return round;
}

void Negotiator::process_messages(const std::vector<std::string>& messages, std::vector<Response>& ready) {
  auto now = Clock::now();
  for (int r = 0; r < size_; ++r) {
    Message m = decode(messages[static_cast<size_t>(r)]);
    table_.submitted[static_cast<size_t>(r)] = m.submitted;
    if (m.shutting_down) table_.shutting_down[static_cast<size_t>(r)] = true;
    for (Meta& meta : m.metas) {
      if (meta.kind == Meta::Kind::kWithdraw) {
        if (table_.entries.erase(meta.name))
          table_.order.erase(std::find(table_.order.begin(), table_.order.end(), meta.name));
        continue;
      }
      if (meta.type == OpType::kJoin) {
        table_.joined[static_cast<size_t>(r)] = true;
        table_.last_joined = r;
        continue;
      }
      cache_.erase(meta.name);  // a full announcement means some rank's signature changed
      auto [it, inserted] = table_.entries.try_emplace(meta.name);
      if (inserted) {
        it->second.metas.resize(static_cast<size_t>(size_));
        it->second.first_seen = now;
        table_.order.push_back(meta.name);
      }
      it->second.metas[static_cast<size_t>(r)] = std::move(meta);
    }
  }
  std::vector<std::string> still_waiting;
  for (const std::string& name : table_.order) {
    AnnouncementTable::Entry& t = table_.entries.at(name);
    bool complete = true, with_joined = false;
    for (int r = 0; r < size_; ++r) {
      if (t.metas[static_cast<size_t>(r)]) continue;
      if (table_.joined[static_cast<size_t>(r)]) {
        with_joined = true;
      } else {
        complete = false;
      }
    }
    if (!complete) {
      still_waiting.push_back(name);
      continue;
    }
    Response resp = agree(name, std::move(t.metas));
    resp.with_joined = with_joined;
    ready.push_back(std::move(resp));
    table_.entries.erase(name);
  }
  table_.order.swap(still_waiting);
  if (std::all_of(table_.joined.begin(), table_.joined.end(), [](bool j) { return j; })) {
    Response resp;
    resp.name = kJoinName;
    resp.agreed.type = OpType::kJoin;
    resp.agreed.name = kJoinName;
    resp.agreed.root = table_.last_joined;
    ready.push_back(std::move(resp));
    std::fill(table_.joined.begin(), table_.joined.end(), false);
  } else if (std::vector<int> never = table_.never_joining(); !never.empty()) {
    fail_pending(kJoinName, never);
  }
  fail_abandoned();
}

void Negotiator::fail_abandoned() {
  if (!table_.any_shutting_down()) return;
  counters_.ranks_shutting_down.store(
      static_cast<uint64_t>(std::count(table_.shutting_down.begin(), table_.shutting_down.end(), true)),
      std::memory_order_relaxed);
  std::vector<std::string> kept;
  for (const std::string& name : table_.order) {
    std::vector<int> gone = table_.missing_for_good(table_.entries.at(name));
    if (gone.empty()) {
      kept.push_back(name);
      continue;
    }
    fail_pending(name, gone);
    table_.entries.erase(name);
  }
  table_.order.swap(kept);
}

void Negotiator::fail_pending(const std::string& name, const std::vector<int>& gone) {
  // A rank shutting down itself keeps its requests: its engine cancels them when it stops.
  auto it = pending_by_name_.find(name);
  if (shutting_down_ || it == pending_by_name_.end()) return;
  Pending& p = pending_.at(it->second);
  p.entry.request->complete_part(peer_shutdown_status(p.meta, gone));
  pending_.erase(it->second);
  pending_by_name_.erase(it);
}

void Negotiator::complete(Response& r, const Status& s) {
  bool counted = r.agreed.type != OpType::kJoin && r.agreed.type != OpType::kBarrier;
  if (counted) counters_.completed.fetch_add(1, std::memory_order_relaxed);  // before a waiter can look
  auto it = pending_by_name_.find(r.name);
  if (it != pending_by_name_.end()) {
    Pending& p = pending_.at(it->second);
    if (timeline_.enabled()) {
      int64_t exchanged = p.exchanged_us ? p.exchanged_us : r.ready_us;
      timeline_.span(r.name, "NEGOTIATE", Timeline::to_us(p.entry.submitted), exchanged);
      if (r.ready_us > exchanged) timeline_.span(r.name, "WAIT_FOR_OTHER_RANKS", exchanged, r.ready_us);
    }
    p.entry.request->complete_part(s);
    pending_.erase(it->second);
    pending_by_name_.erase(it);
  }
  if (!counted) return;
  if (r.cached) {
    if (auto bit = cache_.find(r.name)) cache_.touch(*bit);
  } else if (s.is_ok() && !r.with_joined) {
    cache_.put(r.name, r.metas);
  }
}

void Negotiator::recheck_cached() {
  const bool no_cache = table_.any_joined() || table_.any_shutting_down();
  for (auto& [seq, p] : pending_) {
    if (p.state != Pending::State::kCached) continue;
    auto bit = cache_.find(p.meta.name);
    if (no_cache || !bit || *bit != p.bit) p.state = Pending::State::kNew;
  }
}

void Negotiator::fail_all(const Status& s) {
  for (auto& [seq, p] : pending_) p.entry.request->complete_part(s);
  pending_.clear();
  pending_by_name_.clear();
}

}  // namespace cohort::comm
