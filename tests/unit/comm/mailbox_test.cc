// Point-to-point messages through the engine (ranks as threads over the local
// transport): order per peer and tag, messages to oneself, inbox deliveries, a message
// that does not fit, bad arguments, receives left pending at shutdown, and two ranks
// exchanging messages while a third submits nothing at all.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "comm/engine.h"
#include "comm/local/local_transport.h"

namespace cohort::comm {
namespace {

void run_ranks(int n, const std::function<void(Engine&, int)>& fn) {
  auto world = std::make_shared<LocalWorld>(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      EngineOptions o;
      o.cycle_time_ms = 0.5;
      Engine engine(std::make_unique<LocalTransport>(world, r), o);
      fn(engine, r);
    });
  for (auto& t : threads) t.join();
}

Tensor ints(std::initializer_list<int64_t> values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI64);
  int64_t i = 0;
  for (int64_t v : values) t.data_as<int64_t>()[i++] = v;
  return t;
}

void expect_ok(const std::shared_ptr<Request>& r) {
  const Status s = r->wait();
  EXPECT_TRUE(s.is_ok()) << s.message();
}

TEST(CommMailbox, MessagesFromOnePeerWithOneTagArriveInOrder) {
  run_ranks(2, [](Engine& engine, int rank) {
    if (rank == 0) {
      for (int64_t k = 0; k < 5; ++k) expect_ok(engine.send(1, 7, ints({k, k * k})));
      expect_ok(engine.send(1, 8, ints({99})));
      return;
    }
    // Posted after the sends may have arrived, and in another order of tags.
    Tensor other = Tensor::empty({1}, DType::kI64);
    auto r8 = engine.recv(0, 8, other);
    for (int64_t k = 0; k < 5; ++k) {
      Tensor t = Tensor::empty({2}, DType::kI64);
      expect_ok(engine.recv(0, 7, t));
      EXPECT_EQ(t.data_as<int64_t>()[0], k);
      EXPECT_EQ(t.data_as<int64_t>()[1], k * k);
    }
    expect_ok(r8);
    EXPECT_EQ(other.data_as<int64_t>()[0], 99);
  });
}

TEST(CommMailbox, ARankSendsToItself) {
  run_ranks(1, [](Engine& engine, int) {
    Tensor in = Tensor::empty({3}, DType::kI64);
    auto r = engine.recv(0, 3, in);
    expect_ok(engine.send(0, 3, ints({4, 5, 6})));
    expect_ok(r);
    EXPECT_EQ(in.data_as<int64_t>()[2], 6);
  });
}

TEST(CommMailbox, AnInboxHearsOfEveryReceiveWithItsCookie) {
  run_ranks(3, [](Engine& engine, int rank) {
    if (rank != 0) {
      expect_ok(engine.send(0, 1, ints({rank * 10})));
      return;
    }
    auto inbox = engine.make_inbox();
    Tensor from1 = Tensor::empty({1}, DType::kI64), from2 = Tensor::empty({1}, DType::kI64);
    engine.recv(1, 1, from1, inbox, 101);
    engine.recv(2, 1, from2, inbox, 102);
    std::set<uint64_t> cookies;
    for (int i = 0; i < 2; ++i) {
      auto d = inbox->pop();
      ASSERT_TRUE(d.has_value());
      EXPECT_TRUE(d->status.is_ok()) << d->status.message();
      cookies.insert(d->cookie);
    }
    EXPECT_EQ(cookies, (std::set<uint64_t>{101, 102}));
    EXPECT_EQ(from1.data_as<int64_t>()[0], 10);
    EXPECT_EQ(from2.data_as<int64_t>()[0], 20);
    inbox->close();
    EXPECT_FALSE(inbox->pop().has_value());
  });
}

TEST(CommMailbox, AMessageThatDoesNotFillTheReceiveFailsIt) {
  run_ranks(2, [](Engine& engine, int rank) {
    if (rank == 0) {
      expect_ok(engine.send(1, 2, ints({1, 2})));
      expect_ok(engine.send(1, 3, ints({1, 2, 3, 4})));
      return;
    }
    Tensor longer = Tensor::empty({3}, DType::kI64), shorter = Tensor::empty({3}, DType::kI64);
    Status s = engine.recv(0, 2, longer)->wait();
    EXPECT_EQ(s.code(), Code::kMismatch);
    EXPECT_NE(s.message().find("16 bytes from rank 0 (tag 2)"), std::string::npos) << s.message();
    s = engine.recv(0, 3, shorter)->wait();
    EXPECT_EQ(s.code(), Code::kMismatch);
    EXPECT_NE(s.message().find("does not fit"), std::string::npos) << s.message();
  });
}

TEST(CommMailbox, BadPeersTagsAndTensorsAreRefused) {
  run_ranks(2, [](Engine& engine, int) {
    Tensor t = ints({1});
    try {
      engine.send(2, 0, t);
      ADD_FAILURE() << "peer 2 of 2 ranks accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("peer 2 is not a rank (0..1)"), std::string::npos) << e.what();
    }
    EXPECT_THROW(engine.recv(0, -1, t), Error);
    int64_t four[4] = {};
    EXPECT_THROW(engine.send(0, 0, Tensor::wrap(four, {2, 2}, DType::kI64, {}, {1, 2})), Error);  // not contiguous
  });
}

TEST(CommMailbox, AReceiveLeftPendingFailsWhenTheEngineShutsDown) {
  std::shared_ptr<Request> pending;
  auto inbox = std::make_shared<Inbox>();
  run_ranks(2, [&](Engine& engine, int rank) {
    if (rank == 1) pending = engine.recv(0, 5, Tensor::empty({1}, DType::kI64), inbox, 7);
  });
  ASSERT_TRUE(pending->test());
  EXPECT_FALSE(pending->status().is_ok());
  auto d = inbox->pop();
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->cookie, 7u);
  EXPECT_FALSE(d->status.is_ok());
}

TEST(CommMailbox, TwoRanksExchangeWhileAThirdSubmitsNothing) {
  // Rank 1 neither sends nor receives nor joins a collective until 0 and 2 are done:
  // messages need no negotiation, so nobody waits for it.
  std::atomic<bool> done{false};
  run_ranks(3, [&](Engine& engine, int rank) {
    if (rank == 1) {
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      const int peer = 2 - rank;
      for (int64_t k = 0; k < 50; ++k) {
        Tensor in = Tensor::empty({1}, DType::kI64);
        auto r = engine.recv(peer, 0, in);
        expect_ok(engine.send(peer, 0, ints({k + rank})));
        expect_ok(r);
        EXPECT_EQ(in.data_as<int64_t>()[0], k + peer);
      }
      if (rank == 0) done = true;
    }
    // And collectives still work afterwards, messages and all.
    Tensor x = ints({1});
    TensorEntry e;
    e.name = "after";
    e.input = x;
    expect_ok(engine.submit(e));
    EXPECT_EQ(x.data_as<int64_t>()[0], 3);
  });
}

}  // namespace
}  // namespace cohort::comm
